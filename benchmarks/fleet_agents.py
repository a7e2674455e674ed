"""Many node agents in one process, for benchmarks/fleet.py: one agent app (the real
actuator.fleet.agent_app on a real LocalNode of its own sim dir) per node, each on its own
port with mutual TLS. One process instead of one gunicorn per node only to fit 50 agents
on a small machine; each node still answers only for itself.

    python benchmarks/fleet_agents.py BASE NODE [NODE ...]

Each agent binds a free port itself; the first line out is `ready {"NODE": PORT, ...}`.
"""

from __future__ import annotations

import json
import logging
import ssl
import sys
import threading
from pathlib import Path

from werkzeug.serving import make_server

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from actuator.fleet.agent_app import create_agent_app  # noqa: E402
from actuator.fleet.journal import SignalJournal  # noqa: E402
from actuator.node import LocalNode  # noqa: E402
from actuator.policy import Protect  # noqa: E402


def main() -> None:
    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # no line per request
    base = Path(sys.argv[1])
    certs = base / "certs"
    protect = Protect(protect_root=False, protected_uid_below=0)
    ports = {}
    for node in sys.argv[2:]:
        ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=str(certs / "ca.pem"))
        ctx.verify_mode = ssl.CERT_REQUIRED
        ctx.load_cert_chain(str(certs / f"agent-{node}.pem"), str(certs / f"agent-{node}.key"))
        local = LocalNode(node, protect, sim_dir=str(base / node), sm_window=1.0)
        app = create_agent_app(local, SignalJournal(base / f"journal-{node}.db"))
        server = make_server("127.0.0.1", 0, app, threaded=True, ssl_context=ctx)
        ports[node] = server.server_port
        threading.Thread(target=server.serve_forever, daemon=True).start()
    print("ready", json.dumps(ports), flush=True)
    threading.Event().wait()


if __name__ == "__main__":
    main()
