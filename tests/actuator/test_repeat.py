"""Repeat habits (actuator/repeat.py): the step an owner's earlier reclaims reach, applied
to the policy of their next case; against a real actuator, the count and an SRE's reset."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import ValidationError

from actuator.keep_bounds import keep_refusal
from actuator.policy import Repeat, RepeatStep
from actuator.repeat import repeat_step, with_repeat
from exporter.sim.state import init_node
from tests.helpers.actuator import ActuatorFactory, Workloads, alert_for, payload
from tests.helpers.cases import eff

STEPS = Repeat(
    window=86400.0,
    steps=(
        RepeatStep(after=2, copy_project=True),
        RepeatStep(after=4, grace=60.0, keep_needs_sre=True),
    ),
)


@pytest.mark.parametrize("prior,after", [(0, None), (1, None), (2, 2), (3, 2), (4, 4), (9, 4)])
def test_the_last_step_the_count_reaches_applies(prior: int, after: int | None) -> None:
    step = repeat_step(prior, STEPS)
    assert (step.after if step else None) == after


def test_a_step_only_ever_shortens_the_grace() -> None:
    assert with_repeat(eff(grace=600.0), 1, STEPS) == eff(grace=600.0)  # no step yet
    copied = with_repeat(eff(grace=600.0), 2, STEPS)
    assert (copied.grace, copied.copy_project, copied.repeat_prior) == (600.0, True, 2)
    assert with_repeat(eff(grace=600.0), 5, STEPS).grace == 60.0
    assert with_repeat(eff(grace=30.0), 5, STEPS).grace == 30.0  # never longer


def test_a_step_can_hold_the_owners_keeps_for_an_sre() -> None:
    assert keep_refusal(with_repeat(eff(), 2, STEPS), 3600.0) is None
    held = keep_refusal(with_repeat(eff(), 4, STEPS), 3600.0)
    assert held is not None and "after 4 reclaims of your jobs, keeping needs an SRE" in held


def test_steps_must_climb() -> None:
    with pytest.raises(ValidationError, match="must increase"):
        Repeat(steps=(RepeatStep(after=3), RepeatStep(after=2)))


def applied(case: dict) -> dict:
    """The policy the case's notice was decided under (recorded with its evidence)."""
    notified = [t for t in case["timeline"] if t["state"] == "notified"]
    return notified[0]["evidence"]["thresholds"]


def test_an_owners_reclaims_shorten_the_next_grace_until_an_sre_resets_the_count(
    tmp_path: Path, actuator_factory: ActuatorFactory
) -> None:
    init_node(tmp_path / "node", gpus=3, memory_total=80 * 1024**3, name="NVIDIA H100 80GB HBM3")
    workloads = Workloads(tmp_path / "node")
    repeat = {"window": "1h", "steps": [{"after": 1, "grace": "0.2s"}]}
    actuator = actuator_factory(tmp_path / "node", repeat=repeat)
    try:
        cases = []
        for gpu in range(2):
            w = workloads.spawn(gpu=gpu)
            actuator.post(payload(alert_for(w)))
            cases.append(actuator.wait_state(w, "reclaimed", "failed", "refused", "cancelled"))
        first, second = cases
        assert first["state"] == second["state"] == "reclaimed"
        effective = [applied(actuator.get(f"/api/v1/cases/{c['id']}")) for c in cases]
        assert effective[0]["repeat_prior"] == 0 and effective[0]["grace"] == 0.5
        assert effective[1]["repeat_prior"] == 1 and effective[1]["grace"] == 0.2
        reset = actuator.session.post(
            actuator.url + "/api/v1/owners/root/repeat-reset",
            json={"reason": "talked it through", "by": "sre-ana"},
            timeout=5,
        )
        assert reset.status_code == 200 and reset.json()["reclaims_before"] == 2
        w = workloads.spawn(gpu=2)
        actuator.post(payload(alert_for(w)))
        third = actuator.wait_state(w, "reclaimed", "failed", "refused", "cancelled")
        assert applied(actuator.get(f"/api/v1/cases/{third['id']}"))["repeat_prior"] == 0
    finally:
        workloads.cleanup()
    records = [json.loads(line) for line in (actuator.workdir / "audit.jsonl").open()]
    (audited,) = [r for r in records if r.get("event") == "repeat_reset"]
    assert audited["user"] == "root" and audited["had"] == 2
    assert "sre-ana" in audited["by"] and audited["reason"] == "talked it through"
