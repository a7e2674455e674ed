"""Pure decision functions, with an injected clock (no I/O, no sleeping)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from actuator.decisions import Action, FleetState, breaker_should_open
from actuator.models import Member, Reason, State
from actuator.policy import Breaker, Mode
from tests.helpers.cases import (
    BOOT,
    GUARD,
    IDLE,
    LIMITS,
    SUSPENDABLE,
    T0,
    TICKS,
    decide_live,
    decide_signalled,
    eff,
    make_case,
    make_live,
)


def test_first_check_only_samples_cpu():
    d = decide_live(make_case(), make_live(), eff(), IDLE, LIMITS, GUARD, T0)
    assert d.action == Action.WAIT
    assert d.updates.cpu_seconds == 10.0 and d.updates.cpu_at == T0


def test_idle_after_a_cpu_window_sends_the_notice():
    case = make_case(cpu_seconds=10.0, cpu_at=T0 - 2)
    d = decide_live(case, make_live(cpu_seconds=10.01), eff(), IDLE, LIMITS, GUARD, T0)
    assert d.action == Action.NOTIFY and d.state == State.NOTIFIED


def test_a_process_younger_than_min_runtime_is_not_judged_idle_yet():
    """Start-up, data loading, compilation: no notice before the process has run
    `min_runtime` (the helpers' process started an hour before T0)."""
    case = make_case(cpu_seconds=10.0, cpu_at=T0 - 2)
    live = make_live(cpu_seconds=10.01)
    young = decide_live(case, live, eff(min_runtime=3601.0), IDLE, LIMITS, GUARD, T0)
    assert young.action == Action.WAIT and young.state is None  # stays pending
    old = decide_live(case, live, eff(min_runtime=3600.0), IDLE, LIMITS, GUARD, T0)
    assert old.action == Action.NOTIFY and old.state == State.NOTIFIED


def test_an_owner_asks_in_the_environment_for_runtime_within_the_rules_bounds():
    """GPU_RECLAIMER_KEEP=2h, read from the process's environment on the node: a process
    that has run 1 h is kept (snoozed until 2 h of runtime, audited as such); an ask above
    the rule's keep_max is refused with the bounds, and the case goes on."""
    case = make_case(cpu_seconds=10.0, cpu_at=T0 - 2)
    asked = make_live(cpu_seconds=10.01, keep_asked="GPU_RECLAIMER_KEEP=2h")
    kept = decide_live(case, asked, eff(keep_max=8 * 3600.0), IDLE, LIMITS, GUARD, T0)
    assert (kept.state, kept.code) == (State.SNOOZED, Reason.KEPT_AS_ASKED)
    assert kept.updates.snoozed_until == case.start_time + 7200
    assert "GPU_RECLAIMER_KEEP=2h granted (0s to 8h), 1h more" in kept.reason
    refused = decide_live(case, asked, eff(keep_max=3600.0), IDLE, LIMITS, GUARD, T0)
    assert refused.action == Action.NOTIFY  # the ask does not hold the case
    later = decide_live(case, asked, eff(keep_max=8 * 3600.0), IDLE, LIMITS, GUARD, T0 + 3601)
    assert later.action == Action.NOTIFY  # 2 h of runtime are over


def test_cpu_burn_cancels():
    case = make_case(cpu_seconds=10.0, cpu_at=T0 - 2)
    d = decide_live(case, make_live(cpu_seconds=12.0), eff(), IDLE, LIMITS, GUARD, T0)
    assert d.state == State.CANCELLED and d.code == "activity"


@pytest.mark.reliability(15, 16)
def test_unknown_sm_util_is_not_idle():
    d = decide_live(make_case(), make_live(sm_util=None), eff(), IDLE, LIMITS, GUARD, T0)
    assert d.state == State.REFUSED and d.code == "unknown_evidence"


def test_stalled_alert_ignores_util_but_needs_memory():
    case = make_case(alertname="GpuProcessStalled")
    live = make_live(sm_util=1.0, heartbeat=T0 - 600)
    d = decide_live(case, live, eff(), IDLE, LIMITS, GUARD, T0)
    assert d.action == Action.NOTIFY
    gone = decide_live(case, replace(live, on_gpu=False), eff(), IDLE, LIMITS, GUARD, T0)
    assert gone.state == State.CANCELLED and gone.code == "released"


def test_recent_log_write_cancels():
    live = make_live(log_mtime=T0 - 10)
    d = decide_live(make_case(), live, eff(), IDLE, LIMITS, GUARD, T0)
    assert d.state == State.CANCELLED and "log written" in d.reason


def test_data_moved_beyond_keepalive_cancels():
    """A served request or a download since the node's first reading is work (issue 48)."""
    live = make_live(network_activity=T0 - 20, listening_external=0)
    d = decide_live(
        make_case(cpu_seconds=10.0, cpu_at=T0 - 2), live, eff(), IDLE, LIMITS, GUARD, T0
    )
    assert d.state == State.CANCELLED and d.code == Reason.ACTIVITY
    assert "data moved on its connections 20.0s ago" in d.reason
    old = make_live(network_activity=T0 - 900, listening_external=0, cpu_seconds=10.01)
    d = decide_live(make_case(cpu_seconds=10.0, cpu_at=T0 - 2), old, eff(), IDLE, LIMITS, GUARD, T0)
    assert d.action == Action.NOTIFY


def test_unknown_network_is_not_idle():
    live = make_live(network_unknown="cannot enter its network namespace: Operation not permitted")
    d = decide_live(make_case(), live, eff(), IDLE, LIMITS, GUARD, T0)
    assert d.state == State.REFUSED and d.code == Reason.UNKNOWN_EVIDENCE
    assert "network is unknown" in d.reason


@pytest.mark.reliability(25)
def test_identity_mismatch_is_refused():
    reused = make_live(start_ticks=TICKS + 1)
    d = decide_live(make_case(), reused, eff(), IDLE, LIMITS, GUARD, T0)
    assert d.state == State.REFUSED and d.code == "identity_mismatch" and "PID reused" in d.reason
    rebooted = make_live(boot_id=BOOT.replace("0b", "ff"))
    d = decide_live(make_case(), rebooted, eff(), IDLE, LIMITS, GUARD, T0)
    assert d.state == State.REFUSED and "booted again" in d.reason
    other_uid = make_live(uid=1002)
    d = decide_live(make_case(uid=1001), other_uid, eff(), IDLE, LIMITS, GUARD, T0)
    assert d.state == State.REFUSED and d.code == "identity_mismatch"


def test_protected_and_exited():
    d = decide_live(make_case(), make_live(protected="root"), eff(), IDLE, LIMITS, GUARD, T0)
    assert d.state == State.REFUSED and d.code == "protected"
    d = decide_live(make_case(), make_live(exists=False), eff(), IDLE, LIMITS, GUARD, T0)
    assert d.state == State.CANCELLED and d.code == "process_exited"


def test_resolved_alert_cancels():
    d = decide_live(make_case(), make_live(), eff(), IDLE, LIMITS, FleetState(unresolved=0), T0)
    assert d.state == State.CANCELLED and d.code == "resolved"


def test_observe_mode_ends_observed():
    case = make_case(cpu_seconds=10.0, cpu_at=T0 - 2)
    d = decide_live(case, make_live(), eff(Mode.OBSERVE), IDLE, LIMITS, GUARD, T0)
    assert d.state == State.OBSERVED and "would" in d.reason


def test_grace_period_then_sigterm():
    case = make_case(
        state=State.NOTIFIED,
        notified_at=T0,
        notified_mono=T0,
        cpu_seconds=10.0,
        cpu_at=T0,
        cpu_rate=0,
    )
    e = eff(grace=600.0)
    assert decide_live(case, make_live(T0 + 599), e, IDLE, LIMITS, GUARD, T0 + 599).action == (
        Action.WAIT
    )
    d = decide_live(case, make_live(T0 + 600), e, IDLE, LIMITS, GUARD, T0 + 600)
    assert d.action == Action.TERM and d.state == State.TERMINATING


def test_release_now_skips_the_rest_of_the_grace_but_none_of_the_checks():
    case = make_case(
        state=State.NOTIFIED,
        notified_at=T0,
        notified_mono=T0,
        cpu_seconds=10.0,
        cpu_at=T0,
        cpu_rate=0,
        release_requested_mono=T0 + 5,
    )
    e = eff(grace=600.0)
    d = decide_live(case, make_live(T0 + 10), e, IDLE, LIMITS, GUARD, T0 + 10)
    assert d.action == Action.TERM and d.state == State.TERMINATING
    busy = decide_live(case, make_live(T0 + 10, sm_util=0.9), e, IDLE, LIMITS, GUARD, T0 + 10)
    assert busy.action != Action.TERM  # working again: the owner's click is no licence
    observing = decide_live(
        case, make_live(T0 + 10), eff(Mode.NOTIFY, grace=600.0), IDLE, LIMITS, GUARD, T0 + 10
    )
    assert observing.action != Action.TERM


def test_notify_mode_never_signals():
    case = make_case(
        state=State.NOTIFIED,
        notified_at=T0,
        notified_mono=T0,
        cpu_seconds=10.0,
        cpu_at=T0,
        cpu_rate=0,
    )
    d = decide_live(case, make_live(T0 + 700), eff(Mode.NOTIFY), IDLE, LIMITS, GUARD, T0 + 700)
    assert d.state == State.OBSERVED


def test_limits_and_breaker_refuse():
    case = make_case(
        state=State.NOTIFIED,
        notified_at=T0,
        notified_mono=T0,
        cpu_seconds=10.0,
        cpu_at=T0,
        cpu_rate=0,
    )
    now = T0 + 700
    full = FleetState(unresolved=1, terminations_minute=1)
    d = decide_live(case, make_live(now), eff(), IDLE, LIMITS, full, now)
    assert d.state == State.DEFERRED and d.code == "limit_minute"
    assert d.updates.deferred_from == "notified"
    hour = FleetState(unresolved=1, terminations_node_hour=2)
    assert decide_live(case, make_live(now), eff(), IDLE, LIMITS, hour, now).code == (
        "limit_node_hour"
    )
    tripped = FleetState(unresolved=1, breaker_open=True)
    d = decide_live(case, make_live(now), eff(), IDLE, LIMITS, tripped, now)
    assert d.code == "circuit_breaker_open" and d.state == State.DEFERRED


@pytest.mark.reliability(38)
def test_a_deferred_case_waits_then_resumes_where_it_was():
    case = make_case(
        state=State.DEFERRED,
        deferred_from="notified",
        notified_at=T0,
        notified_mono=T0,
        cpu_seconds=10.0,
        cpu_at=T0,
        cpu_rate=0,
    )
    now = T0 + 700
    still = FleetState(unresolved=1, breaker_open=True)
    assert decide_live(case, make_live(now), eff(), IDLE, LIMITS, still, now).action == Action.WAIT
    d = decide_live(case, make_live(now), eff(), IDLE, LIMITS, GUARD, now)
    assert d.state == State.NOTIFIED and d.code == "resumed" and d.updates.deferred_from is None
    resumed = replace(case, state=State.NOTIFIED, deferred_from=None)
    assert decide_live(resumed, make_live(now), eff(), IDLE, LIMITS, GUARD, now).action == (
        Action.TERM
    )


@pytest.mark.reliability(42)
def test_waits_follow_the_boot_clock_not_the_wall_clock():
    notified = make_case(
        state=State.NOTIFIED,
        notified_at=T0,
        notified_mono=5000.0,
        cpu_seconds=10.0,
        cpu_at=T0 + 3599,  # read after the step
        cpu_rate=0,
    )
    e = eff(grace=600.0)
    # The wall clock jumps one hour ahead 1 s after the notice: the grace is still running.
    d = decide_live(notified, make_live(T0 + 3601), e, IDLE, LIMITS, GUARD, T0 + 3601, mono=5001.0)
    assert d.action == Action.WAIT
    d = decide_live(notified, make_live(T0 + 3601), e, IDLE, LIMITS, GUARD, T0 + 3601, mono=5600.0)
    assert d.action == Action.TERM
    # The wall clock jumps one hour back after SIGTERM: SIGKILL still comes on time.
    m = Member(4242, TICKS, 1001)
    term = make_case(state=State.TERMINATING, term_at=T0, term_mono=5000.0, members=[m])
    k = decide_signalled(term, [m], None, eff(term_timeout=10.0), T0 - 3590, mono=5010.0)
    assert k.action == Action.KILL


@pytest.mark.reliability(39)
def test_only_a_delivered_notice_starts_the_grace():
    from actuator.decisions import after_notice
    from actuator.policy import Notice

    gate = Notice(retries=1, retry_interval=30)
    case = make_case(
        state=State.NOTIFIED, notified_mono=None, cpu_seconds=10.0, cpu_at=T0, cpu_rate=0
    )
    failed = after_notice(case, False, gate, T0, 100.0)
    assert failed.changed() == {"notice_attempts": 1, "next_notice_mono": 130.0}
    case = replace(case, **failed.changed())
    step = decide_live(case, make_live(), eff(), IDLE, LIMITS, GUARD, T0, mono=120.0, notice=gate)
    assert step.action == Action.WAIT  # retry interval not over
    step = decide_live(case, make_live(), eff(), IDLE, LIMITS, GUARD, T0, mono=131.0, notice=gate)
    assert step.action == Action.NOTIFY and step.code == "notice_retry"
    case = replace(case, notice_attempts=2, next_notice_mono=161.0)
    gave_up = decide_live(
        case, make_live(), eff(), IDLE, LIMITS, GUARD, T0, mono=162.0, notice=gate
    )
    assert gave_up.state == State.REFUSED and gave_up.code == "notice_undelivered"
    longer = gate.model_copy(update={"undelivered": "extra_grace", "extra_grace": 3600.0})
    extended = decide_live(
        case, make_live(), eff(), IDLE, LIMITS, GUARD, T0, mono=162.0, notice=longer
    )
    assert extended.state == State.NOTIFIED and extended.updates.notice_extra_grace == 3600.0
    assert after_notice(case, True, gate, T0, 200.0).notified_mono == 200.0


def test_snooze_expiry_returns_to_pending():
    case = make_case(state=State.SNOOZED, snoozed_until=T0 + 10, snoozed_until_mono=T0 + 10)
    assert decide_live(case, make_live(), eff(), IDLE, LIMITS, GUARD, T0).action == Action.WAIT
    d = decide_live(case, make_live(), eff(), IDLE, LIMITS, GUARD, T0 + 11)
    assert d.state == State.PENDING


def test_signalled_kill_after_term_timeout_and_verify_memory():
    m = Member(4242, TICKS, 1001)
    case = make_case(
        state=State.TERMINATING, term_at=T0, term_mono=T0, members=[m], gpu_memory_bytes=5
    )
    e = eff(term_timeout=10.0)
    assert decide_signalled(case, [m], None, e, T0 + 9.9).action == Action.WAIT
    assert decide_signalled(case, [m], None, e, T0 + 10).action == Action.KILL
    done = decide_signalled(case, [], {999: 1}, e, T0 + 3)
    assert done.state == State.RECLAIMED and done.updates.freed_bytes == 5
    held = replace(case, exited_at=T0, exited_mono=T0)
    assert decide_signalled(held, [], {4242: 5}, e, T0 + 1).action == Action.WAIT
    failed = decide_signalled(held, [], {4242: 5}, e, T0 + 60)
    assert failed.state == State.FAILED and failed.code == "memory_held"


@pytest.mark.reliability(31)
def test_unkillable_fails():
    m = Member(4242, TICKS, 1001)
    case = make_case(
        state=State.KILLING,
        term_at=T0,
        term_mono=T0,
        kill_at=T0 + 10,
        kill_mono=T0 + 10,
        members=[m],
    )
    d = decide_signalled(case, [m], None, eff(kill_timeout=10.0), T0 + 21)
    assert d.state == State.FAILED and d.code == "unkillable"


def test_breaker_threshold():
    b = Breaker(window=600, max_share=0.5, min_flagged=5)
    assert breaker_should_open(4, 4, b) is None  # too few to judge
    assert breaker_should_open(5, 10, b) is None  # exactly half
    assert breaker_should_open(6, 10, b) is not None
    assert breaker_should_open(50, None, b) is None  # unknown fleet size never trips


def test_a_keep_asked_before_the_case_snoozes_it_until_then_and_no_longer():
    kept = replace(GUARD, kept_until=T0 + 3600)
    d = decide_live(make_case(), make_live(), eff(), IDLE, LIMITS, kept, T0, mono=100.0)
    assert (d.state, d.code) == (State.SNOOZED, Reason.KEPT_AHEAD)
    assert d.updates.snoozed_until == T0 + 3600 and d.updates.snoozed_until_mono == 3700.0
    assert "for 1h more" in d.reason
    over = replace(GUARD, kept_until=T0 - 1)  # the keep ran out before the case opened
    d = decide_live(make_case(), make_live(), eff(), IDLE, LIMITS, over, T0)
    assert d.state != State.SNOOZED


def test_no_process_gets_a_sigterm_that_another_cases_tree_signal_covers() -> None:
    from actuator.decisions import Decision, not_twice
    from actuator.models import CaseUpdate

    term = Decision(Action.TERM, State.TERMINATING, Reason.IDLE, "idle", CaseUpdate(cpu_at=5.0))
    parent, worker = (101, 7), (102, 8)
    # The worker's own case, while its parent's case signals the tree it belongs to: waits
    # (keeping its samples).
    held = not_twice(term, [worker], {worker: 283, parent: 283})
    assert held.action == Action.WAIT and held.updates.changed() == {"cpu_at": 5.0}
    # The parent's case, while the worker's own case signals the worker: waits too.
    assert not_twice(term, [parent, worker], {worker: 282}).action == Action.WAIT
    # Nobody else signals any of it, or the decision is not a SIGTERM: unchanged.
    assert not_twice(term, [parent, worker], {(103, 9): 5}) is term
    notify = Decision(Action.NOTIFY, State.NOTIFIED, Reason.IDLE, "idle")
    assert not_twice(notify, [worker], {worker: 283}) is notify


def test_the_last_look_before_sigterm_withholds_it_from_a_process_working_again() -> None:
    """Found by the hour of chaos (docs/reliability.md): a job that resumed 0.1 s before
    its SIGTERM was signalled on a re-check read before the step waited its turn."""
    from actuator.decisions import last_look

    case = make_case(state=State.NOTIFIED)
    before = make_live(log_mtime=T0 - 600, cpu_seconds=10.0)
    assert last_look(case, before, make_live(T0 + 0.2, log_mtime=T0 - 600), IDLE, T0) is None
    wrote = last_look(case, before, make_live(T0 + 0.2, log_mtime=T0 + 0.1), IDLE, T0 + 0.2)
    assert wrote is not None and wrote.state == State.CANCELLED
    assert wrote.code == Reason.ACTIVITY and "last look" in wrote.reason
    busy = last_look(case, before, make_live(T0 + 0.2, log_mtime=T0 - 600, sm_util=0.9), IDLE, T0)
    assert busy is not None and busy.state == State.CANCELLED
    spinning = make_live(T0 + 0.5, log_mtime=T0 - 600, cpu_seconds=10.5)  # 1 core over 0.5 s
    cpu = last_look(case, before, spinning, IDLE, T0 + 0.5)
    assert cpu is not None and cpu.state == State.CANCELLED and "CPU" in cpu.reason
    # What cannot be judged now, or a process that changed or left: no signal this step.
    unknown = last_look(case, before, make_live(T0 + 0.2, sm_util=None), IDLE, T0)
    assert unknown is not None and unknown.action == Action.WAIT
    gone = last_look(case, before, make_live(T0 + 0.2, exists=False), IDLE, T0)
    assert gone is not None and gone.action == Action.WAIT
    other = last_look(case, before, make_live(T0 + 0.2, start_ticks=TICKS + 1), IDLE, T0)
    assert other is not None and other.action == Action.WAIT


def test_the_last_look_judges_cpu_by_more_than_the_readings_can_resolve() -> None:
    """Found by a fresh-clone `make test` (tests/kube/test_pods.py): an idle pod's simulated
    workload used one or two clock ticks between the re-check and its last look 0.1 s later,
    read as 0.12 CPU cores, and its reclaim was cancelled as "working again". /proc counts
    in whole ticks: what the readings cannot resolve is not work; a real worker still is."""
    from actuator.decisions import cpu_resolution, last_look

    case = make_case(state=State.NOTIFIED)
    before = make_live(log_mtime=T0 - 600, cpu_seconds=10.0)
    assert cpu_resolution(before) == 0.02  # user and system time, one process, 100 Hz
    two_ticks = make_live(T0 + 0.1, log_mtime=T0 - 600, cpu_seconds=10.02)
    assert last_look(case, before, two_ticks, IDLE, T0 + 0.1) is None
    working = make_live(T0 + 0.1, log_mtime=T0 - 600, cpu_seconds=10.06)  # 0.6 cores
    found = last_look(case, before, working, IDLE, T0 + 0.1)
    assert found is not None and found.state == State.CANCELLED and "0.40 CPU" in found.reason


def test_the_last_look_reads_a_remote_node_on_its_own_clock() -> None:
    """Found by the hour in the deployed shape (docs/reliability.md): through an agent each
    reading is moved onto the actuator's clock by an offset that carries that call's
    latency, so the same old log write looked 0.03 s newer in the second reading, and the
    last look cancelled idle jobs as "written 461 s ago, after the re-check"."""
    from actuator.decisions import last_look
    from actuator.fleet.remote import rebase

    case = make_case(state=State.NOTIFIED)
    node = make_live(log_mtime=T0 - 600, cpu_seconds=10.0)  # on the node's clock
    before = rebase(node, 5.000)
    slower = rebase(replace(node, sampled_at=T0 + 0.5), 5.030)  # a slower answer
    assert slower.log_mtime is not None and before.log_mtime is not None
    assert slower.log_mtime > before.log_mtime  # the same write, later on this clock
    assert last_look(case, before, slower, IDLE, T0 + 5.5) is None
    wrote = rebase(replace(node, sampled_at=T0 + 0.5, log_mtime=T0 + 0.1), 4.990)
    found = last_look(case, before, wrote, IDLE, T0 + 5.5)
    assert found is not None and found.state == State.CANCELLED  # a new write still counts
    # The CPU gap too: 0.1 s of CPU over 0.5 s on the node is idle, not 0.1/0.02 cores.
    quick = rebase(replace(node, sampled_at=T0 + 0.5, cpu_seconds=10.01), 4.52)
    assert last_look(case, before, quick, IDLE, T0 + 5.5) is None


def test_the_cpu_window_of_a_remote_node_is_measured_on_its_own_clock() -> None:
    """The same class as the last look, in the re-check's CPU rate: a tree that used 0.12
    cores over one second on the node read as 0.06 when the second answer's latency put it
    a second later on the actuator's clock; a busy tree judged idle."""
    from actuator.decisions import roll_cpu
    from actuator.fleet.remote import rebase

    first = rebase(make_live(cpu_seconds=10.0), 5.0)
    _, sampled = roll_cpu(make_case(), first, IDLE)
    assert sampled["cpu_at"] == T0  # kept on the node's clock
    case = make_case(cpu_seconds=10.0, cpu_at=sampled["cpu_at"])
    later = rebase(make_live(T0 + 1.0, cpu_seconds=10.12), 6.0)  # a slow answer
    found, updates = roll_cpu(case, later, IDLE)
    assert found is not None and found.state == State.CANCELLED
    assert updates["cpu_rate"] == pytest.approx(0.12)


def test_a_stale_or_backward_cpu_reading_starts_a_new_window() -> None:
    """A reading from before the actuator was away, or on another clock (a case kept from
    before readings were on the node's clock): no rate is computed across it, and the case
    waits one window instead of acting on the rate it had."""
    from actuator.decisions import STALE_CPU_READING, roll_cpu

    for cpu_at in (T0 + 30, T0 - STALE_CPU_READING - 1):
        case = make_case(cpu_seconds=10.0, cpu_at=cpu_at, cpu_rate=0.0)
        found, updates = roll_cpu(case, make_live(cpu_seconds=10.0), IDLE)
        assert found is None and updates == {"cpu_seconds": 10.0, "cpu_at": T0, "cpu_rate": None}
        d = decide_live(case, make_live(cpu_seconds=10.0), eff(), IDLE, LIMITS, GUARD, T0)
        assert d.action == Action.WAIT and d.updates.cpu_rate is None


def test_the_last_look_lets_a_hang_spin_cpu_as_the_recheck_does() -> None:
    """A stalled job (an NCCL hang) spins CPU at 100 % util: like the re-check, the last look
    judges it by its stale log and heartbeat, never by its CPU."""
    from actuator.decisions import last_look

    case = make_case(state=State.NOTIFIED, alertname="GpuProcessStalled")
    before = make_live(log_mtime=T0 - 600, cpu_seconds=10.0, sm_util=1.0)
    spinning = make_live(T0 + 0.5, log_mtime=T0 - 600, cpu_seconds=10.5, sm_util=1.0)
    assert last_look(case, before, spinning, IDLE, T0 + 0.5) is None
    wrote = make_live(T0 + 0.5, log_mtime=T0 + 0.4, cpu_seconds=10.5, sm_util=1.0)
    assert last_look(case, before, wrote, IDLE, T0 + 0.5) is not None  # a write still counts


@pytest.mark.parametrize("claimed", [T0 - 2 * 86400, 0.0], ids=["two-days-ago", "no-label"])
@pytest.mark.reliability(58)
def test_defect_2_min_runtime_is_judged_from_the_nodes_start_time(claimed):
    """The alert's start_time is a claim: a process the node says started 10 minutes ago is
    not warned under `min_runtime: 1h`, whatever (or whether) the alert claims; the case
    takes the node's start time."""
    case = make_case(cpu_seconds=10.0, cpu_at=T0 - 2, start_time=claimed)
    live = make_live(cpu_seconds=10.01, start_time=T0 - 600)
    d = decide_live(case, live, eff(min_runtime=3600.0), IDLE, LIMITS, GUARD, T0)
    assert d.action == Action.WAIT and d.state is None
    assert d.updates.start_time == T0 - 600
    # Unknown runtime is not enough runtime.
    unknown = decide_live(
        case, replace(live, start_time=None), eff(min_runtime=0.0), IDLE, LIMITS, GUARD, T0
    )
    assert unknown.action == Action.WAIT and unknown.state is None


@pytest.mark.reliability(58)
def test_defect_2_a_keep_is_judged_from_the_nodes_start_time():
    """GPU_RECLAIMER_KEEP=2h on a process the node says started 30 minutes ago keeps it
    90 minutes more, though the alert claims it started two days ago."""
    case = make_case(cpu_seconds=10.0, cpu_at=T0 - 2, start_time=T0 - 2 * 86400)
    asked = make_live(cpu_seconds=10.01, keep_asked="GPU_RECLAIMER_KEEP=2h", start_time=T0 - 1800)
    kept = decide_live(case, asked, eff(keep_max=8 * 3600.0), IDLE, LIMITS, GUARD, T0)
    assert (kept.state, kept.code) == (State.SNOOZED, Reason.KEPT_AS_ASKED)
    assert kept.updates.snoozed_until == T0 + 5400


@pytest.mark.reliability(70)
def test_a_forged_startsat_cannot_shorten_idle_for():
    """idle_for counts from the later of startsAt, the case's opening and the process's
    start: a startsAt a week old waits idle_for from when this actuator opened the case."""
    forged = make_case(cpu_seconds=10.0, cpu_at=T0 - 2, starts_ts=T0 - 7 * 86400, created=T0 - 60)
    rule = eff(idle_for=3600.0)
    early = decide_live(forged, make_live(cpu_seconds=10.01), rule, IDLE, LIMITS, GUARD, T0)
    assert early.action == Action.WAIT
    later = T0 + 3600
    case = replace(forged, cpu_at=later - 2)
    on_time = decide_live(
        case, make_live(later, cpu_seconds=10.01), rule, IDLE, LIMITS, GUARD, later
    )
    assert on_time.action == Action.NOTIFY
    # A startsAt after the opening only makes it later still.
    late = replace(case, starts_ts=T0 + 600)
    assert (
        decide_live(
            late, make_live(later, cpu_seconds=10.01), rule, IDLE, LIMITS, GUARD, later
        ).action
        == Action.WAIT
    )


@pytest.mark.reliability(70)
def test_a_forged_startsat_cannot_shorten_the_service_window():
    from actuator.policy import ServiceEvidence, as_service

    service = as_service(eff(), ServiceEvidence("client", (8000,), client_ago=300.0))
    forged = make_case(cpu_seconds=10.0, cpu_at=T0 - 2, starts_ts=T0 - 86400, created=T0 - 60)
    d = decide_live(forged, make_live(cpu_seconds=10.01), service, IDLE, LIMITS, GUARD, T0)
    assert d.action == Action.WAIT and service.idle_for == 3600
    assert forged.idle_since == T0 - 60


@pytest.mark.reliability(68)
def test_a_first_network_reading_with_a_connection_is_unknown_not_quiet():
    """The node's meter has read the tree once (a baseline): no notice goes out on it."""
    case = make_case(cpu_seconds=10.0, cpu_at=T0 - 2)
    first = make_live(
        cpu_seconds=10.01, listening_external=0, network_covered=False, network_watched_for=0.0
    )
    d = decide_live(case, first, eff(), IDLE, LIMITS, GUARD, T0)
    assert d.action == Action.WAIT and d.state is None
    covered = replace(first, network_covered=True, network_watched_for=60.0)
    assert decide_live(case, covered, eff(), IDLE, LIMITS, GUARD, T0).action == Action.NOTIFY
    # An agent that does not say whether it covered a window: unknown, still no notice.
    silent = replace(first, network_covered=None, network_watched_for=None)
    assert decide_live(case, silent, eff(), IDLE, LIMITS, GUARD, T0).action == Action.WAIT


def _warned(read_at: float = T0, **kw):
    """Warned at T0; its CPU last read at `read_at` (a case is re-checked every pass)."""
    return make_case(
        state=State.NOTIFIED,
        notified_at=T0,
        notified_mono=T0,
        cpu_seconds=10.0,
        cpu_at=read_at,
        cpu_rate=0,
        **kw,
    )


def test_an_owner_on_the_node_defers_the_sigterm_for_at_most_the_presence_grace() -> None:
    from actuator.models import OwnerPresence

    here = OwnerPresence(sessions=1, idle_seconds=240.0, terminal="pts/3")
    rules = eff(grace=600.0, presence_grace=3600.0, presence_idle=1800.0)
    now = T0 + 600
    d = decide_live(_warned(), make_live(now, presence=here), rules, IDLE, LIMITS, GUARD, now)
    assert (d.state, d.code) == (State.DEFERRED, Reason.OWNER_PRESENT)
    assert "logged in on pts/3, idle 4m" in d.reason and "1h at most" in d.reason
    # Deferred: waits while they are there, and no longer than the presence grace.
    later = T0 + 600 + 3599
    held = replace(_warned(later - 30), state=State.DEFERRED, deferred_from="notified")
    held = replace(held, reason_code=Reason.OWNER_PRESENT)
    waiting = decide_live(held, make_live(later, presence=here), rules, IDLE, LIMITS, GUARD, later)
    assert waiting.action == Action.WAIT
    over = T0 + 600 + 3600
    back = decide_live(held, make_live(over, presence=here), rules, IDLE, LIMITS, GUARD, over)
    assert (back.state, back.code) == (State.NOTIFIED, Reason.RESUMED)
    resumed = replace(_warned(later - 30), state=State.NOTIFIED)
    term = decide_live(resumed, make_live(over, presence=here), rules, IDLE, LIMITS, GUARD, over)
    assert term.action == Action.TERM
    # Gone from the node: back to the ladder at once.
    away = OwnerPresence(sessions=1, idle_seconds=7200.0, terminal="pts/3")
    left = decide_live(held, make_live(later, presence=away), rules, IDLE, LIMITS, GUARD, later)
    assert left.state == State.NOTIFIED


@pytest.mark.parametrize(
    "presence",
    [
        None,  # not read: unknown is absence
        "absent",  # no session, no notebook tab
        "stale",  # logged in, but the terminal has been quiet for longer than presence_idle
        "unreadable",  # the notebook server's sockets could not be read
    ],
)
def test_absent_or_unknown_presence_holds_nothing(presence: str | None) -> None:
    from actuator.models import OwnerPresence

    seen = {
        None: None,
        "absent": OwnerPresence(),
        "stale": OwnerPresence(sessions=2, idle_seconds=1801.0, terminal="pts/1"),
        "unreadable": OwnerPresence(notebook_connections=None),
    }[presence]
    rules = eff(grace=600.0, presence_grace=3600.0, presence_idle=1800.0)
    now = T0 + 600
    d = decide_live(_warned(), make_live(now, presence=seen), rules, IDLE, LIMITS, GUARD, now)
    assert d.action == Action.TERM


def test_presence_is_only_read_where_a_rule_asks_and_never_over_the_owners_go_ahead() -> None:
    from actuator.models import OwnerPresence

    tab = OwnerPresence(notebook_connections=2)
    now = T0 + 600
    shipped = eff(grace=600.0)  # presence_grace 0: presence changes nothing
    assert shipped.presence_grace == 0
    d = decide_live(_warned(), make_live(now, presence=tab), shipped, IDLE, LIMITS, GUARD, now)
    assert d.action == Action.TERM
    rules = eff(grace=600.0, presence_grace=3600.0)
    d = decide_live(_warned(), make_live(now, presence=tab), rules, IDLE, LIMITS, GUARD, now)
    assert d.code == Reason.OWNER_PRESENT and "2 connection(s) to its notebook server" in d.reason
    released = _warned(release_requested_mono=T0 + 5)
    d = decide_live(released, make_live(now, presence=tab), rules, IDLE, LIMITS, GUARD, now)
    assert d.action == Action.TERM  # the owner said go ahead
    working = make_live(now, presence=tab, sm_util=0.9)
    assert decide_live(_warned(), working, rules, IDLE, LIMITS, GUARD, now).state == (
        State.CANCELLED
    )


def test_a_present_owners_process_that_can_be_suspended_is_suspended_not_held() -> None:
    """Presence holds back only a step that loses work: a suspension keeps the work and
    frees the GPU, so a present owner's eligible process is suspended at the grace's end;
    one the node cannot checkpoint is held as before, and a held one is let go to its
    suspension once the node can checkpoint it."""
    from actuator.models import OwnerPresence

    gib = 1024**3
    here = OwnerPresence(notebook_connections=1)
    rules = eff(grace=600.0, presence_grace=3600.0, suspend=True, suspend_host_reserve=gib)
    can = SUSPENDABLE
    now = T0 + 600
    live = make_live(now, presence=here, **can)
    d = decide_live(_warned(), live, rules, IDLE, LIMITS, GUARD, now)
    assert d.action == Action.SUSPEND and d.state == State.SUSPENDING
    cannot = make_live(now, presence=here, **{**can, "checkpoint_state": "locked"})
    d = decide_live(_warned(), cannot, rules, IDLE, LIMITS, GUARD, now)
    assert (d.state, d.code) == (State.DEFERRED, Reason.OWNER_PRESENT)
    held = replace(_warned(now), state=State.DEFERRED, deferred_from="notified")
    held = replace(held, reason_code=Reason.OWNER_PRESENT)
    later = now + 60
    still = decide_live(
        held,
        make_live(later, presence=here, **{**can, "checkpoint_state": "locked"}),
        rules,
        IDLE,
        LIMITS,
        GUARD,
        later,
    )
    assert still.action == Action.WAIT
    back = decide_live(
        held, make_live(later, presence=here, **can), rules, IDLE, LIMITS, GUARD, later
    )
    assert (back.state, back.code) == (State.NOTIFIED, Reason.RESUMED)
