"""Many node agents in one process, for benchmarks/fleet.py: one agent app (the real
actuator.fleet.agent_app on a real LocalNode of its own sim dir) per node, each on its own
port with mutual TLS, served by cheroot (kept-alive connections, as the real agent's
gunicorn keeps them). One process instead of one gunicorn per node only to fit many agents
on a small machine (a stand-in, labelled so in the benchmarks' output); each node still
answers only for itself.

    python benchmarks/fleet_agents.py BASE NODE [NODE ...]

Each agent binds a free port itself; the first line out is `ready {"NODE": PORT, ...}`. On
SIGUSR1 it writes the requests its agents answered, by endpoint, summed over its nodes, to
BASE/agent-calls-PID.json (the agents' own `gpu_reclaimer_agent_requests_total`).
"""

from __future__ import annotations

import json
import os
import signal
import ssl
import sys
import threading
from pathlib import Path
from typing import Any

from cheroot import wsgi
from cheroot.ssl.builtin import BuiltinSSLAdapter

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from actuator.fleet.agent_app import create_agent_app  # noqa: E402
from actuator.fleet.journal import SignalJournal  # noqa: E402
from actuator.node import LocalNode  # noqa: E402
from actuator.policy import Protect  # noqa: E402


def serve(app: Any, ctx: ssl.SSLContext, cert: Path, key: Path, threads: int) -> int:
    """One agent's server: cheroot (HTTP/1.1, connections kept open between requests, as the
    real agent's gunicorn gthread worker keeps them for 30 s: actuator/fleet/agent_server.py).
    werkzeug's development server closes every connection, which made every call a new TLS
    handshake on both sides (most of the CPU a case cost in this benchmark before
    2026-12-05). Returns the port it listens on."""
    server = wsgi.Server(("127.0.0.1", 0), app, numthreads=threads, server_name="agent")
    # Each server's connection loop wakes every expiration_interval (0.5 s) to close idle
    # connections: 1,000 agents in two processes woke 2,000 times a second, 0.18 of a core
    # with nothing to answer. An agent alone on its node costs its node that; here the
    # stand-ins share the actuator's cores, so they look for expired connections every 5 s.
    server.expiration_interval = 5.0
    adapter = BuiltinSSLAdapter(str(cert), str(key))
    adapter.context = ctx  # ours: a client certificate signed by the fleet CA is required
    server.ssl_adapter = adapter
    server.prepare()
    threading.Thread(target=server.serve, daemon=True).start()
    return int(server.bind_addr[1])


def main() -> None:
    base = Path(sys.argv[1])
    certs = base / "certs"
    protect = Protect(protect_root=False, protected_uid_below=0)
    ports, apps = {}, []
    for node in sys.argv[2:]:
        ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=str(certs / "ca.pem"))
        ctx.verify_mode = ssl.CERT_REQUIRED
        cert, key = certs / f"agent-{node}.pem", certs / f"agent-{node}.key"
        ctx.load_cert_chain(str(cert), str(key))
        local = LocalNode(node, protect, sim_dir=str(base / node), sm_window=1.0)
        app = create_agent_app(local, SignalJournal(base / f"journal-{node}.db"))
        apps.append(app)
        ports[node] = serve(app, ctx, cert, key, threads=2)
    print("ready", json.dumps(ports), flush=True)
    signal.signal(signal.SIGUSR1, lambda *_: write_calls(base, apps))
    threading.Event().wait()


def write_calls(base: Path, apps: list[Any]) -> None:
    """The requests answered so far by endpoint, from each agent's own counter."""
    calls: dict[str, float] = {}
    for app in apps:
        for metric in app.requests_total.collect():
            for sample in metric.samples:
                if sample.name.endswith("_total"):
                    endpoint = sample.labels["endpoint"]
                    calls[endpoint] = calls.get(endpoint, 0) + sample.value
    path = base / f"agent-calls-{os.getpid()}.json"
    path.with_suffix(".tmp").write_text(json.dumps(calls))
    path.with_suffix(".tmp").replace(path)


if __name__ == "__main__":
    main()
