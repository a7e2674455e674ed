"""The same view of Slurm through slurmrestd (REST, JWT), where a site runs it.

The interface of `SlurmCli` (job, cancel, gpus_allocated), over HTTP: `GET
/slurm/vX/job/ID`, `DELETE /slurm/vX/job/ID` (the scheduler's cancel; `?signal=KILL` for
the forced step), `GET /slurm/vX/node/NAME` (`gres_used`). The token is read from a file
on every request, so `scontrol token` run by cron can rotate it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import hostlist
import requests

from actuator.schedulers.slurm_cli import _GPUS_USED, JOB_ID, JobCache, SlurmError, SlurmJob


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
    ) -> None:
        self.base = f"{url.rstrip('/')}/slurm/{api_version}"
        self.user, self.token_file, self.timeout = user, Path(token_file), timeout
        self._jobs = JobCache(cache_ttl, clock)
        self._session = requests.Session()

    def _request(self, method: str, path: str, **params: str) -> tuple[int, dict[str, Any]]:
        try:
            token = self.token_file.read_text().strip()
        except OSError as exc:
            raise SlurmError(f"slurmrestd token: {exc}") from None
        headers = {"X-SLURM-USER-NAME": self.user, "X-SLURM-USER-TOKEN": token}
        try:
            answer = self._session.request(
                method,
                self.base + path,
                params=params or None,
                headers=headers,
                timeout=self.timeout,
            )
        except requests.RequestException as exc:
            raise SlurmError(f"slurmrestd: {exc}") from None
        try:
            body = answer.json()
        except ValueError:
            body = {}
        if answer.status_code in (401, 403):
            raise SlurmError(f"slurmrestd: HTTP {answer.status_code}: not authorised")
        return answer.status_code, body if isinstance(body, dict) else {}

    @staticmethod
    def _errors(body: dict[str, Any]) -> str:
        return "; ".join(
            str(e.get("error") or e.get("description") or e) for e in body.get("errors") or []
        )

    def job(self, job_id: str, *, fresh: bool = False) -> SlurmJob | None:
        return self._jobs.job(job_id, self._read_job, fresh=fresh)

    def _read_job(self, job_id: str) -> SlurmJob | None:
        status, body = self._request("GET", f"/job/{job_id}")
        jobs = [j for j in body.get("jobs") or [] if str(j.get("job_id")) == job_id]
        if status == 200 and jobs:
            raw = jobs[0]
            uid = raw.get("user_id")
            job: SlurmJob | None = SlurmJob(
                id=job_id,
                state=str(raw.get("job_state", "")),
                uid=uid if isinstance(uid, int) and not isinstance(uid, bool) else None,
                user=str(raw.get("user_name", "")),
                partition=str(raw.get("partition", "")),
                account=str(raw.get("account", "")),
                nodes=self.hostnames(str(raw.get("nodes", ""))),
            )
        elif "Invalid job id" in self._errors(body) or (status == 200 and not jobs):
            job = None
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
        if status == 200 and not errors:
            return True, "slurmrestd accepted the cancel"
        return False, f"slurmrestd: HTTP {status}: {errors}"

    def gpus_allocated(self, node: str) -> int | None:
        try:
            status, body = self._request("GET", f"/node/{node}")
        except SlurmError:
            return None
        nodes = [n for n in body.get("nodes") or [] if n.get("name") == node]
        if status != 200 or not nodes:
            return None
        used = str(nodes[0].get("gres_used", ""))
        return sum(int(n) for n in _GPUS_USED.findall(used))
