"""The same view of Slurm through slurmrestd (REST, JWT), where a site runs it.

The interface of `SlurmCli` (job, cancel, gpus_allocated, and the queue demand reads:
pending_jobs, free_gpus), over HTTP: `GET /slurm/vX/job/ID`, `DELETE /slurm/vX/job/ID` (the
scheduler's cancel; `?signal=KILL` for the forced step), `GET /slurm/vX/node/NAME`
(`gres_used`), `GET /slurm/vX/jobs`, `GET /slurm/vX/nodes`, `GET /slurm/vX/partition/NAME`.
The token is read from a file on every request, so `scontrol token` run by cron can rotate
it.

Requests go through `actuator.endpoints` (the environment's proxy and CA bundle, no redirect
followed, the answer bounded). An answer of the wrong shape (not an object, a list of
something else, a count that is not a whole number) is a SlurmError, never taken for "no
job": the caller treats it as the scheduler not answering.
"""

from __future__ import annotations

import time
import urllib.parse
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

import hostlist

from actuator.endpoints import Endpoint, EndpointError
from actuator.schedulers.slurm_cli import (
    _GPUS_USED,
    JOB_ID,
    JobCache,
    PendingJob,
    SlurmError,
    SlurmJob,
    gpus_per_node,
    gres_counts,
    node_usable,
    partition_nodes,
)

# The whole queue and node list come in one answer: a large cluster's is tens of MiB.
MAX_ANSWER = 256 * 1024 * 1024


def _objects(body: dict[str, Any], key: str, what: str) -> list[dict[str, Any]]:
    """`body[key]` as a list of objects (absent or null: none); anything else is nonsense."""
    found = body.get(key)
    if found is None:
        return []
    if not isinstance(found, list) or not all(isinstance(item, dict) for item in found):
        raise SlurmError(f"slurmrestd {what}: `{key}` is not a list of objects")
    return found


def _text(item: dict[str, Any], key: str) -> str:
    value = item.get(key)
    return value if isinstance(value, str) else ""


def _whole(item: dict[str, Any], key: str, what: str) -> int:
    value = item.get(key)
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise SlurmError(f"slurmrestd {what}: `{key}` is not a whole number: {value!r:.40}")
    return value


def _reason(job: dict[str, Any]) -> str:
    """Why a job waits, as scontrol prints it: the scheduler's description where it wrote
    one ("Nodes required for job are DOWN, DRAINED or reserved ..." with the code
    Resources), else the reason code. A job with a description is not counted as waiting
    for GPUs a reclaim would free, through either transport."""
    described = _text(job, "state_description").strip()
    return described.replace(" ", "_") if described else _text(job, "state_reason")


def _states(item: dict[str, Any], key: str) -> tuple[str, ...]:
    """A state as v0.0.38 gives it (a string) or as later versions do (a list of them)."""
    value = item.get(key)
    if isinstance(value, str):
        return (value.upper(),)
    if isinstance(value, list):
        return tuple(v.upper() for v in value if isinstance(v, str))
    return ()


