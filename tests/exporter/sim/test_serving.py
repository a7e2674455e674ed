"""The serving workload and the trace replay: real HTTP on real sockets, seen by the
exporter as a service would be (listeners by scope, data moved when requests are served,
SM work while they are in flight)."""

from __future__ import annotations

import http.client
import json
import subprocess
import threading
import time
from pathlib import Path

import psutil
import pytest

from exporter.sim.replay import Arrival, TraceError, gaps, read_trace, replay
from exporter.sim.state import read_procs
from tests.helpers.scraper import Scraper
from tests.support import free_service_port, gpu_reclaimer_command, http_get, wait_until

TRACE = (
    "TIMESTAMP,ContextTokens,GeneratedTokens\n"
    "2023-11-16 18:17:03.9799600,4808,10\n"
    "2023-11-16 18:17:04.0319600,3180,8\n"
    "2023-11-16 18:17:04.5781490,110,27\n"
)


def _serve(spawn_workload, address: str = "127.0.0.1") -> tuple[subprocess.Popen[bytes], int]:
    port = free_service_port()  # a service's port, not one the kernel picks (a rendezvous)
    job = spawn_workload(
        "--serve", str(port), "--serve-address", address, memory="2GiB", phases="idle"
    )
    wait_until(lambda: http_get(f"http://127.0.0.1:{port}/health") is not None)
    # That probe's connection, on the server's side, until the server has closed it: a
    # first scrape in between counted it as a client (1 where 0 was meant, now and then).
    wait_until(lambda: _connections(job.pid) == [], timeout=10)
    return job, port


def _connections(pid: int) -> list[str]:
    """The TCP connections the process holds, listeners aside."""
    process = psutil.Process(pid)
    held = getattr(process, "net_connections", None) or process.connections
    return [c.status for c in held(kind="tcp") if c.status != psutil.CONN_LISTEN]


def test_a_loopback_server_answers_and_its_data_is_activity(
    sim_node: Path, spawn_workload, tmp_path: Path
) -> None:
    job, port = _serve(spawn_workload)
    scraper = Scraper(sim_node)
    scraper.samples()  # the baseline: nothing before it counts
    labels = {"gpu": 0, "uuid": scraper.uuids[0], "pid": job.pid}
    assert scraper.value("gpu_process_listening_sockets", **labels, scope="loopback") == 1
    assert scraper.value("gpu_process_listening_sockets", **labels, scope="external") == 0
    activity = "gpu_process_network_last_activity_timestamp_seconds"
    assert scraper.process(activity, job.pid) is None
    # A gateway's keep-alive connection: open at the readings, as it is in front of a service.
    gateway = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    body = json.dumps({"prompt": "x" * 4 * 4808, "max_tokens": 10}).encode()  # a real prompt
    gateway.request("POST", "/v1/completions", body)
    assert gateway.getresponse().read()
    scraper.samples()
    moved = scraper.process(activity, job.pid)
    assert moved is not None and time.time() - moved < 5
    # Quiet again: the timestamp stays where the last request left it.
    time.sleep(0.5)
    scraper.samples()
    assert scraper.process(activity, job.pid) == moved
    gateway.close()


def test_replay_sends_the_traces_requests(sim_node: Path, spawn_workload, tmp_path: Path) -> None:
    _, port = _serve(spawn_workload)
    trace = tmp_path / "trace.csv"
    trace.write_text(TRACE)
    started = time.monotonic()
    tally = replay(read_trace(trace), f"http://127.0.0.1:{port}/v1/completions", speed=4)
    assert (tally.sent, tally.failed) == (3, 0)
    assert time.monotonic() - started >= 0.598 / 4  # the last arrival's offset, sped up
    assert tally.bytes_sent > 4 * 4096  # the prompts' text
    served = json.loads(http_get(f"http://127.0.0.1:{port}/health"))["served"]
    assert served == 3


def test_sm_work_follows_the_requests(sim_node: Path, spawn_workload) -> None:
    job, port = _serve(spawn_workload)
    phase = lambda: next(p for p in read_procs(sim_node) if p.pid == job.pid)  # noqa: E731
    assert phase().sm_util == 0
    arrivals = [Arrival(0.0, 100, 400)]  # 2 s of generation
    done: list[int] = []
    sender = threading.Thread(
        target=lambda: done.append(replay(arrivals, f"http://127.0.0.1:{port}/v1/completions").sent)
    )
    sender.start()
    wait_until(lambda: phase().sm_util > 50, timeout=10)
    assert phase().extra.get("phase") == "serving"
    sender.join(timeout=30)
    assert done == [1]
    wait_until(lambda: phase().sm_util == 0, timeout=10)


def test_a_server_on_every_address_is_a_service_to_the_exporter(
    sim_node: Path, spawn_workload
) -> None:
    """A listener other hosts reach, at the port it was deployed on: `external`; a client's
    connection open at a scrape is counted and remembered; a tree holding a connection is
    warming up (unknown) until the exporter has watched it for a window."""
    job, port = _serve(spawn_workload, "0.0.0.0")
    scraper = Scraper(sim_node, network_window=0.5)
    scraper.samples()
    labels = {"gpu": 0, "uuid": scraper.uuids[0], "pid": job.pid}
    assert scraper.value("gpu_process_listening_sockets", **labels, scope="external") == 1
    assert scraper.value("gpu_process_listening_sockets", **labels, scope="rendezvous") == 0
    assert scraper.value("gpu_process_network_clients", **labels) == 0
    assert scraper.value("gpu_process_network_last_client_timestamp_seconds", **labels) is None
    assert (
        scraper.value("gpu_exporter_process_network_unknown", **labels, reason="warming_up") is None
    )
    gateway = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        gateway.request("GET", "/health")
        assert gateway.getresponse().read()
        scraper.samples()
        assert scraper.value("gpu_process_network_clients", **labels) == 1
        seen = scraper.value("gpu_process_network_last_client_timestamp_seconds", **labels)
        assert seen == pytest.approx(time.time(), abs=2.0)
        # a connection at a tree's first reading hides what moved before: unknown for a window
        fresh = Scraper(sim_node, network_window=0.5)
        fresh.samples()
        unknown = fresh.value("gpu_exporter_process_network_unknown", **labels, reason="warming_up")
        assert unknown == 1
        time.sleep(0.6)
        fresh.samples()
        assert (
            fresh.value("gpu_exporter_process_network_unknown", **labels, reason="warming_up")
            is None
        )
        assert (fresh.value("gpu_process_network_watched_seconds", **labels) or 0) >= 0.5
    finally:
        gateway.close()


def test_a_trace_in_another_format_is_a_clear_error(tmp_path: Path) -> None:
    bad = tmp_path / "bad.csv"
    bad.write_text("time,tokens\n1,2\n")
    with pytest.raises(TraceError, match="no column TIMESTAMP"):
        read_trace(bad)
    bad.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\nyesterday,1,2\n")
    with pytest.raises(TraceError, match=":2:"):
        read_trace(bad)
    done = subprocess.run(
        [*gpu_reclaimer_command(), "sim", "replay-requests", str(bad), "--url", "http://x:1"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr


def test_arrivals_keep_the_traces_gaps(tmp_path: Path) -> None:
    trace = tmp_path / "trace.csv"
    trace.write_text(TRACE)
    arrivals = read_trace(trace)
    assert [a.prompt_tokens for a in arrivals] == [4808, 3180, 110]
    assert list(gaps(arrivals)) == pytest.approx([0.052, 0.546189], abs=1e-6)
    assert len(read_trace(trace, limit=2)) == 2
