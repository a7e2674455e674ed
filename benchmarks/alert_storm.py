"""An alert storm: a fleet's worth of firing alerts at once (a Prometheus restart, an
Alertmanager re-send, a fleet back from a partition), decided by one central actuator that
re-checks every case through its node's agent over mutual TLS, killed and restarted in
the middle.

    python benchmarks/alert_storm.py [--nodes 1000] [--per-node 24] [--concurrency 32]
        [--per-request 1] [--restart-at 0.5] [--agents 2] [--deadline 900]
        [--store sqlite|postgres] [--replicas 1] [--fresh-connections]
        [--senders loop|threads] [--intake-first SECONDS]

The fleet: NODES simulated nodes of 8 GPUs, each listing PER_NODE processes. The processes
are PER_NODE real `sleep` processes shared by every node (each node's agent inspects them
as its own: 24,000 processes would not fit this machine's /proc reads), and the agents are
the real agent app, one per node on its own port with its own certificate, hosted by
--agents stand-in processes (a stand-in for 1,000 agent hosts, labelled as such in the
output). One central actuator (gunicorn, 2 workers, observe mode: every case is re-checked
live twice a CPU window apart and decided, nothing signalled; the breaker off so every case
takes the full path) on SQLite; or, with --store postgres, on a PostgreSQL server started
here, with --replicas actuators sharing it (one holds the reconciler's lease; the posts go
to each in turn, and a failed post is retried on the next, as a load balancer in front of
the replicas would).

The alerts are posted as the shipped Alertmanager route sends them: grouped by process, so
one alert per webhook request (--per-request to try Alertmanager's grouping by node
instead), from --concurrency connections at once (Alertmanager flushes every group whose
group_wait ended, in parallel), each kept alive between requests as Alertmanager's client
keeps them (--fresh-connections: a new one per request, as this benchmark posted before
2026-12-06); a request that fails (refused, reset, 5xx) is retried with
backoff, as Alertmanager retries. When --restart-at of the requests are acknowledged the
actuator (with replicas: the one holding the lease) is killed (SIGKILL, its workers with
it) and started again on the same database and port: requests in flight fail and are
retried. The senders share one event loop (aiohttp), as Alertmanager's Go client sends;
`--senders threads` gives each its own Python thread, as this benchmark did before
2026-12-07, whose acknowledgements then include the senders' own waits for the
benchmark's interpreter.

It reports the webhook's acknowledgement latency (p50/p99, answered requests), the retries,
every alert's case (none lost: one case per alert acknowledged or retried; none doubled),
how long each case took from its creation to its decision (p50/p99, max) and the whole
storm from the first request to the last decision, and CPU per case: the actuator's
processes (both incarnations) and the agents' stand-ins.
Targets (issue 50): ack p99 <= 100 ms, every case decided within 5 minutes, nothing lost,
<= 10 ms of actuator CPU per case.
"""

from __future__ import annotations

import argparse
import asyncio
import atexit
import http.client
import json
import os
import platform
import queue
import signal
import sqlite3
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Awaitable, Callable
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from fleet import TOKEN, alert, start_actuator, start_agents  # noqa: E402
from measure import percentile  # noqa: E402
from scratch import scratch_dir  # noqa: E402

from exporter.procfs import start_ticks  # noqa: E402
from exporter.sim.state import ProcState, init_node, load_node, write_proc  # noqa: E402
from tests.helpers.fleet import make_certs  # noqa: E402
from tests.support import free_port  # noqa: E402

GPUS = 8


@dataclass
class Fleet:
    targets: list[dict[str, Any]]
    sleepers: list[subprocess.Popen[bytes]]
    agents: list[subprocess.Popen[str]]


