"""argparse types whose errors read as the parser's own ("invalid size 'lots': …"), and
CommandError, the one way a command reports a user's mistake."""

from __future__ import annotations

import argparse

from exporter import units


class CommandError(Exception):
    """A user's mistake (a missing directory, a value out of range): printed as
    'gpu-reclaimer COMMAND: error: ...' with exit status 2, never as a traceback."""


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


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1: {text!r}")
    return value
