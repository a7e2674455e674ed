"""A re-armed case: the same process, the same alert, and nothing else of the case before.

A case cancelled for activity (or refused on unknown evidence) while its alert keeps firing
starts again as a new case. The new case is built from an allow-list of what it keeps (the
process it names, the alert it came from, the uid that names the owner, the node's start
time, the link to the case before), so a field added to `Case` later starts fresh by
default: no consent, keep, release, grace or demand of the old case carries over.
"""

from __future__ import annotations

from actuator.models import Case, Reason, State

# What a re-armed case takes from the case before; every other field is the default.
KEPT_ON_REARM = (
    "node",
    "pid",
    "start_time",
    "uuid",
    "start_ticks",
    "boot_id",
    "alertname",
    "fingerprint",
    "starts_ts",
    "labels",
    "annotations",
    "uid",
)


def rearmed_case(old: Case, *, now: float, mono: float, clock: str, window: float) -> Case:
    """The new case for `old`'s process and alert (pure)."""
    kept = {name: getattr(old, name) for name in KEPT_ON_REARM}
    return Case(
        id=0,
        state=State.PENDING,
        version=0,
        created=now,
        updated=now,
        created_mono=mono,
        clock=clock,
        reason=f"re-armed: the alert still fires {window:g}s after case {old.id} ended "
        f"({old.reason_code})",
        reason_code=Reason.REARMED,
        rearmed_from=old.id,
        **kept,
    )
