"""Where NVML comes from: the real ``pynvml`` bindings, or a simulated node.

Everything above this module calls pynvml's functions on the object returned here and
cannot tell a simulated GPU from a real one.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

SIM_DIR_ENV = "GPU_RECLAIMER_SIM_DIR"


def resolve_sim_dir(sim_dir: str | os.PathLike[str] | None) -> Path | None:
    """The flag wins; else the environment; else None (real NVML)."""
    chosen = sim_dir if sim_dir is not None else os.environ.get(SIM_DIR_ENV) or None
    return Path(chosen) if chosen is not None else None


def open_nvml(sim_dir: str | os.PathLike[str] | None = None) -> Any:
    """Return an object with pynvml's API: the simulation when a sim dir is selected.

    Not initialised: callers call ``nvmlInit()`` (once) and handle its errors.
    """
    directory = resolve_sim_dir(sim_dir)
    if directory is not None:
        from exporter.sim.nvml import SimulatedNvml

        return SimulatedNvml(directory)
    import pynvml

    return pynvml
