"""grafana/render_previews.py as a module (it is a script beside the dashboards, not part of
the installed package)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

SCRIPT = Path(__file__).resolve().parents[2] / "grafana" / "render_previews.py"


def previews_module() -> Any:
    spec = importlib.util.spec_from_file_location("render_previews", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module