def start_fleet(base: Path, nodes: int, per_node: int, hosts: int) -> Fleet:
    names = [f"gpu-{i:04d}" for i in range(nodes)]
    print(f"  certificates for {nodes} agents ...", flush=True)
    make_certs(base / "certs", names)
    sleepers = [
        subprocess.Popen(["sleep", "86400"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for _ in range(per_node)
    ]
    ticks = {p.pid: start_ticks(p.pid) or 0 for p in sleepers}
    targets = []
    for name in names:
        init_node(base / name, gpus=GPUS, memory_total=80 * 1024**3, name="NVIDIA H100 80GB HBM3")
        gpus = load_node(base / name).gpus
        for i, proc in enumerate(sleepers):
            gpu = gpus[i % GPUS]
            write_proc(
                base / name,
                ProcState(proc.pid, ticks[proc.pid], gpu.index, 4 * 1024**3, 0, time.time()),
            )
            targets.append(
                {"node": name, "pid": proc.pid, "uuid": gpu.uuid, "ticks": ticks[proc.pid]}
            )
    print(f"  {nodes} agents in {hosts} stand-in processes ...", flush=True)
    agents = start_agents(base, names, hosts)
    return Fleet(targets, sleepers, agents)


@dataclass
class Poster:
    """Alertmanager's side: every request retried until it is acknowledged, each sender on
    a connection it keeps (Alertmanager's HTTP client, prometheus/common's, keeps idle
    connections alive, up to 1,000 per host) unless --fresh-connections; a failed one is
    closed and the next try opens another (with replicas, on the next replica)."""

    ports: list[int]
    fresh: bool = False
    acks: list[float] = field(default_factory=list)
    acked_at: list[float] = field(default_factory=list)  # monotonic, beside each of acks
    inside: list[float] = field(default_factory=list)  # the answer's own took_ms, in s
    retries: int = 0
    acked: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)
    turn: int = 0
    kept: threading.local = field(default_factory=threading.local)

    def post(self, body: bytes) -> None:
        delay = 0.5
        conn: http.client.HTTPConnection | None = getattr(self.kept, "conn", None)
        self.kept.conn = None
        with self.lock:
            self.turn += 1
            turn = self.turn
        while True:
            try:
                if conn is None:
                    port = self.ports[turn % len(self.ports)]
                    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
                started = time.monotonic()
                conn.request(
                    "POST",
                    "/api/v1/alerts",
                    body=body,
                    headers={
                        "Authorization": f"Bearer {TOKEN}",
                        "Content-Type": "application/json",
                    },
                )
                response = conn.getresponse()
                answer = response.read()
                if response.status == 200:
                    took = json.loads(answer).get("took_ms", float("nan")) / 1000
                    with self.lock:
                        self.inside.append(took)
                        self.acks.append(time.monotonic() - started)
                        self.acked_at.append(time.monotonic())
                        self.acked += 1
                    if self.fresh or response.will_close:
                        conn.close()
                    else:
                        self.kept.conn = conn
                    return
            except (OSError, http.client.HTTPException):
                pass
            if conn is not None:
                conn.close()
                conn = None
            with self.lock:
                self.retries += 1
            turn += 1  # the next replica, where there are several
            time.sleep(delay)
            delay = min(5.0, delay * 2)


class LoopPoster(Poster):
    """The same senders on one event loop in one thread (aiohttp), as Alertmanager's Go
    client sends: a Python thread per sender measures, besides the actuator, its own wait
    for this process's interpreter (32 threads taking turns), which an event loop does not.
    Each sender keeps its own connection (a session of one), on its replica until a post
    fails there."""

    async def run(
        self, bodies: list[bytes], concurrency: int, after_ack: Callable[[], Awaitable[None]]
    ) -> None:
        import aiohttp

        todo = iter(bodies)

        async def sender(index: int) -> None:
            connector = aiohttp.TCPConnector(limit=1, force_close=self.fresh)
            timeout = aiohttp.ClientTimeout(total=30)
            async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
                turn = index
                for body in todo:  # one shared iterator: each body is taken once
                    turn = await self._post(session, body, turn)
                    await after_ack()

        await asyncio.gather(*(sender(i) for i in range(concurrency)))

    async def _post(self, session: Any, body: bytes, turn: int) -> int:
        import aiohttp

        delay = 0.5
        headers = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
        while True:
            url = f"http://127.0.0.1:{self.ports[turn % len(self.ports)]}/api/v1/alerts"
            try:
                started = time.monotonic()
                async with session.post(url, data=body, headers=headers) as response:
                    answer = await response.read()
                    done = time.monotonic()
                    if response.status == 200:
                        self.acks.append(done - started)
                        self.acked_at.append(done)
                        self.inside.append(json.loads(answer).get("took_ms", float("nan")) / 1000)
                        self.acked += 1
                        return turn
            except (OSError, aiohttp.ClientError):  # TimeoutError is an OSError
                pass
            self.retries += 1
            turn += 1  # the next replica, where there are several
            await asyncio.sleep(delay)
            delay = min(5.0, delay * 2)


def requests_for(targets: list[dict[str, Any]], per_request: int) -> list[bytes]:
    starts = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() - 600))
    bodies = []
    for i in range(0, len(targets), per_request):
        group = targets[i : i + per_request]
        body = {
            "version": "4",
            "status": "firing",
            "receiver": "gpu-reclaimer-actuator",
            "groupLabels": {},
            "commonLabels": {},
            "commonAnnotations": {},
            "externalURL": "http://alertmanager",
            "groupKey": f"storm-{i}",
            "truncatedAlerts": 0,
            "alerts": [alert(t, starts) for t in group],
        }
        bodies.append(json.dumps(body).encode())
    return bodies


