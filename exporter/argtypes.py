"""argparse types whose errors read as the parser's own ("invalid size 'lots': …")."""

from __future__ import annotations

import argparse

from exporter import units


def size(text: str) -> int:
    try:
        return units.parse_size(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def duration(text: str) -> float:
    try:
        return units.parse_duration(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None
