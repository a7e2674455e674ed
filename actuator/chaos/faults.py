"""The faults a chaos run injects, each through the interface a real fault would use: a
SIGKILL to a component's whole process group and a restart, the simulated NVML's fault
switches, raw sockets for slow and hostile clients, forged and replayed alerts on the
actuator's own API with its real token, the notice channel answering 503, the audit log's
volume filled to ENOSPC and freed, and the store's PostgreSQL crashed and started again."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import signal
import socket
import threading
import time
import uuid
from collections import Counter
from datetime import UTC, datetime
from typing import Any

import psutil
import requests

from actuator.chaos.plan import FaultPlan
from actuator.chaos.truth import Truth
from actuator.chaos.volume import SmallVolume
from actuator.demo.postgres import PgServer
from actuator.demo.stack import AGENT, REPLICA, Stack, per_node
from exporter import procfs
from exporter.sim.state import load_node

SERVICE_OF = {
    "kill_exporter": "exporter",
    "kill_actuator": "actuator",
    "kill_prometheus": "prometheus",
    "kill_alertmanager": "alertmanager",
    "kill_agent": "agent",
}
NVML_CALL = "nvmlDeviceGetComputeRunningProcesses"


class Injector:
    def __init__(
        self,
        stack: Stack,
        truth: Any,
        audit_volume: SmallVolume | None = None,
        postgres: PgServer | None = None,
    ) -> None:
        self.stack = stack
        self.truth = truth  # the TruthRecorder (snapshot() -> Truth)
        self.audit_volume = audit_volume  # the audit log's own volume, where one is mounted
        self.postgres = postgres  # the store's server, where the actuator uses PostgreSQL
        self.counts: Counter[str] = Counter()
        self.log: list[dict[str, Any]] = []  # every fault with its time
        self.restarting: set[str] = set()  # services being restarted (not sampled meanwhile)
        self._threads: list[threading.Thread] = []

    def inject(self, fault: FaultPlan) -> None:
        if fault.kind == "audit_full" and self.audit_volume is None:
            self.counts["audit_full_skipped"] += 1  # no volume of its own to fill (not root)
            return
        if fault.kind == "restart_postgres" and self.postgres is None:
            self.counts["restart_postgres_skipped"] += 1  # the store is SQLite
            return
        if fault.kind in ("kill_agent", "agent_hang") and AGENT not in self.stack.services:
            self.counts[f"{fault.kind}_skipped"] += 1  # the actuator acts in-process
            return
        self.counts[fault.kind] += 1
        entry: dict[str, Any] = {"at": time.time(), "kind": fault.kind, "seconds": fault.seconds}
        self.log.append(entry)
        action = getattr(self, f"_{fault.kind}", None)
        if fault.kind in SERVICE_OF:
            action = self._kill_and_restart
            # With two replicas the kills take the leader and the follower in turn.
            service = SERVICE_OF[fault.kind]
            if service == "actuator" and REPLICA in self.stack.services:
                service = self._replica(leader=self.counts[fault.kind] % 2 == 1)
            elif service in ("exporter", AGENT):  # the node's own
                service = per_node(service, fault.node)
            entry["service"] = service
            fault = dataclasses.replace(fault, service=service)
        assert action is not None, fault.kind
        thread = threading.Thread(target=action, args=(fault,), name=fault.kind, daemon=True)
        thread.start()
        self._threads.append(thread)

    def join(self, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))

    # -- components -----------------------------------------------------------------------

    def _replica(self, *, leader: bool) -> str:
        """The replica holding the store's lease (or the other one); the first replica when
        the lease cannot be read."""
        holder_pid = _lease_holder_pid(str(self.stack.policy()["storage"]["database"]))
        holding = "actuator"
        for name in ("actuator", REPLICA):
            managed = self.stack.services[name]
            with contextlib.suppress(psutil.Error):
                tree = [managed.pid, *(c.pid for c in psutil.Process(managed.pid).children(True))]
                if holder_pid in tree:
                    holding = name
        other = REPLICA if holding == "actuator" else "actuator"
        return holding if leader else other

    def _kill_and_restart(self, fault: FaultPlan) -> None:
        name = fault.service or SERVICE_OF[fault.kind]
        if name in self.restarting:
            return  # already down: one restart at a time
        self.restarting.add(name)
        try:
            self.stack.kill_service(name)
            time.sleep(1.0)
            self.stack.restart_service(name)
        finally:
            self.restarting.discard(name)

    # -- NVML ------------------------------------------------------------------------------

    def _for_a_while(self, fault: FaultPlan, on: list[str], off: list[str]) -> None:
        self.stack.fault(*on, node=fault.node)
        time.sleep(fault.seconds)
        self.stack.fault(*off, node=fault.node)

    def _nvml_hang(self, fault: FaultPlan) -> None:
        self._for_a_while(fault, ["--hang", NVML_CALL, "--hang-seconds", "3"], ["--hang", ""])

    def _nvml_error(self, fault: FaultPlan) -> None:
        self._for_a_while(fault, ["--nvml-missing", "on"], ["--nvml-missing", "off"])

    def _nvml_no_process_util(self, fault: FaultPlan) -> None:
        self._for_a_while(fault, ["--no-process-util", str(fault.gpu)], ["--clear"])

    def _gpu_lost(self, fault: FaultPlan) -> None:
        g = str(fault.gpu)
        self._for_a_while(fault, ["--lose-gpu", g], ["--restore-gpu", g])

    # -- clients ---------------------------------------------------------------------------

    def _address(self) -> tuple[str, int]:
        return "127.0.0.1", self.stack.ports["actuator"]

    def _slow_clients(self, fault: FaultPlan) -> None:
        """Clients that send half a request and wait: the actuator must keep serving."""
        held = []
        try:
            for _ in range(16):
                with contextlib.suppress(OSError):
                    sock = socket.create_connection(self._address(), timeout=2)
                    sock.sendall(b"POST /api/v1/alerts HTTP/1.1\r\nHost: x\r\nContent-Length: 9")
                    held.append(sock)
            time.sleep(fault.seconds)
        finally:
            for sock in held:
                sock.close()

    def _hostile_requests(self, fault: FaultPlan) -> None:
        """Garbage, huge headers, poison JSON and a wrong token: each must be refused."""
        url = self.stack.url("actuator") + "/api/v1/alerts"
        token = {"Authorization": f"Bearer {self.stack.token}"}
        poison = {
            "alerts": [
                {
                    "status": "firing",
                    "labels": {"alertname": "GpuProcessIdle", "pid": "1e309", "node": "\u202e"},
                    "startsAt": "NaN",
                }
            ]
        }
        bodies: list[tuple[dict[str, str], bytes]] = [
            (token, b"\x00\xff{not json"),
            (token, json.dumps(poison).encode()),
            ({"Authorization": "Bearer wrong"}, b"{}"),
            ({**token, "X-Huge": "x" * 60000}, b"{}"),
        ]
        deadline = time.monotonic() + max(fault.seconds, 1.0)
        while time.monotonic() < deadline:
            for headers, body in bodies:
                with contextlib.suppress(requests.RequestException):
                    requests.post(url, data=body, headers=headers, timeout=3)
            with (
                contextlib.suppress(OSError),
                socket.create_connection(self._address(), timeout=2) as sock,
            ):
                sock.sendall(b"\x16\x03\x01garbage that is no HTTP at all\r\n\r\n")

    # -- alerts ----------------------------------------------------------------------------

    def _post_alert(self, labels: dict[str, str], start_time: float) -> None:
        alert = {
            "status": "firing",
            "labels": {
                "alertname": "GpuProcessIdle",
                "reclaim": "true",
                "severity": "warning",
                "boot_id": procfs.boot_id(),
                **labels,
            },
            "annotations": {"start_time": repr(start_time)},
            "startsAt": datetime.now(UTC).isoformat(),
            "endsAt": "0001-01-01T00:00:00Z",
            "generatorURL": "http://chaos/forged",
            "fingerprint": uuid.uuid4().hex[:16],
        }
        body = {"version": "4", "status": "firing", "receiver": "reclaim", "alerts": [alert]}
        with contextlib.suppress(requests.RequestException):
            self.stack.session.post(
                self.stack.url("actuator") + "/api/v1/alerts", json=body, timeout=5
            )

    def _target(
        self, truth: Truth, *, alive: bool, other_node: bool = False
    ) -> dict[str, str] | None:
        """Labels naming one of the run's processes (on its own node, or as if it ran on
        the other one: the same PID, start ticks and GPU index there)."""
        now = time.time()
        lines = [
            line
            for line in truth.timelines.values()
            if line.parent is None and (now - line.last_seen < 1.0) == alive
        ]
        if not lines:
            return None
        line = lines[len(lines) // 2]
        nodes = self.stack.options.nodes
        index = next((i for i in range(nodes) if self.stack.node_name_of(i) == line.node), 0)
        if other_node and nodes > 1:
            index = (index + 1) % nodes
        uuid_ = load_node(self.stack.node_dir_of(index)).gpus[line.gpu].uuid
        return {
            "node": self.stack.node_name_of(index),
            "pid": str(line.pid),
            "uuid": uuid_,
            "start_ticks": str(line.ticks),
        }

    def _forged_alert(self, fault: FaultPlan) -> None:
        """An alert, with the real token, naming a live process whatever it is doing: the
        live re-check must judge it by what the node shows, never by the alert. With two
        nodes, every other one names the process as the other node's (same PID, start
        ticks, GPU index): that node's agent must find it is not its own."""
        other = self.counts[fault.kind] % 2 == 0
        labels = self._target(self.truth.snapshot(), alive=True, other_node=other)
        if labels is not None:
            self._post_alert({**labels, "command": "forged", "user": "someone-else"}, 0.0)

    def _replayed_alert(self, fault: FaultPlan) -> None:
        """An alert for a process that has gone (reclaimed or exited): nothing to act on."""
        labels = self._target(self.truth.snapshot(), alive=False)
        if labels is not None:
            self._post_alert(labels, 0.0)

    # -- the notice channel -----------------------------------------------------------------

    def _notice_channel_down(self, fault: FaultPlan) -> None:
        self.stack.sink.failing.add("/notice")
        time.sleep(fault.seconds)
        self.stack.sink.failing.discard("/notice")

    # -- the agent ---------------------------------------------------------------------------

    def _agent_hang(self, fault: FaultPlan) -> None:
        """The node's agent stops answering (SIGSTOP: its connections stay open, nothing
        comes back), then goes on: a case must wait, never act on a guess."""
        agent = per_node(AGENT, fault.node)
        pid = self.stack.services[agent].pid
        self.restarting.add(agent)  # not sampled while stopped
        try:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGSTOP)
            time.sleep(fault.seconds)
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGCONT)
            self.restarting.discard(agent)

    # -- the store --------------------------------------------------------------------------

    def _restart_postgres(self, fault: FaultPlan) -> None:
        """PostgreSQL stopped like a crash (every connection dropped, no checkpoint) and
        started again: the actuator must neither act on what it could not record nor lose
        what it had recorded."""
        assert self.postgres is not None
        self.postgres.stop()
        time.sleep(fault.seconds)
        self.postgres.start()

    # -- the audit volume -------------------------------------------------------------------

    def _audit_full(self, fault: FaultPlan) -> None:
        """The audit log's volume full (ENOSPC), then freed: nothing may be done that its
        record could not be written for, and every decision must still be recorded."""
        assert self.audit_volume is not None
        self.audit_volume.fill()
        try:
            time.sleep(fault.seconds)
        finally:
            self.audit_volume.free()


def _lease_holder_pid(database: str) -> int | None:
    """The PID in the reconciler lease's holder ("host:pid:nonce"), from PostgreSQL."""
    if not database.startswith(("postgresql://", "postgres://")):
        return None
    import psycopg

    try:
        with psycopg.connect(database, connect_timeout=3) as conn:
            row = conn.execute("SELECT holder FROM lease WHERE name = 'reconciler'").fetchone()
    except psycopg.Error:
        return None
    parts = str(row[0]).split(":") if row else []
    return int(parts[1]) if len(parts) >= 2 and parts[1].isdigit() else None
