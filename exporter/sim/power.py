"""What a simulated GPU draws: an empty card, a card holding a CUDA context with no work
(what an idle process costs), and a busy one, per model, within the card's limit.

The figures are typical board power of each model (idle with and without a context, and the
power limit); the point is the shape real cards have, not a model of any one card.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class PowerModel:
    empty_w: float  # no process: the driver at its lowest performance state
    context_w: float  # a context held, no work: what an idle process keeps burning
    limit_w: float  # the board's power limit, at full utilisation

    def draw(self, utilization: float, holding: bool) -> float:
        """Watts at `utilization` (0-1) of the device, with or without a context held."""
        if not holding:
            return self.empty_w
        util = min(1.0, max(0.0, utilization))
        return self.context_w + util * (self.limit_w - self.context_w)


MODELS: dict[str, PowerModel] = {
    "H100": PowerModel(empty_w=70.0, context_w=115.0, limit_w=700.0),
    "H200": PowerModel(empty_w=75.0, context_w=120.0, limit_w=700.0),
    "A100": PowerModel(empty_w=55.0, context_w=85.0, limit_w=400.0),
    "L40S": PowerModel(empty_w=35.0, context_w=80.0, limit_w=350.0),
}
DEFAULT = PowerModel(empty_w=50.0, context_w=80.0, limit_w=300.0)


def model_for(name: str) -> PowerModel:
    """The model whose name appears in the GPU's name ("NVIDIA H100 80GB HBM3")."""
    return next((m for key, m in MODELS.items() if key in name), DEFAULT)
