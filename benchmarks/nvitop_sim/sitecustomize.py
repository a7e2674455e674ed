"""Loaded by the nvitop-exporter process of benchmarks/exporter_vs_nvitop.py (on its
PYTHONPATH): pynvml answers from the simulated node named by GPU_RECLAIMER_SIM_DIR before
nvitop imports it, so both exporters read the same simulated driver.

- every `nvml*` function the simulation has is replaced by the simulation's;
- every other one raises NVMLError_NotSupported, as a driver does for a query a GPU lacks
  (nvitop then reports it as N/A), and never loads the real library;
- `_nvmlGetFunctionPointer` is removed: nvitop then takes pynvml's own functions instead of
  its ctypes calls into the driver library (which the simulation cannot answer).
"""

from __future__ import annotations

import inspect
import os
import sys

if os.environ.get("GPU_RECLAIMER_SIM_DIR"):
    sys.path.insert(0, os.environ["GPU_RECLAIMER_REPO"])
    import pynvml

    from exporter.sim.nvml import SimulatedNvml

    _sim = SimulatedNvml(os.environ["GPU_RECLAIMER_SIM_DIR"])

    def _calls_the_library(fn: object) -> bool:
        try:
            return "_nvmlGetFunctionPointer" in inspect.getsource(fn)  # type: ignore[arg-type]
        except (OSError, TypeError):
            return False

    def _not_supported(*args: object, **kwargs: object) -> object:
        raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)

    for _name in dir(pynvml):
        _fn = getattr(pynvml, _name)
        # The driver's entry points: pynvml functions that look up a symbol of the library
        # (helpers such as nvmlExceptionClass stay as they are).
        if _name.startswith("nvml") and callable(_fn) and _calls_the_library(_fn):
            _own = type(_sim).__dict__.get(_name)  # the simulation's own methods only
            setattr(pynvml, _name, getattr(_sim, _name) if _own else _not_supported)
    pynvml._nvmlGetFunctionPointer = None  # type: ignore[attr-defined]
