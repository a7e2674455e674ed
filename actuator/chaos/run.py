"""One chaos run: the stack on loopback (simulated node, exporter, Prometheus with the
shipped rules, Alertmanager with the reference routes, the actuator in enforce mode with
notices required), the plan's workloads and faults on schedule, the ground truth recorded
beside them, every component's descriptors, threads and memory sampled, and the actuator's
health probed each second; at the end the audit log is judged (actuator/chaos/oracle.py)."""

from __future__ import annotations

import contextlib
import os
import re
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
import requests

from actuator.chaos.faults import Injector
from actuator.chaos.oracle import (
    Acknowledged,
    Spawned,
    Told,
    Usage,
    Verdict,
    Violation,
    judge,
    leaks,
    unrecorded,
)
from actuator.chaos.plan import Plan, WorkloadPlan, make_plan
from actuator.chaos.truth import TruthRecorder
from actuator.chaos.volume import SmallVolume, small_volume
from actuator.demo.accounts import day_accounts
from actuator.demo.postgres import PgServer, PostgresError, pg_bin, postgres_server
from actuator.demo.stack import REPLICA, Stack, StackOptions

SCALE = 1 / 15  # the rules' windows and `for:`, as the demo runs them
GRACE = 10.0
WINDOW = 300 * SCALE  # `for: 5m`: the ground-truth idleness every signal needs at least
MISS_AFTER = WINDOW + 60 * SCALE + GRACE + 30.0  # idle this long and never reclaimed: missed
# The caller's chat id in the stack's owner directory (actuator/demo/stack.py): jobs that
# run as whoever runs the chaos are theirs; the day's accounts are reached by their name.
CALLER_CHAT_ID = "demo-owner"
UNSERVED_LIMIT = 20.0  # seconds the actuator may not answer its health probe (not restarting)


@dataclass(frozen=True)
class ChaosOptions:
    minutes: float
    seed: int
    workdir: Path | None = None
    arrival: float = 2.0  # seconds between workload starts, on average
    fault_every: float = 12.0  # seconds between faults, on average
    create_users: bool = False  # root: run jobs as the day's accounts, creating them
    # At most this many of the run's workloads alive at once: a start due while as many
    # live is skipped (counted), so a long run under faults does not pile up without bound
    # (a pile-up measures the machine's load, not the actuator).
    max_live: int = 40
    # The actuator's store: "postgres" (a server of the run's own, restarted as a fault)
    # or "sqlite"; "auto" is PostgreSQL where its binaries are installed.
    store: str = "auto"
    # Actuator replicas on the store: 0 is two on PostgreSQL (the deployed shape: the kills
    # take the lease holder and the other in turn), one on SQLite.
    replicas: int = 0
    # The node's hands in an agent (mutual TLS), as a central actuator has them; it hangs
    # and is killed as faults. False: the actuator acts on the node in-process.
    agent: bool = True
    # Simulated nodes, each with its exporter and agent (two need the agent).
    nodes: int = 2


@dataclass
class Outcome:
    plan: Plan
    verdict: Verdict
    skipped: int  # workload starts skipped at the live cap
    faults: dict[str, int]
    fault_log: list[dict[str, Any]]
    records: list[dict[str, Any]]
    usage: dict[str, list[Usage]]
    cases: dict[str, int]
    run_dir: Path
    started: float
    ended: float


@dataclass(frozen=True)
class Backing:
    """What the actuator keeps its records on, where the run can fail it."""

    audit_volume: SmallVolume | None  # the audit log's own volume (root only)
    postgres: PgServer | None  # the store's server (None: SQLite)
    database: str | None  # the store's DSN (None: the stack's SQLite file)


def _policy(backing: Backing) -> dict[str, Any]:
    policy: dict[str, Any] = {
        "notice": {"required": True},  # no signal without a delivered notice
        # min_runtime 0: the hour's workloads start idle on purpose
        "defaults": {"grace": f"{GRACE:g}s", "term_timeout": "4s", "min_runtime": "0s"},
    }
    storage: dict[str, str] = {}
    if backing.audit_volume is not None:  # the audit log on a volume the run can fill
        storage["audit_log"] = str(backing.audit_volume.path / "audit.jsonl")
    if backing.database is not None:
        storage["database"] = backing.database
    if storage:
        policy["storage"] = storage
    return policy


def _wants_postgres(store: str) -> bool:
    if store == "auto":
        try:
            pg_bin("pg_ctl")
        except PostgresError:
            return False
        return True
    return store == "postgres"


