"""Cases: one row per reclaim case, changed only by compare-and-set on its version, with
its timeline; rearming and pruning."""

from __future__ import annotations

import dataclasses
import functools
import json
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from typing import Any

from actuator.ladder import SIGNALLED_STATES
from actuator.models import LIVE_STATES, Case, Member, Reason, State, Target
from actuator.store.database import DUPLICATE, Conn, Database, Row, rowcounts
from actuator.store.lease import Fence, check_fence

# The key of "same process" (Target.key): node, boot id, pid, start ticks, GPU uuid.
TargetKey = tuple[str, str, int, int, str]
NODES_PER_READ = 500  # nodes named in one statement (SQLite allows 32,766 parameters)
# Case fields kept in their own columns (queried or indexed); every other field of the
# dataclass lives in the `data` JSON, so a new field needs no schema change.
CASE_COLUMNS = (
    "id",
    "state",
    "version",
    "node",
    "pid",
    "start_time",
    "start_ticks",
    "boot_id",
    "uuid",
    "created",
    "updated",
    "term_at",
    "reason_code",
    "user",
    "freed_bytes",
    "created_mono",
    "term_mono",
    "followup",
    "clock",
)
CASE_DATA_FIELDS = tuple(
    f.name for f in dataclasses.fields(Case) if f.name not in CASE_COLUMNS and f.name != "members"
)


@dataclass(frozen=True)
class Transition:
    """One case to move to `state` (its other fields already updated by the caller)."""

    case: Case
    state: State
    reason: str
    evidence: dict[str, Any]
    now: float
    reason_code: str = ""
    mono: float | None = None


_Outcome = tuple[State, str, str, float, float | None, float | None]


def _outcome(case: Case) -> _Outcome:
    """The fields a transition sets, to put back when it is not made."""
    return (case.state, case.reason, case.reason_code, case.updated, case.ended_at, case.ended_mono)


def _restore(case: Case, outcome: _Outcome) -> None:
    (case.state, case.reason, case.reason_code, case.updated, case.ended_at, case.ended_mono) = (
        outcome
    )


def _members(row: Row, data: dict[str, Any] | None = None) -> list[Member]:
    """The recorded tree: its own column, or in `data` for a row written before the column."""
    if row["members"] is not None:
        return [Member(**m) for m in json.loads(row["members"])]
    if data is None:
        data = json.loads(row["data"])
    return [Member(**m) for m in data.get("members", [])]


def row_to_case(row: Row) -> Case:
    data = json.loads(row["data"])
    members = _members(row, data)
    fields = {k: row[k] for k in CASE_COLUMNS}
    fields["state"] = State(fields["state"])
    fields.update({k: data[k] for k in CASE_DATA_FIELDS if k in data})
    return Case(members=members, **fields)


# What row_to_case reads of a row: equal values parse to an equal case.
_PARSED_FROM = (*CASE_COLUMNS, "data", "members")
_CONTAINERS = (dict, list)


def _fresh(value: dict[Any, Any] | list[Any]) -> dict[Any, Any] | list[Any]:
    """A copy of a JSON-like container with every container inside copied too."""
    if isinstance(value, dict):
        return {k: _fresh(v) if isinstance(v, _CONTAINERS) else v for k, v in value.items()}
    return [_fresh(v) if isinstance(v, _CONTAINERS) else v for v in value]


def copy_case(case: Case) -> Case:
    """A case that shares no mutable part with `case` (Members are frozen; the rest of a
    case is scalars and the JSON-like containers copied here), at half a parse's cost."""
    copy = object.__new__(Case)
    copy.__dict__.update(
        {k: _fresh(v) if isinstance(v, _CONTAINERS) else v for k, v in case.__dict__.items()}
    )
    return copy


class ParsedCases:
    """The live cases as last parsed, each with the row content it was parsed from.

    Every pass reads every live case, and parsing them was most of what a pass costs while
    cases only wait out their grace. A row whose content is what it was at the last read
    is handed out again as a copy (the reconciler changes cases before writing them, so no
    two reads share one object); any other row is parsed. The key is every column the parse
    reads, not `version`: a write may leave `version` as it was (the re-arm mark), and one
    by another worker or replica changes the content all the same."""

    def __init__(self) -> None:
        self._parsed: dict[int, tuple[tuple[Any, ...], Case]] = {}

    def cases(self, rows: Sequence[Row]) -> list[Case]:
        parsed: dict[int, tuple[tuple[Any, ...], Case]] = {}
        for row in rows:
            key = tuple(row[k] for k in _PARSED_FROM)
            known = self._parsed.get(row["id"])
            parsed[row["id"]] = known if known and known[0] == key else (key, row_to_case(row))
        self._parsed = parsed  # only the live set is kept
        return [copy_case(case) for _, case in parsed.values()]


