"""What a simulated GPU draws: nothing held is the card's floor, a held context with no work
costs more (the waste an idle process causes), and work climbs to the board's limit, never
past it."""

from __future__ import annotations

import pytest

from exporter.sim.power import DEFAULT, MODELS, model_for


@pytest.mark.parametrize("name", sorted(MODELS))
def test_a_held_context_costs_power_and_work_climbs_to_the_limit(name: str) -> None:
    model = MODELS[name]
    empty, held = model.draw(0.9, holding=False), model.draw(0.0, holding=True)
    assert empty == model.empty_w  # utilisation without a context is not drawn
    assert empty < held < model.draw(0.5, holding=True) < model.draw(1.0, holding=True)
    assert model.draw(1.0, holding=True) == model.limit_w
    assert model.draw(7.0, holding=True) == model.limit_w  # a poison reading stays bounded
    assert model.draw(-1.0, holding=True) == held


def test_the_model_is_found_in_the_gpus_name() -> None:
    assert model_for("NVIDIA H100 80GB HBM3") is MODELS["H100"]
    assert model_for("NVIDIA A100-SXM4-40GB") is MODELS["A100"]
    assert model_for("Tesla T4") is DEFAULT
