"""Many node agents in one process, for benchmarks/fleet.py: one agent app (the real
actuator.fleet.agent_app on a real LocalNode of its own sim dir) per node, each on its own
port with mutual TLS, served by cheroot (kept-alive connections, as the real agent's
gunicorn keeps them). One process instead of one gunicorn per node only to fit many agents
on a small machine (a stand-in, labelled so in the benchmarks' output); each node still
answers only for itself.

    python benchmarks/fleet_agents.py BASE NODE [NODE ...]

Each agent binds a free port itself; the first line out is `ready {"NODE": PORT, ...}`.
"""

from __future__ import annotations

import json
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
    ports = {}
    for node in sys.argv[2:]:
        ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=str(certs / "ca.pem"))
        ctx.verify_mode = ssl.CERT_REQUIRED
        cert, key = certs / f"agent-{node}.pem", certs / f"agent-{node}.key"
        ctx.load_cert_chain(str(cert), str(key))
        local = LocalNode(node, protect, sim_dir=str(base / node), sm_window=1.0)
        app = create_agent_app(local, SignalJournal(base / f"journal-{node}.db"))
        ports[node] = serve(app, ctx, cert, key, threads=2)
    print("ready", json.dumps(ports), flush=True)
    threading.Event().wait()


if __name__ == "__main__":
    main()