def machine_busy() -> tuple[float, float]:
    """(busy, all) CPU seconds of the whole machine so far: busy is all but idle and
    I/O wait."""
    t = psutil.cpu_times()
    idle = t.idle + getattr(t, "iowait", 0.0)
    return sum(t) - idle, sum(t)


def server_cpu(data: Path) -> float:
    """The PostgreSQL server's CPU seconds: its postmaster's, its running backends' and
    those of the backends that already exited (the postmaster waited for them)."""
    try:
        postmaster = psutil.Process(int((data / "postmaster.pid").read_text().split()[0]))
        t = postmaster.cpu_times()
    except (OSError, ValueError, psutil.Error):
        return float("nan")
    return cpu(postmaster) + t.children_user + t.children_system


def cpu(process: psutil.Process) -> float:
    total = 0.0
    try:
        tree = [process, *process.children(recursive=True)]
    except psutil.NoSuchProcess:
        return 0.0
    for p in tree:
        try:
            t = p.cpu_times()
            total += t.user + t.system
        except psutil.NoSuchProcess:
            pass
    return total


# from the alert's first acknowledgement (an episode, durable before the answer; the
# reconciler makes it a case in batches) to the case's decision
CASES = (
    "SELECT c.node, c.pid, c.state, c.reason_code, MIN(e.first_seen), c.updated "
    "FROM cases c LEFT JOIN episodes e ON e.case_id = c.id GROUP BY c.id"
)
STATES = "SELECT state, COUNT(*) FROM cases GROUP BY state"


class Unreadable(Exception):
    """The actuator's database could not be read (its tables not made yet, say)."""


def query(database: str, sql: str) -> list[tuple[Any, ...]]:
    """Rows of `sql` read from the actuator's database (a SQLite file, read-only, or a
    PostgreSQL DSN); raises Unreadable."""
    if database.startswith("postgresql://"):
        import psycopg

        try:
            with psycopg.connect(database) as conn:
                return conn.execute(sql).fetchall()
        except psycopg.Error as exc:
            raise Unreadable(str(exc)) from exc
    try:
        with sqlite3.connect(f"file:{database}?mode=ro", uri=True, timeout=30) as db:
            return db.execute(sql).fetchall()
    except sqlite3.Error as exc:
        raise Unreadable(str(exc)) from exc


def counts(database: str) -> dict[str, int]:
    try:
        return dict(query(database, STATES))
    except Unreadable:  # not made yet: asked again
        return {}


def stop(processes: list[Any], *, group: bool = False) -> None:
    """SIGKILL each process, or with `group` its process group (an actuator: gunicorn's
    master started in a session of its own, and its workers)."""
    for process in processes:
        try:
            if group:
                os.killpg(process.pid, signal.SIGKILL)
            else:
                process.kill()
        except ProcessLookupError:
            pass
        process.wait()


def agent_calls(base: Path, agents: list[subprocess.Popen[str]]) -> dict[str, float]:
    """The requests the agents answered, by endpoint (each stand-in writes its sum on
    SIGUSR1: benchmarks/fleet_agents.py)."""
    calls: dict[str, float] = {}
    for agent in agents:
        path = base / f"agent-calls-{agent.pid}.json"
        agent.send_signal(signal.SIGUSR1)
        deadline = time.monotonic() + 30
        while not path.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        for endpoint, count in (json.loads(path.read_text()) if path.exists() else {}).items():
            calls[endpoint] = calls.get(endpoint, 0) + count
    return calls


