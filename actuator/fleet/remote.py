"""`RemoteNode`: the `Node` interface of another node, through its agent over mutual TLS.

Whatever goes wrong on the way (refused connection, timeout, a certificate that does not
verify, an answer from the wrong node or in the wrong shape) is `NodeUnreachable`: the case
waits and is then deferred or refused, never decided on a guess. The agent's timestamps are
rebased onto this actuator's clock with the clock reading in each answer, so nodes whose
clocks differ are judged alike (identity itself is boot id and start ticks, clock-free).
"""

from __future__ import annotations

import re
import signal
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from typing import Any, TypeVar
from urllib.parse import quote

import urllib3
from pydantic import ValidationError

from actuator.checkpoint import CheckpointResult
from actuator.endpoints import POOL_SIZE, EndpointError, exchange
from actuator.fleet import wire
from actuator.models import LiveState, Member, SignalResult, Target
from actuator.node import NodeUnreachable
from actuator.rehearsal import Rehearsal

SIGNAL_ATTEMPTS = 3
# A checkpoint copies the process's GPU memory to host memory (tens of GiB at PCIe speed), a
# lock waits up to its own timeout: the agent's answer comes after both.
CHECKPOINT_TIMEOUT = 180.0
MAX_ANSWER = 16 * 2**20  # an agent's answer: a process tree or a GPU's list, never near this
HEADERS = {"Content-Type": "application/json", "User-Agent": "gpu-reclaimer"}
# After an agent's 404 on a batched path, its calls go one at a time this long (s).
UNSERVED_RETRY = 600.0

Item = TypeVar("Item")
Answer = TypeVar("Answer")


class NotServed(NodeUnreachable):
    """The agent does not serve the path (HTTP 404): one older than this actuator."""


class ClientTls:
    """The actuator's side of mutual TLS: its client certificate, and the CA that signed
    the agents' certificates (nothing else is trusted, whatever the environment says)."""

    def __init__(self, ca_file: str, certfile: str, keyfile: str) -> None:
        self.ca_file, self.certfile, self.keyfile = ca_file, certfile, keyfile

    def pool(self) -> urllib3.PoolManager:
        """Connections to agents (no proxy, no REQUESTS_CA_BUNDLE: the environment is not
        read), through urllib3 as the chat robots' posts go (actuator/endpoints.py)."""
        return urllib3.PoolManager(
            maxsize=POOL_SIZE,
            cert_reqs="CERT_REQUIRED",
            ca_certs=self.ca_file,
            cert_file=self.certfile,
            key_file=self.keyfile,
        )


