"""One log format per process: text (the default) or JSON lines, for every logger of the
process, gunicorn's included (`gunicorn_logconfig()`). `--log-level` and `--log-format` are
read anywhere on the command line and in any case; GPU_RECLAIMER_LOG_LEVEL and
GPU_RECLAIMER_LOG_FORMAT are their defaults."""

from __future__ import annotations

import json
import logging
import os
import sys
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any, Literal

LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")
FORMATS = ("text", "json")
TEXT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
LEVEL_ENV, FORMAT_ENV = "GPU_RECLAIMER_LOG_LEVEL", "GPU_RECLAIMER_LOG_FORMAT"
Format = Literal["text", "json"]


class LogOptionError(ValueError):
    """A bad --log-level or --log-format (or their environment variables)."""


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time (UTC, ISO 8601), level, logger, message, and the
    exception's traceback as one string where there is one."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=False)


def formatter(fmt: str = "text") -> logging.Formatter:
    """The formatter for `fmt` (also the factory gunicorn's dictConfig calls)."""
    return JsonFormatter() if fmt == "json" else logging.Formatter(TEXT)


def _choose(value: str, allowed: Sequence[str], what: str, *, upper: bool) -> str:
    chosen = value.upper() if upper else value.lower()
    if chosen not in allowed:
        raise LogOptionError(f"{what}: {value!r} is not one of {', '.join(allowed)}")
    return chosen


def split_log_options(argv: Sequence[str]) -> tuple[list[str], str, str]:
    """(argv without the logging options, level, format): the options may come anywhere
    (before or after the sub-command), `--opt VALUE` or `--opt=VALUE`, in any case; the
    environment gives the defaults. Arguments after `--` are left alone."""
    level = os.environ.get(LEVEL_ENV) or "INFO"
    fmt = os.environ.get(FORMAT_ENV) or "text"
    rest: list[str] = []
    args = list(argv)
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "--":
            rest += args[i:]
            break
        name, eq, value = arg.partition("=")
        if name in ("--log-level", "--log-format"):
            if not eq:
                if i + 1 >= len(args):
                    raise LogOptionError(f"{name} needs a value")
                value = args[i + 1]
                i += 1
            if name == "--log-level":
                level = value
            else:
                fmt = value
        else:
            rest.append(arg)
        i += 1
    level = _choose(level, LEVELS, "--log-level", upper=True)
    fmt = _choose(fmt, FORMATS, "--log-format", upper=False)
    return rest, level, fmt


def setup_logging(level: str, fmt: str) -> None:
    """The root logger: one handler on stderr in `fmt`; children propagate to it."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(formatter(fmt))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level)
    logging.captureWarnings(True)  # a library's warning is a log line too, in the same format


def gunicorn_logconfig() -> dict[str, Any]:
    """gunicorn's `logconfig_dict`: its error and access loggers write through the root
    handler in this process's format (no second format in the same log)."""
    root = logging.getLogger()
    level = logging.getLevelName(root.level)
    json_lines = any(isinstance(h.formatter, JsonFormatter) for h in root.handlers)
    fmt = "json" if json_lines else "text"
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"main": {"()": "exporter.logs.formatter", "fmt": fmt}},
        "handlers": {
            "main": {
                "class": "logging.StreamHandler",
                "formatter": "main",
                "stream": "ext://sys.stderr",
            }
        },
        "root": {"level": level, "handlers": ["main"]},
        "loggers": {
            "gunicorn.error": {"level": level, "handlers": [], "propagate": True},
            # No access log (as before): only problems, through the same handler.
            "gunicorn.access": {"level": "WARNING", "handlers": [], "propagate": True},
        },
    }
