"""Work directories of a benchmark run, removed when it exits.

A storm run leaves some 700 MB (a thousand simulated nodes, their certificates and the
actuator's database): runs kept in the temporary directory would fill its disk.
GPU_RECLAIMER_BENCH_KEEP=1 keeps them for a look afterwards (each is printed then).

The product's processes a run starts (exporters, agents, actuators) record themselves in
the runtime directory (exporter/ownprocs.py); a run's own, unless GPU_RECLAIMER_RUNTIME_DIR
is set, so the records of the actuators a storm kills do not outlive it in the host's
/run/gpu-reclaimer (191 of them had gathered there on the benchmarks' machine).
"""

from __future__ import annotations

import atexit
import os
import shutil
import sys
import tempfile
from pathlib import Path

from exporter.ownprocs import RUNTIME_DIR_ENV

KEEP = "GPU_RECLAIMER_BENCH_KEEP"


def scratch_dir(prefix: str) -> Path:
    """A new directory under the system's temporary one, removed at exit (normal, an
    exception, Ctrl-C or sys.exit) unless GPU_RECLAIMER_BENCH_KEEP is set."""
    path = Path(tempfile.mkdtemp(prefix=prefix))
    if os.environ.get(KEEP):
        print(f"  work directory kept: {path}", file=sys.stderr, flush=True)
    else:
        atexit.register(shutil.rmtree, path, True)
    os.environ.setdefault(RUNTIME_DIR_ENV, str(path / "runtime"))  # the processes it starts
    return path