class RemoteNode:
    def __init__(
        self,
        name: str,
        url: str,
        tls: ClientTls,
        *,
        timeout: float = 5.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.name = name
        self.url = url.rstrip("/")
        self.timeout = timeout
        self.clock = clock
        self._pool = tls.pool()
        # After a failure, calls fail fast for a while: one silent host must not cost every
        # tick a timeout per case (the reconciler advances all nodes' cases in turn).
        self.backoff = min(30.0, 2 * timeout)
        self._down_until = float("-inf")
        self._down_why = ""
        # Paths an older agent said it does not serve (404), and until when (monotonic) the
        # calls they batch go one at a time: asked again after that, as an agent upgraded
        # meanwhile serves them.
        self._unserved: dict[str, float] = {}

    def _call(
        self,
        method: str,
        path: str,
        body: dict[str, Any] | None = None,
        *,
        timeout: float | None = None,
    ) -> dict[str, Any]:
        if time.monotonic() < self._down_until:
            raise NodeUnreachable(f"{self._down_why} (not retried for {self.backoff:g}s)")
        try:
            return self._answer(method, path, body, timeout or self.timeout)
        except NotServed:
            raise  # it answered: not down
        except NodeUnreachable as exc:
            self._down_until, self._down_why = time.monotonic() + self.backoff, str(exc)
            raise

    def _answer(
        self, method: str, path: str, body: dict[str, Any] | None, timeout: float
    ) -> dict[str, Any]:
        try:
            resp = exchange(
                self._pool,
                method,
                f"{self.url}{path}",
                body,
                headers=HEADERS,
                timeout=timeout,
                max_answer=MAX_ANSWER,
            )
        except EndpointError as exc:
            raise NodeUnreachable(f"agent {self.url}: {exc}"[:300]) from exc
        try:
            data = resp.json()
        except ValueError:
            data = None
        if not isinstance(data, dict):
            raise NodeUnreachable(f"agent {self.url}: HTTP {resp.status}, not JSON")
        if resp.status == 404:
            raise NotServed(f"agent {self.url}: HTTP 404: {str(data.get('error'))[:200]}")
        if resp.status != 200:
            raise NodeUnreachable(
                f"agent {self.url}: HTTP {resp.status}: {str(data.get('error'))[:200]}"
            )
        if data.get("node") != self.name:
            raise NodeUnreachable(
                f"agent {self.url} serves node {str(data.get('node'))[:80]!r}, not {self.name!r}"
            )
        now = data.get("now")
        if not isinstance(now, (int, float)) or isinstance(now, bool):
            raise NodeUnreachable(f"agent {self.url}: no clock reading in the answer")
        data["_offset"] = self.clock() - float(now)
        return data

    # -- evidence ------------------------------------------------------------------------

    def inspect(self, target: Target) -> LiveState:
        data = self._call("POST", "/v1/inspect", {"target": wire.dump_target(target)})
        try:
            live = wire.load_live(data.get("live"))
        except ValidationError as exc:
            raise NodeUnreachable(f"agent {self.url}: malformed live state: {exc}"[:300]) from exc
        return rebase(live, data["_offset"])

    def _batched(
        self,
        path: str,
        items: Sequence[Item],
        body: Callable[[list[Item]], dict[str, Any]],
        answers: Callable[[dict[str, Any], int], list[Answer]],
        alone: Callable[[Item], Answer],
    ) -> list[Answer]:
        """`items` asked `wire.MAX_INSPECT` a request at `path`, each chunk's `answers` read
        from its reply (ValueError or ValidationError: malformed, none of them used); an
        agent older than this actuator (404) is asked `alone` for each, for UNSERVED_RETRY
        seconds before the batch is tried again."""
        if time.monotonic() < self._unserved.get(path, float("-inf")):
            return [alone(item) for item in items]
        answered: list[Answer] = []
        for at in range(0, len(items), wire.MAX_INSPECT):
            chunk = list(items[at : at + wire.MAX_INSPECT])
            try:
                data = self._call("POST", path, body(chunk))
            except NotServed:
                self._unserved[path] = time.monotonic() + UNSERVED_RETRY
                return answered + [alone(item) for item in items[at:]]
            try:
                answered += answers(data, len(chunk))
            except (ValidationError, ValueError) as exc:
                raise NodeUnreachable(f"agent {self.url}: malformed answer: {exc}"[:300]) from exc
        return answered

    def inspect_many(self, targets: Sequence[Target]) -> list[LiveState]:
        """Up to `wire.MAX_INSPECT` re-checks a request; one by one from an older agent."""

        def lives(data: dict[str, Any], count: int) -> list[LiveState]:
            return [
                rebase(live, data["_offset"]) for live in wire.load_lives(data.get("lives"), count)
            ]

        return self._batched(
            "/v1/inspect-many",
            targets,
            lambda chunk: {"targets": [wire.dump_target(t) for t in chunk]},
            lives,
            self.inspect,
        )

    def rehearse_many(self, rehearsals: Sequence[Rehearsal]) -> list[list[SignalResult]]:
        """Up to `wire.MAX_INSPECT` rehearsed steps a request; one by one (dry-run signal
        steps) from an older agent."""
        return self._batched(
            "/v1/rehearse",
            rehearsals,
            lambda chunk: {"steps": [wire.dump_rehearsal(r) for r in chunk]},
            lambda data, count: wire.load_result_lists(data.get("results"), count),
            self._rehearse_alone,
        )

    def _rehearse_alone(self, rehearsal: Rehearsal) -> list[SignalResult]:
        sig = signal.Signals[rehearsal.signal]
        key = rehearsal.key or None
        return self.signal_tree(rehearsal.target, rehearsal.members, sig, dry_run=True, key=key)

    def alive(self, members: Iterable[Member]) -> list[Member]:
        data = self._call("POST", "/v1/alive", {"members": wire.dump_members(list(members))})
        try:
            return wire.load_members(data.get("members"))
        except ValidationError as exc:
            raise NodeUnreachable(f"agent {self.url}: malformed members: {exc}"[:300]) from exc

    def gpu_processes(self, uuid: str) -> dict[int, int] | None:
        try:
            data = self._call("GET", f"/v1/gpus/{quote(uuid, safe='')}/processes")
        except NodeUnreachable:
            return None  # unknown: the caller treats it as "cannot tell"
        listed = data.get("processes")
        if not isinstance(listed, dict):
            return None
        try:
            return {int(pid): int(mem) for pid, mem in listed.items()}
        except (TypeError, ValueError):
            return None

    def job_processes(self, job: str) -> list[Target] | None:
        data = self._call("GET", f"/v1/slurm/jobs/{quote(job, safe='')}/processes")
        listed = data.get("processes")
        if listed is None:
            return None
        try:
            return [wire.load_target(t) for t in listed]
        except (ValidationError, TypeError) as exc:
            raise NodeUnreachable(
                f"agent {self.url}: malformed job processes: {exc}"[:300]
            ) from exc

    def monitored_count(self) -> int | None:
        try:
            count = self._call("GET", "/v1/monitored").get("count")
        except NodeUnreachable:
            return None  # unknown never trips the breaker
        return count if isinstance(count, int) and not isinstance(count, bool) else None

    # -- signals -------------------------------------------------------------------------

    def signal_tree(
        self,
        target: Target,
        members: Iterable[Member],
        sig: signal.Signals,
        *,
        dry_run: bool,
        key: str | None = None,
    ) -> list[SignalResult]:
        """One escalation step, retried with the same key: the agent carries it out once."""
        members = list(members)
        body = {
            "key": key or f"adhoc-{uuid.uuid4().hex}",
            "target": wire.dump_target(target),
            "members": wire.dump_members(members),
            "signal": sig.name,
            "dry_run": dry_run,
        }
        problem = ""
        for attempt in range(SIGNAL_ATTEMPTS):
            if attempt:
                self._down_until = float("-inf")  # a step is retried, not backed off
            try:
                data = self._call("POST", "/v1/signal", body)
                return wire.load_results(data.get("results"))
            except (NodeUnreachable, ValidationError) as exc:
                problem = str(exc)
                time.sleep(0.2 * (attempt + 1))
        return [SignalResult(m.pid, sig.name, False, f"not sent: {problem}") for m in members]

    def suspend(
        self, target: Target, lock_timeout: float, *, key: str | None = None
    ) -> CheckpointResult:
        return self._checkpoint("suspend", target, lock_timeout, key)

    def resume(
        self,
        target: Target,
        *,
        need: int | None = None,
        avoid: tuple[str, ...] = (),
        key: str | None = None,
    ) -> CheckpointResult:
        return self._checkpoint("resume", target, 10.0, key, need, avoid)

    def _checkpoint(
        self,
        call: str,
        target: Target,
        lock_timeout: float,
        key: str | None,
        need: int | None = None,
        avoid: tuple[str, ...] = (),
    ) -> CheckpointResult:
        """One checkpoint call, given the time the copy takes (a lost answer: the next
        re-check reads the state, and a retry under the key changes nothing)."""
        body = {
            "key": key or f"adhoc-{uuid.uuid4().hex}",
            "target": wire.dump_target(target),
            "call": call,
            "lock_timeout": lock_timeout,
            "need_bytes": need,
            "avoid": list(avoid),
        }
        self._down_until = float("-inf")  # a step is asked, not backed off
        try:
            data = self._call("POST", "/v1/checkpoint", body, timeout=CHECKPOINT_TIMEOUT)
        except NodeUnreachable as exc:
            return CheckpointResult(False, "", f"not confirmed: {exc}"[:300])
        return CheckpointResult(
            data.get("ok") is True,
            str(data.get("state") or "")[:20],
            str(data.get("detail"))[:300],
            no_room=data.get("no_room") is True,
            onto=gpu_uuid(data.get("onto")),
        )

    def wait_exit(self, timeout: float) -> None:
        """Exits on another node are seen by polling (the next tick), not waited for here."""


def gpu_uuid(value: object) -> str:
    """The GPU an agent says a restore moved a process to: a UUID of NVML's alphabet, else
    nothing (the case keeps reading its own GPU, and the next re-check judges)."""
    text = value if isinstance(value, str) else ""
    return text if re.fullmatch(r"GPU-[0-9A-Fa-f-]{1,76}", text) else ""


def rebase(live: LiveState, offset: float) -> LiveState:
    """The node's wall-clock readings on this actuator's clock."""

    def shift(ts: float | None) -> float | None:
        return None if ts is None else ts + offset

    return replace(
        live,
        sampled_at=live.sampled_at + offset,
        log_mtime=shift(live.log_mtime),
        heartbeat=shift(live.heartbeat),
        network_activity=shift(live.network_activity),
        start_time=shift(live.start_time),
        clock_offset=offset,
    )
