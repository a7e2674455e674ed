"""One format for invalid settings files, used by every file the project reads
(exporter config, project mapping, actuator config):

    FILE: invalid config (2 error(s)):
      listen: Input should be a valid string
      projects #2 (lab).grace: Extra inputs are not permitted

List items are numbered from 1, as a person counts rules, and named when they have a name.
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError


def where(loc: tuple[Any, ...] | list[Any], data: Any) -> str:
    """The key path of one error; list items as `#N (name)`, counted from 1."""
    text = ""
    node = data
    for key in loc:
        if isinstance(key, int):
            item = node[key] if isinstance(node, list) and 0 <= key < len(node) else None
            name = item.get("name") if isinstance(item, dict) else None
            text += f" #{key + 1}" + (f" ({name})" if name else "")
        else:
            text += f".{key}" if text else str(key)
        try:
            node = node[key]
        except (KeyError, IndexError, TypeError):
            node = None
    return text or "(top level)"


def describe(error: ValidationError, data: Any, source: str, what: str = "config") -> str:
    lines = [f"{source}: invalid {what} ({error.error_count()} error(s)):"]
    for err in error.errors(include_url=False, include_input=False):
        lines.append(f"  {where(tuple(err['loc']), data)}: {err['msg']}")
    return "\n".join(lines)
