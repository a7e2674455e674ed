"""Run `gpu-reclaimer` as a bare install would: the extras' libraries cannot be imported.

    python -m tests.helpers.bare ARGS...

Every top-level package an extra installs (exporter/extras.py) raises ModuleNotFoundError on
import, as it would where only the core dependencies are installed."""

from __future__ import annotations

import importlib.abc
import sys
from collections.abc import Sequence
from importlib.machinery import ModuleSpec
from types import ModuleType

from exporter.extras import EXTRA_OF


class _Absent(importlib.abc.MetaPathFinder):
    def find_spec(
        self, name: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        if name.partition(".")[0] in EXTRA_OF:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


if __name__ == "__main__":
    sys.meta_path.insert(0, _Absent())
    from exporter.cli import main

    sys.exit(main(sys.argv[1:]))