def case_data(case: Case) -> str:
    data: dict[str, Any] = {k: getattr(case, k) for k in CASE_DATA_FIELDS}
    return json.dumps(data, separators=(",", ":"))


def case_members(case: Case) -> str:
    """The recorded tree in a column of its own: read alone for the TERM decisions on the
    node (signalled_trees), without the rest of each case."""
    return json.dumps([m.__dict__ for m in case.members], separators=(",", ":"))


def _case_row(case: Case, skip: tuple[str, ...]) -> dict[str, Any]:
    """The case's columns but `skip`, in CASE_COLUMNS' order, then live, data, members."""
    row = {k: getattr(case, k) for k in CASE_COLUMNS if k not in skip}
    row["state"] = str(case.state)
    row["live"] = 1 if case.state in LIVE_STATES else 0
    row["data"], row["members"] = case_data(case), case_members(case)
    return row


_UPDATE_SKIPS = ("id", "version")
_UPDATE_CASE = (
    "UPDATE cases SET "
    + ", ".join(
        f'"{k}" = ?'
        for k in (*(c for c in CASE_COLUMNS if c not in _UPDATE_SKIPS), "live", "data", "members")
    )
    + ", version = version + 1 WHERE id = ? AND version = ?"
)


def insert_case(conn: Conn, case: Case, evidence: dict[str, Any]) -> None:
    insert_cases(conn, [(case, evidence)])


def insert_cases(conn: Conn, cases: Sequence[tuple[Case, dict[str, Any]]]) -> None:
    """New cases, each given its id, and their first timeline entries (those in one
    statement: on PostgreSQL one round trip, database.rowcounts)."""
    for case, _ in cases:
        row = _case_row(case, ("id",))
        names = ", ".join(f'"{k}"' for k in row)
        cur = conn.execute(
            f"INSERT INTO cases ({names}) VALUES ({', '.join('?' for _ in row)}) RETURNING id",
            tuple(row.values()),
        )
        case.id = int(cur.fetchone()["id"])
    rowcounts(
        conn,
        "INSERT INTO timeline (case_id, ts, state, reason, evidence) VALUES (?,?,?,?,?)",
        [
            (case.id, case.created, str(case.state), case.reason, json.dumps(evidence))
            for case, evidence in cases
        ],
    )