def leader(database: str, replicas: list[subprocess.Popen[bytes]]) -> int | None:
    """The index of the replica whose worker holds the reconciler's lease (None where it
    cannot be told within 10 s)."""
    if len(replicas) == 1:
        return 0
    for _ in range(100):
        try:
            rows = query(database, "SELECT holder FROM lease WHERE name = 'reconciler'")
        except Unreadable:
            rows = []
        if rows:
            pid = int(str(rows[0][0]).split(":")[1])
            try:
                group = os.getpgid(pid)
            except ProcessLookupError:
                group = None
            for index, replica in enumerate(replicas):
                if replica.pid == group:
                    return index
        time.sleep(0.1)
    return None


def run_on_a_loop(work: Awaitable[None]) -> None:
    """uvloop where installed, as the actuator's own loop."""
    try:
        import uvloop

        factory: Callable[[], asyncio.AbstractEventLoop] | None = uvloop.new_event_loop
    except ImportError:
        factory = None
    with asyncio.Runner(loop_factory=factory) as runner:
        runner.run(work)  # type: ignore[arg-type]


def main() -> int:
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("--nodes", type=int, default=1000, help="simulated nodes of 8 GPUs")
    parser.add_argument("--per-node", type=int, default=24, help="firing alerts per node")
    parser.add_argument("--per-request", type=int, default=1, help="alerts per webhook request")
    parser.add_argument("--concurrency", type=int, default=32, help="requests in flight")
    parser.add_argument(
        "--restart-at",
        type=float,
        default=0.5,
        help="share of requests acknowledged when the "
        "actuator is killed and started again (0: no restart)",
    )
    parser.add_argument("--agents", type=int, default=2, help="agent stand-in processes")
    parser.add_argument("--parallel", type=int, default=8, help="reconciler.parallel")
    parser.add_argument("--deadline", type=float, default=900, help="give up after, s")
    parser.add_argument(
        "--store",
        choices=("sqlite", "postgres"),
        default="sqlite",
        help="the actuator's database (postgres: a server started for the run)",
    )
    parser.add_argument(
        "--replicas", type=int, default=1, help="actuators sharing the store (postgres only)"
    )
    parser.add_argument(
        "--fresh-connections",
        action="store_true",
        help="open a connection per request (Alertmanager keeps its connections alive)",
    )
    parser.add_argument(
        "--intake-first",
        type=float,
        default=None,
        help="reconciler.intake_first, s (default: the shipped one; 0: the reconciler "
        "never waits for the deliveries, as before 2026-12-07)",
    )
    parser.add_argument(
        "--senders",
        choices=("loop", "threads"),
        default="loop",
        help="the senders on one event loop (aiohttp), or a Python thread each (as this "
        "benchmark sent before 2026-12-07: its acks include the senders' own turns at the "
        "interpreter)",
    )
    args = parser.parse_args()
    if args.replicas < 1 or (args.replicas > 1 and args.store != "postgres"):
        parser.error("--replicas: 1, or more with --store postgres (they share its database)")
    base = scratch_dir("gpu-reclaimer-storm-")
    base.chmod(0o755)
    alerts = args.nodes * args.per_node
    print(
        f"# alert storm: {args.nodes} nodes x {args.per_node} alerts = {alerts:,}, "
        f"{args.per_request} per request, {args.concurrency} in flight on "
        f"{'a new connection each' if args.fresh_connections else 'kept-alive connections'}; "
        "machine "
        f"{platform.machine()}, {os.cpu_count()} CPUs, "
        f"{psutil.virtual_memory().total / 1024**3:.0f} GiB, Python {platform.python_version()}",
        flush=True,
    )
    # Whatever is started is stopped, however the run ends, before its work directory goes
    # (atexit runs last in, first out).
    cleanup = ExitStack()
    atexit.register(cleanup.close)
    if args.store == "postgres":
        from actuator.demo.postgres import postgres_server

        print("  a PostgreSQL server ...", flush=True)
        server = cleanup.enter_context(postgres_server(base / "postgres"))
        database = server.new_database()
        server_cpu0 = server_cpu(server.data)
    else:
        database = str(base / "actuator.db")
    print(f"# store: {args.store}, {args.replicas} replica(s)", flush=True)
    fleet = start_fleet(base, args.nodes, args.per_node, args.agents)
    cleanup.callback(stop, [*fleet.agents, *fleet.sleepers])
    works = [base / f"actuator-{i}" for i in range(args.replicas)]
    ports = [free_port() for _ in works]
    replicas: list[subprocess.Popen[bytes]] = []
    cleanup.callback(lambda: stop(replicas, group=True))  # those running at the end
    for work, port in zip(works, ports, strict=True):
        work.mkdir()
        replicas.append(
            start_actuator(
                base, work, database, args.parallel, port=port, intake_first=args.intake_first
            )[0]
        )
    agents_cpu0 = sum(cpu(psutil.Process(a.pid)) for a in fleet.agents)
    bodies = requests_for(fleet.targets, args.per_request)
    todo: queue.Queue[bytes | None] = queue.Queue()
    for body in bodies:
        todo.put(body)
    poster_type = LoopPoster if args.senders == "loop" else Poster
    poster = poster_type(ports, fresh=args.fresh_connections)

    restart_when = int(args.restart_at * len(bodies)) if args.restart_at > 0 else None
    actuator_cpu = 0.0
    restarted_after: int | None = None
    restart_taken = threading.Lock()  # taken, never given back, by the one poster that restarts
    failed: list[BaseException] = []  # a restart that failed fails the run

    restart_times: list[float] = []  # the kill, then the new actuator ready

    def restart_actuator() -> None:
        """Kill the actuator (with replicas: the lease's holder) and start it again, from
        the poster whose answer reached the mark while the others go on posting (what is
        in flight is cut and retried, as Alertmanager retries)."""
        nonlocal actuator_cpu, restarted_after
        holder = leader(database, replicas)
        index = 0 if holder is None else holder
        killed = replicas[index]
        actuator_cpu += cpu(psutil.Process(killed.pid))
        os.killpg(killed.pid, signal.SIGKILL)
        killed.wait()
        restart_times.append(time.monotonic())
        restarted_after = poster.acked
        which = f"replica {index} (the leader)"
        if len(replicas) == 1:
            which = "the actuator"
        elif holder is None:
            which = f"replica {index} (which one held the lease could not be told)"
        print(
            f"  killed {which} after {restarted_after:,} acknowledged; starting it again ...",
            flush=True,
        )
        replicas[index], _ = start_actuator(
            base,
            works[index],
            database,
            args.parallel,
            port=ports[index],
            intake_first=args.intake_first,
        )
        restart_times.append(time.monotonic())  # the new one answers from here

    def worker() -> None:
        while (body := todo.get()) is not None:
            poster.post(body)
            # checked after every answer, so even a run whose requests were all in flight
            # at the mark restarts (then while its cases are being decided)
            if (
                restart_when is not None
                and poster.acked >= restart_when
                and restart_taken.acquire(blocking=False)
            ):
                try:
                    restart_actuator()
                except BaseException as exc:
                    failed.append(exc)

    async def after_ack() -> None:
        """The loop's senders: the one whose answer reaches the mark restarts the actuator
        in a thread, while the others go on posting."""
        if (
            restart_when is not None
            and poster.acked >= restart_when
            and restart_taken.acquire(blocking=False)
        ):
            try:
                await asyncio.get_running_loop().run_in_executor(None, restart_actuator)
            except BaseException as exc:
                failed.append(exc)

    try:
        print(f"  posting {len(bodies):,} requests ({args.senders}) ...", flush=True)
        first = time.time()
        busy0 = machine_busy()
        if isinstance(poster, LoopPoster):
            run_on_a_loop(poster.run(bodies, args.concurrency, after_ack))
        else:
            threads = [
                threading.Thread(target=worker, daemon=True) for _ in range(args.concurrency)
            ]
            for thread in threads:
                todo.put(None)
                thread.start()
            for thread in threads:
                thread.join()
        if failed:
            raise RuntimeError("the restart failed") from failed[0]
        posted = time.time() - first
        print(f"  posted in {posted:.0f} s ({poster.retries} retries); deciding ...", flush=True)
        deadline = time.monotonic() + args.deadline
        while True:
            states = counts(database)
            if states and sum(states.values()) >= alerts and not states.get("pending"):
                break
            if time.monotonic() > deadline:
                print(f"  gave up after {args.deadline:g} s: {states}", flush=True)
                break
            time.sleep(1)
        actuator_cpu += sum(cpu(psutil.Process(r.pid)) for r in replicas)
        agents_cpu = sum(cpu(psutil.Process(a.pid)) for a in fleet.agents) - agents_cpu0
        busy1 = machine_busy()
        database_cpu = (
            server_cpu(server.data) - server_cpu0 if args.store == "postgres" else float("nan")
        )
        calls = agent_calls(base, fleet.agents)
        rows = query(database, CASES)
    finally:
        cleanup.close()
    keys = [(r[0], r[1]) for r in rows]
    wanted = {(t["node"], t["pid"]) for t in fleet.targets}
    decided = [r for r in rows if r[2] not in ("pending",)]
    took = [r[5] - r[4] for r in decided if r[4] is not None]
    by_state: dict[str, int] = {}
    for r in rows:
        by_state[f"{r[2]} ({r[3] or 'no reason code'})"] = (
            by_state.get(f"{r[2]} ({r[3] or 'no reason code'})", 0) + 1
        )
    storm = max(r[5] for r in decided) - first if decided else float("nan")
    print()
    print(
        f"machine: {platform.machine()}, {os.cpu_count()} CPUs; agents: {args.nodes} agent apps in "
        f"{args.agents} stand-in processes (one per node on a real host); store: {args.store}, "
        f"{args.replicas} actuator replica(s)"
    )
    print(
        "| alerts | requests (per request) | in flight | ack p50 / p99 | retries | restart "
        "| cases (lost, doubled) | decided | alert acknowledged -> decided p50 / p99 / max "
        "| first request -> last decision | actuator CPU per case | agents CPU per case |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    ack50, ack99 = 1000 * percentile(poster.acks, 0.5), 1000 * percentile(poster.acks, 0.99)
    restart = f"after {restarted_after:,}" if restarted_after else "none"
    per_case = 1000 / max(1, len(rows))
    print(
        f"| {alerts:,} | {len(bodies):,} ({args.per_request}) | {args.concurrency} "
        f"| {ack50:.0f} / {ack99:.0f} ms | {poster.retries} | {restart} "
        f"| {len(rows):,} ({len(wanted - set(keys))}, {len(keys) - len(set(keys))}) "
        f"| {len(decided):,} | {percentile(took, 0.5):.0f} / {percentile(took, 0.99):.0f} / "
        f"{max(took, default=float('nan')):.0f} s | {storm:.0f} s "
        f"| {actuator_cpu * per_case:.1f} ms | {agents_cpu * per_case:.1f} ms |"
    )
    print("states: " + ", ".join(f"{k}: {v:,}" for k, v in sorted(by_state.items())))
    print(
        "agent requests per case: "
        + ", ".join(f"{k} {v * per_case / 1000:.2f}" for k, v in sorted(calls.items()))
    )
    busy = (busy1[0] - busy0[0]) / max(1e-9, busy1[1] - busy0[1])
    server_share = (
        f"; the PostgreSQL server {database_cpu * per_case:.1f} ms CPU per case"
        if args.store == "postgres"
        else ""
    )
    print(
        f"the machine's CPUs from the first request to the end: {100 * busy:.0f} % busy"
        f"{server_share}"
    )
    if len(restart_times) == 2:
        killed_at, ready_at = restart_times
        timed = list(zip(poster.acks, poster.acked_at, strict=True))
        phases = {
            "before the kill": [a for a, t in timed if t < killed_at],
            "the first 30 s after the restart": [
                a for a, t in timed if killed_at <= t < ready_at + 30
            ],
            "later": [a for a, t in timed if t >= ready_at + 30],
        }
        print(
            "ack p50 / p99 by phase: "
            + "; ".join(
                f"{name} {1000 * percentile(acks, 0.5):.0f} / {1000 * percentile(acks, 0.99):.0f}"
                f" ms ({len(acks):,})"
                for name, acks in phases.items()
                if acks
            )
        )
    in50, in99 = 1000 * percentile(poster.inside, 0.5), 1000 * percentile(poster.inside, 0.99)
    print(
        f"the handler's own time (its took_ms) p50 / p99: {in50:.0f} / {in99:.0f} ms; the "
        "rest of an acknowledgement is the wait for a thread and the way in and out"
    )
    median = 1000 * statistics.median(poster.acks)
    print(f"ack median {median:.1f} ms over {len(poster.acks):,} answers")
    return 0 if not (wanted - set(keys)) and len(keys) == len(set(keys)) else 1


if __name__ == "__main__":
    sys.exit(main())
