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


def url(text: str) -> str:
    """An http(s) URL with a host: `prometheus:9090` alone is refused with the fix."""
    from urllib.parse import urlsplit

    parts = urlsplit(text)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise argparse.ArgumentTypeError(
            f"not an http(s) URL: {text!r} (write it with its scheme: http://{text})"
            if "://" not in text
            else f"not an http(s) URL: {text!r}"
        )
    return text


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1: {text!r}")
    return value


def positive_number(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 0 < value < float("inf"):  # NaN fails too
        raise argparse.ArgumentTypeError(f"must be a positive number: {text!r}")
    return value


def unreachable(what: str, url: str, error: BaseException) -> CommandError:
    """A service that did not answer, in one short line: the request's URL (which may hold a
    whole PromQL query) is left out; the reason stays."""
    import requests

    if isinstance(error, requests.ConnectionError):
        root = error.__context__ or error
        reason = str(getattr(root, "reason", None) or root)
        reason = reason.rsplit("]", 1)[-1].strip(" )'\"") or "connection failed"
        return CommandError(f"cannot reach {what} at {url}: {reason}")
    if isinstance(error, requests.Timeout):
        return CommandError(f"{what} at {url} did not answer in time")
    return CommandError(f"cannot query {what} at {url}: {str(error)[:300]}")
