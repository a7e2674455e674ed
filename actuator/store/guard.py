"""The fleet facts a live case's decision is guarded by, read in one statement.

A step used to read them one query each (firing episodes, the breaker, SIGTERMs on the
node in the hour and in the fleet in the minute, the owner's keep): five round trips per
step, most of a step's store time on PostgreSQL. One statement of scalar subqueries reads
the same rows, from one snapshot on either backend.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from actuator.ladder import LIMITED
from actuator.store.database import Database
from actuator.store.keeps import ACTIVE_KEEP


@dataclass(frozen=True)
class KeepKey:
    """The process a keep was asked for: its node, pid, start ticks and boot."""

    node: str
    pid: int
    start_ticks: int
    boot_id: str


@dataclass(frozen=True)
class GuardFacts:
    unresolved: int  # the case's episodes still firing
    breaker_open: bool
    terminations_node: int  # SIGTERMs on the case's node since `node_since`
    terminations_fleet: int  # SIGTERMs anywhere since `fleet_since`
    kept_until: float | None  # the latest active keep of `keep` (wall), None when none


class GuardQueries(Database):
    def guard_facts(
        self,
        case_id: int,
        node: str,
        *,
        node_since: float,
        fleet_since: float,
        clock: str,
        keep: KeepKey | None,
        now: float,
    ) -> GuardFacts:
        """The facts of `case_id`'s guard. SIGTERMs are counted by the ladder's limited
        rung's stamp since a moment on the clock `clock` (Database.clock_id): a reading of
        another clock (an earlier boot) says nothing about "since". Not the target's boot
        id: a central actuator's cases are on other nodes' boots. `keep`: the process whose
        keep, asked before its case opened, counts (None: none is read)."""
        assert LIMITED.stamps is not None  # a column name from the ladder, never from input
        column = LIMITED.stamps.mono
        params: list[Any] = [case_id, node_since, clock, node, fleet_since, clock]
        kept = "NULL"
        if keep is not None:
            kept = f"(SELECT until_ts {ACTIVE_KEEP})"
            params += [keep.node, keep.pid, keep.start_ticks, keep.boot_id, now]
        row = self._read(
            "SELECT "
            "(SELECT COUNT(*) FROM episodes WHERE case_id = ? AND status = 'firing') AS firing, "
            "COALESCE((SELECT open FROM breaker WHERE id = 1), 0) AS breaker_open, "
            f"(SELECT COUNT(*) FROM cases WHERE {column} >= ? AND clock = ? AND node = ?) "
            "AS on_node, "
            f"(SELECT COUNT(*) FROM cases WHERE {column} >= ? AND clock = ?) AS in_fleet, "
            f"{kept} AS kept_until",
            tuple(params),
        )[0]
        return GuardFacts(
            unresolved=int(row["firing"]),
            breaker_open=bool(row["breaker_open"]),
            terminations_node=int(row["on_node"]),
            terminations_fleet=int(row["in_fleet"]),
            kept_until=None if row["kept_until"] is None else float(row["kept_until"]),
        )
