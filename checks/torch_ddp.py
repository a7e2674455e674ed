"""Opt-in check (not part of `make test`): a real PyTorch distributed training, judged by its
work and not by its sockets (issue 57). Starts a 2-rank Gloo DDP job on loopback
(`init_process_group("gloo")` with MASTER_ADDR=127.0.0.1, so rank 0 hosts the TCPStore),
trains a tiny model a few steps, then lets both ranks sit idle in a barrier, and reads each
rank's process tree with the exporter's own network meter, as a scrape would. Asserts:

- rank 0's TCPStore listens on an address other hosts reach (pytorch/pytorch#173909), and
  is counted as the job's own rendezvous, as are Gloo's pair listeners: no rank listens
  where it may serve, no rank has a client;
- the policy's service standard (actuator/policy.py) finds no evidence of a service for
  either rank, so an idle rank is judged as an idle job and a hung one as a hang;
- a plain HTTP server on every interface beside them is a service while a client is
  connected, and its evidence names the client.

Run it with `make check-torch` (a throwaway venv with PyTorch's CPU build and the
package), or in any environment that has both: `python checks/torch_ddp.py`.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from actuator.policy import Facts, Policy, resolve
from exporter.netactivity import NetworkMeter, NetworkReading, Rendezvous
from exporter.netdiag import SocketTables

STEPS = 5


def rank_main(rank: int, world: int, ready: object, done: object) -> None:  # pragma: no cover
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    dist.init_process_group("gloo", rank=rank, world_size=world)
    model = DistributedDataParallel(torch.nn.Linear(16, 4))
    optimiser = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(STEPS):
        optimiser.zero_grad()
        model(torch.randn(8, 16)).sum().backward()  # gradients all-reduced over Gloo
        optimiser.step()
    ready.set()  # type: ignore[attr-defined]
    done.wait()  # type: ignore[attr-defined]  # idle: the job holds its sockets and does nothing
    dist.destroy_process_group()


def read(meter: NetworkMeter, pid: int) -> NetworkReading:
    meter.tables.begin()
    try:
        return meter.read((pid, 0), [pid])
    finally:
        meter.tables.end()


def facts_of(user: str, seen: NetworkReading) -> Facts:
    """What the node's meter read, as the policy's facts (as the rule book builds them)."""
    return Facts(
        user=user,
        listens_external=bool(seen.listening_external),
        listen_ports=tuple(sorted(seen.ports)),
        clients=seen.clients,
        client_ago=seen.client_ago,
        watched_for=seen.watched_for,
    )


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def main() -> int:
    import torch.multiprocessing as mp

    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(free_port())
    ctx = mp.get_context("spawn")  # exec'd: each rank's environment names MASTER_PORT
    ready = [ctx.Event() for _ in range(2)]
    done = ctx.Event()
    ranks = [ctx.Process(target=rank_main, args=(r, 2, ready[r], done)) for r in range(2)]
    for process in ranks:
        process.start()
    tables = SocketTables()
    meter = NetworkMeter(tables, rendezvous=Rendezvous.of_host())
    failures: list[str] = []
    try:
        for event in ready:
            if not event.wait(120):
                print("a rank did not finish its steps in 120 s", file=sys.stderr)
                return 1
        port = int(os.environ["MASTER_PORT"])
        policy = Policy()
        for rank, process in enumerate(ranks):
            assert process.pid is not None
            first = read(meter, process.pid)
            time.sleep(1.0)
            seen = read(meter, process.pid)
            print(
                f"rank {rank} (pid {process.pid}): listeners loopback {seen.listening_loopback}, "
                f"rendezvous {seen.listening_rendezvous}, may serve {seen.listening_external}; "
                f"connections {seen.connections}, clients {seen.clients}; ports "
                f"{sorted(seen.ports)}"
            )
            if rank == 0 and (port not in seen.ports or not seen.listening_rendezvous):
                # (a TCPStore bound to loopback would count as a loopback listener instead)
                failures.append(f"rank 0 has no TCPStore on MASTER_PORT {port} other hosts reach")
            if seen.listening_external or seen.clients:
                failures.append(f"rank {rank} reads as something that may serve")
            facts = facts_of("trainer", seen)
            if resolve(policy, facts).service:
                failures.append(f"rank {rank} would be judged a service")
            if first.connections == 0:
                failures.append(f"rank {rank} holds no connection to its peer")
        failures += check_a_server_beside_them(meter, policy)
    finally:
        done.set()
        for process in ranks:
            process.join(30)
            if process.is_alive():
                process.kill()
        tables.close()
    for failure in failures:
        print(f"FAIL: {failure}", file=sys.stderr)
    print("ok" if not failures else f"{len(failures)} failure(s)")
    return 1 if failures else 0


def check_a_server_beside_them(meter: NetworkMeter, policy: Policy) -> list[str]:
    """An HTTP server on every interface at a port it was deployed on, in a child process
    (its own tree), with a client connected: a service, named by its client."""
    code = (
        "import http.server as h, sys\n"
        "s = h.ThreadingHTTPServer(('0.0.0.0', int(sys.argv[1])), h.SimpleHTTPRequestHandler)\n"
        "print('ready', flush=True); s.serve_forever()\n"
    )
    port = 8765
    server = subprocess.Popen(
        [sys.executable, "-c", code, str(port)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert server.stdout is not None and server.stdout.readline().strip() == "ready"
        client = socket.create_connection(("127.0.0.1", port))
        time.sleep(0.3)
        seen = read(meter, server.pid)
        client.close()
        facts = facts_of("server", seen)
        eff = resolve(policy, facts)
        print(f"http server (pid {server.pid}): {eff.rule}")
        if not eff.service or "client connection(s) open" not in eff.rule:
            return ["an HTTP server with a client connected is not a service named by its client"]
        return []
    finally:
        server.kill()
        server.wait()


if __name__ == "__main__":
    sys.exit(main())
