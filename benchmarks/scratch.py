"""Work directories of a benchmark run, removed when it exits.

A storm run leaves some 700 MB (a thousand simulated nodes, their certificates and the
actuator's database): runs kept in the temporary directory would fill its disk.
GPU_RECLAIMER_BENCH_KEEP=1 keeps them for a look afterwards (each is printed then).
"""

from __future__ import annotations

import atexit
import os
import shutil
import sys
import tempfile
from pathlib import Path

KEEP = "GPU_RECLAIMER_BENCH_KEEP"


def scratch_dir(prefix: str) -> Path:
    """A new directory under the system's temporary one, removed at exit (normal, an
    exception, Ctrl-C or sys.exit) unless GPU_RECLAIMER_BENCH_KEEP is set."""
    path = Path(tempfile.mkdtemp(prefix=prefix))
    if os.environ.get(KEEP):
        print(f"  work directory kept: {path}", file=sys.stderr, flush=True)
    else:
        atexit.register(shutil.rmtree, path, True)
    return path
