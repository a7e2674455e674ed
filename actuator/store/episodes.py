"""Alert episodes: each (fingerprint, startsAt) as Alertmanager delivered it, idempotent
and order-independent, and the hand-off of episodes to cases."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass

from actuator.models import AlertmanagerAlert, Case, epoch, is_reclaimable, is_zero_time
from actuator.store.cases import insert_cases
from actuator.store.counters import bump
from actuator.store.database import (
    DATABASE_ERRORS,
    DUPLICATE,
    Conn,
    Database,
    StoreUnavailable,
    rowcounts,
)
from actuator.store.group_commit import GroupCommit


@dataclass(frozen=True)
class Ingest:
    received: int
    recorded: int
    ignored: int
    rejected: int = 0
    # (fingerprint, starts_at, deliveries) of alerts delivered before: the audit says so
    duplicates: tuple[tuple[str, str, int], ...] = ()


@dataclass(frozen=True)
class Episode:
    fingerprint: str
    starts_at: str
    starts_ts: float
    alertname: str
    labels: dict[str, str]
    annotations: dict[str, str]
    status: str
    ends_ts: float | None
    case_id: int | None


class EpisodeQueries(Database):
    def record_alerts(self, alerts: list[AlertmanagerAlert], rejected: int, now: float) -> Ingest:
        """Upsert every reclaimable alert as an episode; idempotent and order-independent.

        `resolved` is sticky: once any delivery said an episode resolved, it stays resolved,
        so a late or duplicated `firing` copy can never revive it.

        Deliveries that arrive together are committed together (store/group_commit.py): one
        transaction and one fsync for the group, none answered before the group committed,
        and a delivery that fails costs the others nothing (`_record_group`).
        """
        group = self.__dict__.get("_alert_group")
        if group is None:  # setdefault: two first deliveries at once share one
            group = self.__dict__.setdefault("_alert_group", GroupCommit(self._record_group))
        return group.submit(_Delivery(alerts, rejected, now))

    @property
    def alert_groups(self) -> GroupCommit[_Delivery, Ingest] | None:
        """The webhook's group commit (None before its first delivery): for tests."""
        return self.__dict__.get("_alert_group")

    def _record_group(self, deliveries: list[_Delivery]) -> list[Ingest | BaseException]:
        """The group in one transaction. It is written first as it comes: a savepoint for
        each delivery is two statements more, and on PostgreSQL each statement is a round
        trip the whole group waits for, holding the writers' turn. Only if a delivery
        fails is that transaction rolled back and the group written again, each delivery
        in a savepoint of its own, so its failure costs the others nothing."""
        try:
            with self._tx() as conn:
                answers: list[Ingest | BaseException] = [_record(conn, d) for d in deliveries]
                _count_recorded(conn, answers)
            return answers
        except StoreUnavailable:
            raise  # the database failed: the whole group fails with it (503, resent)
        except Exception:  # one delivery's own failure (its input): each in a savepoint
            return self._record_apart(deliveries)

    def _record_apart(self, deliveries: list[_Delivery]) -> list[Ingest | BaseException]:
        answers: list[Ingest | BaseException] = []
        with self._tx() as conn:
            for n, delivery in enumerate(deliveries):
                savepoint = f"delivery_{n}"
                conn.execute(f"SAVEPOINT {savepoint}")
                try:
                    answers.append(_record(conn, delivery))
                except DUPLICATE as exc:  # this delivery's input alone: the others commit
                    conn.execute(f"ROLLBACK TO SAVEPOINT {savepoint}")
                    answers.append(exc)
                except DATABASE_ERRORS:
                    raise  # the database failed: the whole group fails with it (503, resent)
                except Exception as exc:  # this delivery alone: the others still commit
                    conn.execute(f"ROLLBACK TO SAVEPOINT {savepoint}")
                    answers.append(exc)
                conn.execute(f"RELEASE SAVEPOINT {savepoint}")
            _count_recorded(conn, answers)
        return answers

    def pending_episodes(self, limit: int = 500) -> list[Episode]:
        rows = self._read(
            "SELECT * FROM episodes WHERE processed = 0 ORDER BY first_seen LIMIT ?", (limit,)
        )
        return [
            Episode(
                fingerprint=r["fingerprint"],
                starts_at=r["starts_at"],
                starts_ts=r["starts_ts"],
                alertname=r["alertname"],
                labels=json.loads(r["labels"]),
                annotations=json.loads(r["annotations"]),
                status=r["status"],
                ends_ts=r["ends_ts"],
                case_id=r["case_id"],
            )
            for r in rows
        ]

    def ingest_batch(
        self,
        marks: list[tuple[Episode, int | None]],
        new: list[tuple[Case, Episode]],
        before_commit: Callable[[list[Case]], None] | None = None,
    ) -> None:
        """Mark episodes processed and create cases for others, in one transaction.

        `before_commit` gets the new cases with their ids (to audit them); if it raises,
        nothing is written."""
        with self._tx() as conn:
            # Statements of one kind together: on PostgreSQL each kind is one round trip
            # (database.rowcounts), the cases' inserts aside (each returns its id).
            rowcounts(
                conn,
                "UPDATE episodes SET processed = 1, case_id = COALESCE(?, case_id) "
                "WHERE fingerprint = ? AND starts_at = ?",
                [(case_id, ep.fingerprint, ep.starts_at) for ep, case_id in marks],
            )
            insert_cases(conn, [(case, {"labels": ep.labels}) for case, ep in new])
            rowcounts(
                conn,
                "UPDATE episodes SET processed = 1, case_id = ? "
                "WHERE fingerprint = ? AND starts_at = ?",
                [(case.id, ep.fingerprint, ep.starts_at) for case, ep in new],
            )
            if before_commit is not None and new:
                before_commit([case for case, _ in new])


