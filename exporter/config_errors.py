"""One format for invalid settings files, used by every file the project reads
(exporter config, project mapping, actuator config):

    FILE: invalid config (2 error(s)):
      listen: Input should be a valid string
      projects #2 (lab).grace: not a known key here (a typo, or a key of another section?)

List items are numbered from 1, as a person counts rules, and named when they have a name.
The validator's own wording is kept only where it speaks to people: its "Value error, "
prefix, "Extra inputs are not permitted" and raw patterns are said in the project's words.
"""

from __future__ import annotations

import os
from typing import Any

import yaml
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
        lines.append(f"  {where(tuple(err['loc']), data)}: {said(err)}")
    return "\n".join(lines)


def said(err: Any) -> str:
    """One error in the project's words, not the validator's machinery."""
    kind, message = err.get("type", ""), str(err.get("msg", ""))
    if kind == "value_error":
        return message.removeprefix("Value error, ")
    if kind == "extra_forbidden":
        return "not a known key here (a typo, or a key of another section?)"
    if kind == "missing":
        return "required, and missing"
    if kind == "string_pattern_mismatch":
        return "not in the form this setting takes (see its description in the reference)"
    return message


class YamlFileError(ValueError):
    """A YAML file that cannot be read or parsed; the message is one line naming the file
    and, for a syntax error, the line and column."""


def read_yaml(path: str | os.PathLike[str]) -> Any:
    """The one reader of the project's YAML files (configs, rules, directories, mappings)."""
    try:
        with open(path, encoding="utf-8") as f:
            return yaml.safe_load(f)
    except OSError as error:
        raise YamlFileError(f"{os.fspath(path)}: cannot read: {error.strerror or error}") from None
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(error, "problem", None) or str(error).splitlines()[0]
        raise YamlFileError(f"{os.fspath(path)}: not valid YAML{where}: {problem}") from None