class CaseQueries(Database):
    def live_case_for(self, target: Target) -> Case | None:
        rows = self._read(
            "SELECT * FROM cases WHERE live = 1 AND node = ? AND boot_id = ? AND pid = ? "
            "AND start_ticks = ? AND uuid = ?",
            target.key,
        )
        return row_to_case(rows[0]) if rows else None

    def live_case_ids_on(self, nodes: Collection[str]) -> dict[TargetKey, int]:
        """The live cases on `nodes`, by their target's key (Target.key): one read for a
        whole ingest batch's lookups, where `live_case_for` was a round trip per alert on
        PostgreSQL (docs/performance.md, "a write's rows in one round trip")."""
        names = sorted(set(nodes))
        found: dict[TargetKey, int] = {}
        for at in range(0, len(names), NODES_PER_READ):
            chunk = names[at : at + NODES_PER_READ]
            rows = self._read(
                "SELECT id, node, boot_id, pid, start_ticks, uuid FROM cases WHERE live = 1 "
                f"AND node IN ({', '.join('?' * len(chunk))})",
                tuple(chunk),
            )
            for r in rows:
                key = (r["node"], r["boot_id"], int(r["pid"]), int(r["start_ticks"]), r["uuid"])
                found[key] = int(r["id"])
        return found

    def get_case(self, case_id: int) -> Case | None:
        rows = self._read("SELECT * FROM cases WHERE id = ?", (case_id,))
        return row_to_case(rows[0]) if rows else None

    @functools.cached_property
    def _live_parsed(self) -> ParsedCases:
        return ParsedCases()

    def live_cases(self) -> list[Case]:
        return self._live_parsed.cases(self._read("SELECT * FROM cases WHERE live = 1"))

    def signalled_trees(self, node: str, boot_id: str) -> dict[tuple[int, int], set[int]]:
        """(pid, start ticks) -> ids of the live cases on the node and boot that are
        signalling that process (their recorded trees), so that no process gets one step
        twice (a DataLoader worker flagged on its own while its parent's tree is reclaimed)."""
        # The members alone, once per node's pass (actuator/signalled.py).
        rows = self._read(
            "SELECT id, pid, start_ticks, members, data FROM cases WHERE live = 1 AND node = ? "
            "AND boot_id = ? AND state IN (?, ?)",
            (node, boot_id, *sorted(str(s) for s in SIGNALLED_STATES)),
        )
        found: dict[tuple[int, int], set[int]] = {}
        for row in rows:
            tree = [(m.pid, m.start_ticks) for m in _members(row)]
            for key in tree or [(row["pid"], row["start_ticks"])]:
                found.setdefault(key, set()).add(row["id"])
        return found

    def list_cases(
        self,
        *,
        state: str | None = None,
        node: str | None = None,
        user: str | None = None,
        pid: int | None = None,
        limit: int = 100,
    ) -> list[Case]:
        sql = "SELECT * FROM cases WHERE 1 = 1"
        params: list[Any] = []
        for column, value in (("state", state), ("node", node), ("user", user), ("pid", pid)):
            if value is not None:
                sql += f' AND "{column}" = ?'
                params.append(value)
        sql += " ORDER BY id DESC LIMIT ?"
        params.append(limit)
        return [row_to_case(r) for r in self._read(sql, tuple(params))]

    def timeline(self, case_id: int) -> list[dict[str, Any]]:
        rows = self._read("SELECT * FROM timeline WHERE case_id = ? ORDER BY id", (case_id,))
        return [
            {
                "ts": r["ts"],
                "state": r["state"],
                "reason": r["reason"],
                "evidence": json.loads(r["evidence"]),
            }
            for r in rows
        ]

    def _update_case(self, conn: Conn, case: Case, old_version: int) -> bool:
        (made,) = self._update_cases(conn, [(case, old_version)])
        return made

    def _update_cases(self, conn: Conn, cases: Sequence[tuple[Case, int]]) -> list[bool]:
        """Compare-and-set each case's row from its stored version; whether each was made.
        One statement for all of them (on PostgreSQL one round trip, database.rowcounts)."""
        rows = [
            (*_case_row(case, _UPDATE_SKIPS).values(), case.id, version) for case, version in cases
        ]
        return [count == 1 for count in rowcounts(conn, _UPDATE_CASE, rows)]

    def transition(
        self,
        case: Case,
        new_state: State,
        *,
        reason: str,
        evidence: dict[str, Any],
        now: float,
        reason_code: str = "",
        mono: float | None = None,
        fence: Fence | None = None,
    ) -> Case | None:
        """Compare-and-set the case to `new_state`; None when someone else changed it first.
        With a `fence`, raise LeaseLost (changing nothing) unless we still hold the lease.

        The caller has already updated the case's other fields (timestamps, samples).
        """
        move = Transition(case, new_state, reason, evidence, now, reason_code, mono)
        (done,) = self.transition_many([move], fence)
        return case if done else None

    def transition_many(
        self, moves: Sequence[Transition], fence: Fence | None = None
    ) -> list[bool]:
        """`transition` for several cases in one transaction (one commit for the decisions
        of a node's pass): for each, whether it was made; one whose row moved meanwhile
        (a snooze) is left as stored, without holding the others back. LeaseLost or a
        failed write changes none of them."""
        before = [(m.case.version, _outcome(m.case)) for m in moves]
        for m in moves:
            case = m.case
            case.state, case.reason, case.reason_code = m.state, m.reason, m.reason_code
            case.updated = m.now
            if m.state not in LIVE_STATES and case.ended_at is None:
                case.ended_at, case.ended_mono = m.now, m.mono
        done: list[bool] = []
        try:
            with self._tx() as conn:
                check_fence(conn, fence)
                done = self._update_cases(
                    conn, [(m.case, version) for m, (version, _) in zip(moves, before, strict=True)]
                )
                rowcounts(
                    conn,
                    "INSERT INTO timeline (case_id, ts, state, reason, evidence) "
                    "VALUES (?,?,?,?,?)",
                    [
                        (
                            m.case.id,
                            m.now,
                            str(m.state),
                            m.reason,
                            json.dumps(m.evidence, default=str),
                        )
                        for m, made in zip(moves, done, strict=True)
                        if made
                    ],
                )
        except BaseException:
            for m, (_, outcome) in zip(moves, before, strict=True):
                _restore(m.case, outcome)
            raise
        for m, (version, outcome), made in zip(moves, before, done, strict=True):
            if made:
                m.case.version = version + 1
            else:
                _restore(m.case, outcome)
        return done

    def save_samples(self, case: Case, fence: Fence | None = None) -> bool:
        """Persist live samples and timestamps without a state change (CAS on version)."""
        return self.save_samples_many([case], fence) == 1

    def save_samples_many(self, cases: list[Case], fence: Fence | None = None) -> int:
        """`save_samples` for several cases in one transaction (one commit per reconciler
        pass); a case whose row moved meanwhile (a snooze) keeps the stored row. Returns
        how many were saved."""
        with self._tx() as conn:
            check_fence(conn, fence)
            made = self._update_cases(conn, [(case, case.version) for case in cases])
        saved = [case for case, ok in zip(cases, made, strict=True) if ok]
        for case in saved:
            case.version += 1
        return len(saved)

    def rearm(
        self,
        old: Case,
        new: Case,
        fence: Fence,
        before_commit: Callable[[Case], None] | None = None,
    ) -> bool:
        """Start `new` for the target of the activity-cancelled `old`, moving old's firing
        episodes to it; False when old was re-armed already or a live case exists."""
        with self._tx() as conn:
            check_fence(conn, fence)
            claimed = conn.execute(
                "UPDATE cases SET followup = -1 WHERE id = ? AND followup IS NULL", (old.id,)
            )
            if claimed.rowcount != 1:
                return False
            # A savepoint: after a failed statement PostgreSQL accepts no other in the
            # transaction until it is rolled back to one.
            conn.execute("SAVEPOINT rearm")
            try:
                insert_case(conn, new, {"rearmed_from": old.id})
            except DUPLICATE:  # one live case per target already
                conn.execute("ROLLBACK TO SAVEPOINT rearm")
                conn.execute("UPDATE cases SET followup = NULL WHERE id = ?", (old.id,))
                return False
            conn.execute("RELEASE SAVEPOINT rearm")
            conn.execute("UPDATE cases SET followup = ? WHERE id = ?", (new.id, old.id))
            conn.execute(
                "UPDATE episodes SET case_id = ? WHERE case_id = ? AND status = 'firing'",
                (new.id, old.id),
            )
            if before_commit is not None:
                before_commit(new)  # raises: nothing is written
        old.followup = new.id
        return True

    def rearm_candidates(self, ended_before_mono: float, limit: int = 200) -> list[Case]:
        """Cases cancelled for activity, or refused because evidence was unknown (NVML down,
        an agent away: often for seconds), not re-armed yet, whose episodes still fire."""
        rows = self._read(
            "SELECT * FROM cases WHERE ((state = 'cancelled' AND reason_code = 'activity') "
            "OR (state = 'refused' AND reason_code = 'unknown_evidence')) "
            "AND followup IS NULL AND EXISTS (SELECT 1 FROM episodes "
            "WHERE episodes.case_id = cases.id AND episodes.status = 'firing') "
            "ORDER BY id LIMIT ?",
            (limit,),
        )
        cases = [row_to_case(r) for r in rows]
        return [c for c in cases if c.ended_mono is not None and c.ended_mono <= ended_before_mono]

    def unknown_in_a_row(self, case: Case, most: int) -> int:
        """How many cases in a row, back through re-arms from `case`, were refused because
        evidence was unknown (at most `most`: the back-off's cap needs no more)."""
        count, current = 0, case
        while count < most and current.reason_code == Reason.UNKNOWN_EVIDENCE:
            count += 1
            if current.rearmed_from is None:
                break
            previous = self.get_case(current.rearmed_from)
            if previous is None:  # pruned
                break
            current = previous
        return count

    def prune(self, before: float, batch: int = 5000) -> int:
        """Delete ended cases last changed before `before` (wall time) with their timeline,
        signals and evidence pictures, and processed episodes not seen since then; returns
        the number of cases deleted."""
        with self._tx() as conn:
            ids = [
                r["id"]
                for r in conn.execute(
                    "SELECT id FROM cases WHERE live = 0 AND updated < ? LIMIT ?", (before, batch)
                )
            ]
            marks = ",".join("?" for _ in ids)
            if ids:
                for table, column in (
                    ("timeline", "case_id"),
                    ("signals", "case_id"),
                    ("pictures", "case_id"),
                    ("cases", "id"),
                ):
                    conn.execute(f"DELETE FROM {table} WHERE {column} IN ({marks})", ids)
            conn.execute(
                "DELETE FROM episodes WHERE processed = 1 AND last_seen < ? AND (case_id IS NULL "
                "OR case_id NOT IN (SELECT id FROM cases))",
                (before,),
            )
        return len(ids)