@dataclass(frozen=True)
class _Delivery:
    alerts: list[AlertmanagerAlert]
    rejected: int
    now: float


def _count_recorded(conn: Conn, answers: list[Ingest | BaseException]) -> None:
    """The group's answered deliveries in one statement, not one each: on PostgreSQL each
    statement is a round trip the whole group waits for."""
    recorded = sum(isinstance(answer, Ingest) for answer in answers)
    if recorded:
        bump(conn, "webhook_requests", "200", recorded)


def _record(conn: Conn, delivery: _Delivery) -> Ingest:
    """One delivery's upserts and counters, in the group's transaction."""
    alerts, rejected, now = delivery.alerts, delivery.rejected, delivery.now
    recorded = ignored = 0
    duplicates: list[tuple[str, str, int]] = []
    for alert in alerts:
        if not is_reclaimable(alert):
            ignored += 1
            continue
        ends = None if is_zero_time(alert.endsAt) else epoch(alert.endsAt)  # type: ignore[arg-type]
        starts_ts = epoch(alert.startsAt)
        row = conn.execute(
            """
            INSERT INTO episodes (fingerprint, starts_at, starts_ts, alertname, labels,
                annotations, status, ends_ts, first_seen, last_seen)
            VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
            ON CONFLICT (fingerprint, starts_at) DO UPDATE SET
                status = CASE WHEN episodes.status = 'resolved' OR
                         excluded.status = 'resolved' THEN 'resolved' ELSE 'firing' END,
                ends_ts = COALESCE(excluded.ends_ts, episodes.ends_ts),
                last_seen = excluded.last_seen,
                deliveries = episodes.deliveries + 1,
                processed = CASE WHEN episodes.status = 'firing' AND
                            excluded.status = 'resolved' THEN 0 ELSE episodes.processed END
            RETURNING deliveries
            """,
            (
                alert.fingerprint,
                repr(starts_ts),
                starts_ts,
                alert.labels.get("alertname", ""),
                json.dumps(alert.labels, sort_keys=True),
                json.dumps(alert.annotations, sort_keys=True),
                alert.status,
                ends,
                now,
                now,
            ),
        ).fetchone()
        deliveries = int(row["deliveries"])
        if deliveries > 1:
            duplicates.append((alert.fingerprint, repr(starts_ts), deliveries))
        recorded += 1
    if rejected:
        bump(conn, "alerts_rejected", "", rejected)
    return Ingest(
        received=len(alerts) + rejected,
        recorded=recorded,
        ignored=ignored,
        rejected=rejected,
        duplicates=tuple(duplicates),
    )