@contextlib.contextmanager
def _postgres(options: ChaosOptions) -> Iterator[PgServer | None]:
    if not _wants_postgres(options.store):
        yield None
        return
    import tempfile

    # Outside the run directory: the server runs as the postgres account.
    with (
        tempfile.TemporaryDirectory(prefix="gpu-reclaimer-chaos-pg-", dir=options.workdir) as d,
        postgres_server(Path(d) / "postgres") as server,
    ):
        yield server


def _spawn(stack: Stack, w: WorkloadPlan, user: str | None) -> Any:
    return stack.spawn(
        w.label,
        phases=w.phases,
        gpu=w.gpu,
        memory="3GiB",
        name=w.name or None,
        heartbeat=w.heartbeat,
        ignore_sigterm=w.ignore_sigterm,
        cpu=w.cpu,
        children=w.children,
        log=w.log,
        wait=False,
        user=user,
        node=w.node,
    )


class _Sampler:
    """Every component's process tree each `every` seconds, and the actuator's health."""

    def __init__(self, stack: Stack, injector: Injector, every: float = 2.0) -> None:
        self.stack, self.injector, self.every = stack, injector, every
        self.usage: dict[str, list[Usage]] = defaultdict(list)
        # replica -> times its health probe got no answer
        self.unserved: dict[str, list[float]] = defaultdict(list)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="sampler", daemon=True)

    def start(self) -> _Sampler:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def _run(self) -> None:
        next_usage = 0.0
        replicas = [n for n in ("actuator", REPLICA) if n in self.stack.services]
        while not self._stop.wait(1.0):
            now = time.time()
            for name in replicas:
                if name in self.injector.restarting:
                    continue
                try:
                    requests.get(self.stack.url(name) + "/-/healthy", timeout=2)
                except requests.RequestException:
                    self.unserved[name].append(now)
            if now >= next_usage:
                next_usage = now + self.every
                for name, managed in self.stack.services.items():
                    if name not in self.injector.restarting:
                        with contextlib.suppress(psutil.Error, OSError):
                            self.usage[f"{name} (pid {managed.pid})"].append(_tree(managed.pid))

    def unserved_spans(self) -> list[tuple[str, float, float]]:
        spans: list[tuple[str, float, float]] = []
        for name, times in sorted(self.unserved.items()):
            mine: list[tuple[str, float, float]] = []
            for t in times:
                if mine and t - mine[-1][2] <= 2.5:
                    mine[-1] = (name, mine[-1][1], t)
                else:
                    mine.append((name, t, t))
            spans += mine
        return spans


def _tree(pid: int) -> Usage:
    root = psutil.Process(pid)
    procs = [root, *root.children(recursive=True)]
    fds = threads = rss = 0
    for p in procs:
        with contextlib.suppress(psutil.Error):
            fds += p.num_fds()
            threads += p.num_threads()
            rss += p.memory_info().rss
    return Usage(time.time(), fds, threads, rss)


def told(stack: Stack) -> list[Told]:
    """The notices the owners' channel (a WeCom-format robot the sink stands in for)
    received: the case each quotes, whom it mentions, the PID it names."""
    found = []
    for post in stack.sink.posts("/notice"):
        content = ((post.body or {}).get("markdown") or {}).get("content", "")
        case = re.search(r"(?:case|工单号) (\d+)", content)
        mention = re.search(r"<@([^>]+)>\s*$", content)
        pid = re.search(r"PID (\d+)", content)
        found.append(
            Told(
                post.at,
                int(case.group(1)) if case else -1,
                mention.group(1) if mention else "",
                int(pid.group(1)) if pid else None,
            )
        )
    return found


EPISODES = "SELECT fingerprint, first_seen, status, ends_ts, processed, case_id FROM episodes"


def acknowledged(stack: Stack) -> list[Acknowledged]:
    """The alert episodes in the actuator's store (read-only), as it acknowledged them."""
    database = str(stack.policy()["storage"]["database"])
    if database.startswith(("postgresql://", "postgres://")):
        import psycopg

        with psycopg.connect(database, connect_timeout=10) as pg:
            rows = pg.execute(EPISODES).fetchall()
    else:
        import sqlite3

        conn = sqlite3.connect(f"file:{database}?mode=ro", uri=True, timeout=10)
        try:
            rows = conn.execute(EPISODES).fetchall()
        finally:
            conn.close()
    return [Acknowledged(r[0], r[1], r[2], r[3], bool(r[4]), r[5]) for r in rows]


def read_audit(path: Path) -> list[dict[str, Any]]:
    """Every record of the audit log and its rotated files, oldest first."""
    import json

    files = sorted(path.parent.glob(path.name + ".*"), reverse=True)
    records = []
    for file in [*[f for f in files if f.suffix != ".lock"], path]:
        with contextlib.suppress(OSError):
            for line in file.read_text(encoding="utf-8").splitlines():
                with contextlib.suppress(ValueError):
                    records.append(json.loads(line))
    return records