class SlurmRest:
    def __init__(
        self,
        url: str,
        user: str,
        token_file: str,
        *,
        api_version: str = "v0.0.38",
        timeout: float = 10.0,
        cache_ttl: float = 5.0,
        clock: Callable[[], float] = time.monotonic,
        max_answer: int = MAX_ANSWER,
    ) -> None:
        self.base = f"{url.rstrip('/')}/slurm/{api_version}"
        self.max_answer = max_answer
        self.user, self.token_file, self.timeout = user, Path(token_file), timeout
        self._jobs = JobCache(cache_ttl, clock)
        self._endpoint = Endpoint(self.base)

    def _request(self, method: str, path: str, **params: str) -> tuple[int, dict[str, Any]]:
        try:
            token = self.token_file.read_text().strip()
        except OSError as exc:
            raise SlurmError(f"slurmrestd token: {exc}") from None
        headers = {"X-SLURM-USER-NAME": self.user, "X-SLURM-USER-TOKEN": token}
        url = self.base + path + (f"?{urllib.parse.urlencode(params)}" if params else "")
        try:
            answer = self._endpoint.request(
                method, url, headers=headers, timeout=self.timeout, max_answer=self.max_answer
            )
        except EndpointError as exc:
            raise SlurmError(f"slurmrestd: {exc}") from None
        if answer.status in (401, 403):
            raise SlurmError(f"slurmrestd: HTTP {answer.status}: not authorised")
        if answer.cut:
            raise SlurmError(f"slurmrestd {path}: an answer over {self.max_answer} bytes")
        try:
            body = answer.json()
        except ValueError:
            body = {}
        return answer.status, body if isinstance(body, dict) else {}

    @staticmethod
    def _errors(body: dict[str, Any]) -> str:
        errors = body.get("errors")
        if errors is None:
            return ""
        if not isinstance(errors, list):
            return f"errors: {errors!r:.80}"
        return "; ".join(
            str(e.get("error") or e.get("description") or e) if isinstance(e, dict) else str(e)
            for e in errors
        )

    def _read(self, path: str, key: str) -> list[dict[str, Any]]:
        """A listing (`/jobs`, `/nodes`, `/partition/X`): its objects (SlurmError: unknown)."""
        status, body = self._request("GET", path)
        errors = self._errors(body)
        if status != 200 or errors or key not in body:
            raise SlurmError(f"slurmrestd {path}: HTTP {status}: {errors or 'no ' + key}")
        return _objects(body, key, path)

    def job(self, job_id: str, *, fresh: bool = False) -> SlurmJob | None:
        return self._jobs.job(job_id, self._read_job, fresh=fresh)

    def _read_job(self, job_id: str) -> SlurmJob | None:
        status, body = self._request("GET", f"/job/{job_id}")
        what = f"job {job_id}"
        jobs = [j for j in _objects(body, "jobs", what) if str(j.get("job_id")) == job_id]
        if status == 200 and jobs and not self._errors(body):
            raw = jobs[0]
            uid = raw.get("user_id")
            job: SlurmJob | None = SlurmJob(
                id=job_id,
                state=(_states(raw, "job_state") or ("",))[0],
                uid=uid if isinstance(uid, int) and not isinstance(uid, bool) else None,
                user=_text(raw, "user_name"),
                partition=_text(raw, "partition"),
                account=_text(raw, "account"),
                nodes=self.hostnames(_text(raw, "nodes")),
            )
        elif "Invalid job id" in self._errors(body) or (
            status == 200 and body.get("errors") == [] and isinstance(body.get("jobs"), list)
        ):
            job = None  # Slurm says so, in the words it uses; anything else is unknown
        else:
            raise SlurmError(f"slurmrestd job {job_id}: HTTP {status}: {self._errors(body)}")
        return job

    def hostnames(self, node_list: str) -> tuple[str, ...]:
        """`gpu[01-04],dgx-1` -> each name (the REST API gives the compressed list)."""
        if not node_list or node_list == "(null)":
            return ()
        try:
            return tuple(hostlist.expand_hostlist(node_list))
        except hostlist.BadHostlist as exc:
            raise SlurmError(f"slurmrestd: node list {node_list!r}: {exc}") from None

    def cancel(self, job_id: str, *, signal: str | None = None) -> tuple[bool, str]:
        if not JOB_ID.fullmatch(job_id):
            return False, "not a job id"
        params = {"signal": signal} if signal else {}
        status, body = self._request("DELETE", f"/job/{job_id}", **params)
        self._jobs.forget(job_id)
        errors = self._errors(body)
        # Accepted only as slurmrestd says it: 200 and an empty list of errors.
        if status == 200 and body.get("errors") == []:
            return True, "slurmrestd accepted the cancel"
        return False, f"slurmrestd: HTTP {status}: {errors or 'not an answer slurmrestd gives'}"

    def gpus_allocated(self, node: str) -> int | None:
        try:
            status, body = self._request("GET", f"/node/{node}")
            nodes = [n for n in _objects(body, "nodes", f"node {node}") if n.get("name") == node]
        except SlurmError:
            return None
        used = nodes[0].get("gres_used") if nodes else None
        if status != 200 or self._errors(body) or not isinstance(used, str):
            return None  # a count is read, never assumed
        return sum(int(n) for n in _GPUS_USED.findall(used))

    def pending_jobs(self) -> list[PendingJob]:
        """Every pending job, with the nodes it may run on (SlurmError: unknown)."""
        partitions: dict[str, tuple[str, ...]] = {}
        found = []
        for raw in self._read("/jobs", "jobs"):
            if "PENDING" not in _states(raw, "job_state"):
                continue
            job_id = str(raw.get("job_id"))
            if not JOB_ID.fullmatch(job_id) or isinstance(raw.get("job_id"), bool):
                raise SlurmError(f"slurmrestd /jobs: a pending job's id is {job_id[:40]!r}")
            node_count = _whole(raw, "node_count", f"job {job_id}")
            partition = _text(raw, "partition")
            required = _text(raw, "required_nodes")
            if required:
                nodes = self.hostnames(required)
            else:
                nodes = partition_nodes(partition, partitions, self._partition_nodes)
            gpus = gpus_per_node(
                {
                    "TresPerNode": _text(raw, "tres_per_node"),
                    "TresPerJob": _text(raw, "tres_per_job"),
                    "NumNodes": str(node_count),
                }
            )
            submitted = raw.get("submit_time")
            found.append(
                PendingJob(
                    id=job_id,
                    user=_text(raw, "user_name"),
                    reason=_reason(raw),
                    partition=partition,
                    gpus_per_node=gpus,
                    node_count=node_count,
                    nodes=nodes,
                    # as scontrol prints SubmitTime: local time, no zone
                    submitted=datetime.fromtimestamp(submitted).isoformat(timespec="seconds")
                    if isinstance(submitted, int) and not isinstance(submitted, bool)
                    else "",
                )
            )
        return found

    def _partition_nodes(self, partition: str) -> tuple[str, ...]:
        if not partition or "/" in partition:
            raise SlurmError(f"slurmrestd: a pending job's partition is {partition[:40]!r}")
        what = f"/partition/{urllib.parse.quote(partition)}"
        named = [p for p in self._read(what, "partitions") if p.get("name") == partition]
        if not named:
            raise SlurmError(f"slurmrestd {what}: no such partition")
        return self.hostnames(_text(named[0], "nodes"))

    def free_gpus(self) -> dict[str, int]:
        """GPUs no job holds on each node that can take jobs; a node that cannot (down,
        drained, failing, not responding) is left out (SlurmError: unknown)."""
        free = {}
        for raw in self._read("/nodes", "nodes"):
            name = _text(raw, "name")
            if not name:
                raise SlurmError("slurmrestd /nodes: a node without a name")
            total = sum(int(n) for n in _GPUS_USED.findall(gres_counts(_text(raw, "gres"))))
            used = sum(int(n) for n in _GPUS_USED.findall(_text(raw, "gres_used")))
            state = "+".join(_states(raw, "state") + _states(raw, "state_flags"))
            if node_usable(state):
                free[name] = max(0, total - used)
        return free
