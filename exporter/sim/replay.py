"""Send requests at a recorded trace's arrival times: `gpu-reclaimer sim replay-requests`.

The trace is the Azure LLM inference trace's CSV (TIMESTAMP, ContextTokens,
GeneratedTokens; AzurePublicDataset, CC BY 4.0): each row becomes one POST to the serving
workload (`sim run --serve`), its body the prompt's size in text, at the row's offset from
the first row divided by `speed`. Requests go over a few persistent connections, as a
gateway in front of a service keeps them, so bursts overlap as they did in the trace.
"""

from __future__ import annotations

import csv
import http.client
import itertools
import json
import queue
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TextIO
from urllib.parse import urlsplit

from exporter.sim.serving import BYTES_PER_TOKEN

COLUMNS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")


class TraceError(ValueError):
    """The trace file is not in the expected format (the message says where)."""


@dataclass(frozen=True)
class Arrival:
    offset: float  # seconds after the trace's first request
    prompt_tokens: int
    max_tokens: int


def read_trace(path: Path, limit: int | None = None) -> list[Arrival]:
    """The trace's arrivals in time order (raises TraceError, OSError)."""
    rows: list[tuple[datetime, int, int]] = []
    with path.open(newline="", encoding="utf-8") as handle:
        reader = csv.DictReader(handle)
        missing = [c for c in COLUMNS if c not in (reader.fieldnames or ())]
        if missing:
            raise TraceError(f"{path}: no column {', '.join(missing)} (expected {COLUMNS})")
        for line, row in enumerate(reader, start=2):
            try:
                at = datetime.fromisoformat(row["TIMESTAMP"].strip()[:26])
                rows.append((at, int(row["ContextTokens"]), int(row["GeneratedTokens"])))
            except (TypeError, ValueError) as exc:
                raise TraceError(f"{path}:{line}: {exc}") from None
            if limit is not None and len(rows) >= limit:
                break
    if not rows:
        raise TraceError(f"{path}: no requests")
    rows.sort()
    first = rows[0][0]
    return [Arrival((at - first).total_seconds(), p, g) for at, p, g in rows]


@dataclass
class Tally:
    sent: int = 0
    failed: int = 0
    bytes_sent: int = 0


def replay(
    arrivals: list[Arrival],
    url: str,
    *,
    speed: float = 1.0,
    connections: int = 4,
    progress: Callable[[Tally, int], None] = lambda tally, total: None,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> Tally:
    """Send each arrival at its offset / speed; returns what was sent."""
    parts = urlsplit(url)
    if parts.scheme != "http" or not parts.hostname:
        raise TraceError(f"{url}: an http://HOST:PORT URL of the serving workload")
    host, port, path = parts.hostname, parts.port or 80, parts.path or "/v1/completions"
    work: queue.Queue[Arrival | None] = queue.Queue()
    tally, lock = Tally(), threading.Lock()

    def sender() -> None:
        conn = http.client.HTTPConnection(host, port, timeout=30)
        for arrival in iter(work.get, None):
            body = json.dumps(
                {
                    "prompt": "x" * (arrival.prompt_tokens * BYTES_PER_TOKEN),
                    "max_tokens": arrival.max_tokens,
                }
            ).encode()
            ok = _post(conn, path, body)
            if not ok:  # one retry on a fresh connection (the server closed an idle one)
                conn.close()
                conn = http.client.HTTPConnection(host, port, timeout=30)
                ok = _post(conn, path, body)
            with lock:
                tally.sent += 1
                tally.failed += 0 if ok else 1
                tally.bytes_sent += len(body)
        conn.close()

    threads = [threading.Thread(target=sender, daemon=True) for _ in range(max(1, connections))]
    for thread in threads:
        thread.start()
    started = clock()
    for index, arrival in enumerate(arrivals):
        wait = started + arrival.offset / speed - clock()
        if wait > 0:
            sleep(wait)
        work.put(arrival)
        progress(tally, index + 1)
    for _ in threads:
        work.put(None)
    for thread in threads:
        thread.join()
    return tally


def _post(conn: http.client.HTTPConnection, path: str, body: bytes) -> bool:
    try:
        conn.request("POST", path, body, {"Content-Type": "application/json"})
        response = conn.getresponse()
        response.read()
        return response.status == 200
    except (OSError, http.client.HTTPException):
        return False


def gaps(arrivals: list[Arrival]) -> Iterator[float]:
    """Seconds between consecutive arrivals."""
    for before, after in itertools.pairwise(arrivals):
        yield after.offset - before.offset


def progress_printer(out: TextIO = sys.stderr, every: int = 50) -> Callable[[Tally, int], None]:
    def show(tally: Tally, queued: int) -> None:
        if queued % every == 0:
            out.write(f"queued {queued}, answered {tally.sent} ({tally.failed} failed)\n")
            out.flush()

    return show
