"""The agent protocol's bodies: what one side dumps the other loads unchanged, and a
malformed or oversized body is refused whole (never half-read into a signal)."""

from __future__ import annotations

import json
from signal import Signals

import pytest
from pydantic import ValidationError

from actuator.fleet import wire
from actuator.models import Excluded, LiveState, Member, SignalResult, Target

TARGET = Target("node-b", 4242, 123456, "boot-1", "GPU-0", start_time=1_700_000_000.5)
MEMBERS = [Member(4242, 123456, 1001), Member(4243, 123460, None)]


def _through_json(data: object) -> object:
    """As it crosses the wire: text, then parsed by the other side."""
    return json.loads(json.dumps(data))


def test_every_body_survives_the_wire_unchanged() -> None:
    live = LiveState(
        sampled_at=1_700_000_100.0,
        exists=True,
        start_ticks=123456,
        boot_id="boot-1",
        uid=1001,
        user="lilei",
        groups=("ml", "gpu"),
        cmdline="python train.py --name '训练'",
        gpu_memory_bytes=4 * 2**30,
        sm_util=None,  # unknown stays unknown, never 0
        util_unknown="per-process utilisation unsupported",
        members=tuple(MEMBERS),
        excluded=(Excluded(4244, "protected command 'tensorboard'"),),
        errors=("NVML: timeout",),
    )
    assert wire.load_live(_through_json(wire.dump_live(live))) == live
    assert wire.load_target(_through_json(wire.dump_target(TARGET))) == TARGET
    assert wire.load_members(_through_json(wire.dump_members(MEMBERS))) == MEMBERS
    results = [SignalResult(4242, "SIGTERM", True), SignalResult(4243, "SIGTERM", False, "gone")]
    assert wire.load_results(_through_json(wire.dump_results(results))) == results


@pytest.mark.parametrize(
    "body",
    [
        {"pid": "\uff14\uff12", "node": "n", "start_ticks": 1, "boot_id": "b", "uuid": "u"},
        {"pid": "0x10", "node": "n", "start_ticks": 1, "boot_id": "b", "uuid": "u"},
        {"pid": 4242.5, "node": "n", "start_ticks": 1, "boot_id": "b", "uuid": "u"},
        {"node": "n", "start_ticks": 1, "boot_id": "b", "uuid": "u"},  # no pid
        [4242],
        None,
    ],
)
def test_a_malformed_target_is_refused(body: object) -> None:
    with pytest.raises(ValidationError):
        wire.load_target(body)


def test_a_signal_request_is_one_of_two_signals_with_a_safe_key() -> None:
    request = wire.SignalRequest(
        key="case-17:term", target=TARGET, members=MEMBERS, signal="SIGTERM"
    )
    assert request.signum is Signals.SIGTERM and not request.dry_run
    again = wire.SignalRequest.model_validate(_through_json(request.model_dump(mode="json")))
    assert again == request
    good = request.model_dump(mode="json")
    for change in (
        {"signal": "SIGSTOP"},  # only the two escalation steps
        {"signal": "9"},
        {"key": ""},
        {"key": "17; rm -rf /"},
        {"key": "k" * 201},
        {"extra": True},  # an unknown field: refused, not ignored
        {"members": [{"pid": 1, "start_ticks": 1}] * (wire.MAX_MEMBERS + 1)},
    ):
        with pytest.raises(ValidationError):
            wire.SignalRequest.model_validate({**good, **change})


def test_a_resume_names_at_most_64_gpus_to_avoid_each_a_plain_uuid() -> None:
    """The GPUs a restore must not take (given to a waiter) come from the actuator; on the
    agent each is a UUID of NVML's alphabet, or the whole request is refused."""
    base = {"key": "case-7-9", "target": TARGET.__dict__, "call": "resume", "need_bytes": 1}
    ok = wire.CheckpointRequest.model_validate({**base, "avoid": ["GPU-0a1b-2c3d"]})
    assert ok.avoid == ("GPU-0a1b-2c3d",)
    assert wire.CheckpointRequest.model_validate(base).avoid == ()
    for avoid in (["GPU-0; rm -rf /"], ["../GPU"], [""], ["GPU-x"] * 65, "GPU-0"):
        with pytest.raises(ValidationError):
            wire.CheckpointRequest.model_validate({**base, "avoid": avoid})