def run(options: ChaosOptions, progress: Callable[[str], None] = lambda _: None) -> Outcome:
    with small_volume(options.workdir) as audit_volume, _postgres(options) as postgres:
        database = postgres.new_database() if postgres is not None else None
        return _run(options, Backing(audit_volume, postgres, database), progress)


def _run(options: ChaosOptions, backing: Backing, progress: Callable[[str], None]) -> Outcome:
    seconds = options.minutes * 60.0
    nodes = options.nodes if options.agent else 1
    plan = make_plan(
        options.seed,
        seconds,
        arrival=options.arrival,
        fault_every=options.fault_every,
        nodes=nodes,
    )
    accounts = day_accounts(create_missing=options.create_users)
    users = sorted(accounts.users)
    stack_options = StackOptions(
        workdir=options.workdir,
        label="chaos",
        grace=GRACE,
        term_timeout=4.0,
        policy=_policy(backing),
        replicas=options.replicas or (2 if backing.postgres is not None else 1),
        agent=options.agent,
        nodes=nodes,
        users=accounts.users,
    )
    progress(
        f"chaos: seed {plan.seed}, {options.minutes:g} min, {len(plan.workloads)} workloads, "
        f"{len(plan.faults)} faults, owners: {', '.join(users) or accounts.note}; "
        f"store: {'PostgreSQL' if backing.postgres else 'SQLite'}, "
        f"{options.replicas or (2 if backing.postgres else 1)} actuator replica(s)"
        f"{' acting through the agents of ' if options.agent else ' on '}{nodes} node(s); "
        "starting the stack"
    )
    with Stack(stack_options) as stack:
        stack.wait_scraped()
        recorder = TruthRecorder(
            {stack.node_name_of(i): stack.node_dir_of(i) for i in range(stack.options.nodes)}
        ).start()
        injector = Injector(stack, recorder, backing.audit_volume, backing.postgres)
        sampler = _Sampler(stack, injector).start()
        spawned: list[Spawned] = []
        skipped = 0
        schedule: list[tuple[float, Any]] = sorted(
            [(w.start_at, w) for w in plan.workloads] + [(f.at, f) for f in plan.faults],
            key=lambda item: item[0],
        )
        started = time.time()
        shown = 0.0
        for at, item in schedule:
            delay = started + at - time.time()
            if delay > 0:
                time.sleep(delay)
            if isinstance(item, WorkloadPlan):
                if sum(w.alive() for w in stack.workloads) >= options.max_live:
                    skipped += 1
                    continue
                user = users[item.owner % len(users)] if users else None
                workload = _spawn(stack, item, user)
                spawned.append(
                    Spawned(
                        item.label,
                        item.kind,
                        workload.pid,
                        workload.started,
                        owner=user or CALLER_CHAT_ID,
                    )
                )
            else:
                injector.inject(item)
            if time.time() - shown >= 30:
                shown = time.time()
                progress(
                    f"chaos: {shown - started:4.0f}s  {len(spawned)} workloads started, "
                    f"{sum(injector.counts.values())} faults"
                    + (f", {skipped} starts skipped at the cap" if skipped else "")
                )
        time.sleep(max(0.0, started + seconds - time.time()))
        ended = time.time()
        progress("chaos: the schedule is done; judging")
        injector.join()
        sampler.stop()
        recorder.stop()
        records = read_audit(Path(str(stack.policy()["storage"]["audit_log"])))
        verdict = judge(
            records,
            recorder.snapshot(),
            spawned,
            window=WINDOW,
            miss_after=MISS_AFTER,
            end=ended,
            told=told(stack),
        )
        verdict.violations += leaks(sampler.usage)
        verdict.violations += unrecorded(acknowledged(stack), records, end=ended)
        for name, a, b in sampler.unserved_spans():
            if b - a >= UNSERVED_LIMIT:
                verdict.violations.append(
                    Violation(
                        "stopped_serving", a, f"{name}: no answer to /-/healthy for {b - a:.0f}s"
                    )
                )
        cases: dict[str, int] = defaultdict(int)
        with contextlib.suppress(requests.RequestException, ValueError):
            for case in stack.actuator_api("/api/v1/cases", limit=1000).get("cases", []):
                cases[str(case.get("state"))] += 1
        return Outcome(
            plan=plan,
            verdict=verdict,
            skipped=skipped,
            faults=dict(injector.counts),
            fault_log=injector.log,
            records=records,
            usage=dict(sampler.usage),
            cases=dict(cases),
            run_dir=stack.run_dir,
            started=started,
            ended=ended,
        )


def machine() -> dict[str, Any]:
    return {"cpus": os.cpu_count(), "load_1m": round(os.getloadavg()[0], 2)}
