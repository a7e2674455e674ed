"""Parsing of human sizes and durations used on command lines and in config files."""

from __future__ import annotations

import math
import re

_SIZE_UNITS = {
    "": 1,
    "b": 1,
    "k": 1000,
    "kb": 1000,
    "m": 1000**2,
    "mb": 1000**2,
    "g": 1000**3,
    "gb": 1000**3,
    "t": 1000**4,
    "tb": 1000**4,
    "kib": 1024,
    "mib": 1024**2,
    "gib": 1024**3,
    "tib": 1024**4,
}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*$")
# Prometheus' duration grammar (ms, s, m, h, d, w, y; 1h30m), and decimals (1.5s).
_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d|w|y)")
_DURATION_SECONDS = {
    "ms": 0.001,
    "s": 1.0,
    "m": 60.0,
    "h": 3600.0,
    "d": 86400.0,
    "w": 7 * 86400.0,
    "y": 365 * 86400.0,
}


def parse_size(text: str | int) -> int:
    """'80GiB' -> bytes. Decimal (GB) and binary (GiB) units; a bare number is bytes."""
    if isinstance(text, bool):
        raise ValueError("a size, not a boolean")
    if isinstance(text, int):
        if text < 0:
            raise ValueError(f"size must be >= 0: {text!r}")
        return text
    match = _SIZE.match(text)
    unit = match.group(2).lower() if match else ""
    if not match or unit not in _SIZE_UNITS:
        raise ValueError(f"invalid size {text!r}: use a number with a unit such as 512MiB, 4GiB")
    return int(float(match.group(1)) * _SIZE_UNITS[unit])


def parse_duration(text: str | float) -> float:
    """'1m30s' -> 90.0 seconds; a bare number is seconds."""
    if isinstance(text, bool):
        raise ValueError("a duration, not a boolean")
    if isinstance(text, int | float):
        text = str(text)
    text = text.strip()
    try:
        value = float(text)
    except ValueError:
        pass
    else:
        if not math.isfinite(value):  # 'nan' and 'inf' are floats, not durations
            raise ValueError(f"invalid duration {text!r}: not a finite number of seconds")
        if value < 0:
            raise ValueError(f"invalid duration {text!r}: must not be negative")
        return value
    parts = _DURATION_PART.findall(text)
    if not parts or "".join(n + u for n, u in parts) != text:
        raise ValueError(f"invalid duration {text!r}: use forms like 30s, 5m, 1h30m, 7d, 1w")
    return sum(float(n) * _DURATION_SECONDS[u] for n, u in parts)


def format_duration(seconds: float) -> str:
    """Seconds for people, in the units durations are written in: 86400 -> '24h',
    5400 -> '1h30m', 90 -> '1m30s', 0.25 -> '250ms' (hours at most: '48h', not '2d')."""
    if 0 < seconds < 1:
        return f"{round(seconds * 1000)}ms"
    total = round(seconds)
    out = []
    for unit, size in (("h", 3600), ("m", 60), ("s", 1)):
        count, total = divmod(total, size)
        if count:
            out.append(f"{count}{unit}")
    return "".join(out) or "0s"


def format_size(value: float) -> str:
    """Bytes -> '3.5 GiB' for humans."""
    for unit, factor in (("TiB", 1024**4), ("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if abs(value) >= factor:
            return f"{value / factor:.1f} {unit}"
    return f"{int(value)} B"
