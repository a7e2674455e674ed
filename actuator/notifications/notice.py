"""What a person is told about a case: one typed value built from facts the node proved.

The alert names a target (node, PID, start ticks, GPU UUID); everything else it says
(command, GPU index, project, user, memory) is a claim. A notice shows only what the live
re-check of that target saw (`ProvenFacts`), recorded on the case when the node proved it,
so a follow-up after the process has gone still tells the same truth. Where a claim
disagrees with the node, the node wins and `disagreements` says so for the audit.

Every channel, template, the keep page, the decision alerts and the audit read `Notice`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any, Literal

from actuator.models import Case, LiveState, OwnerPresence

# idle: `reclaim_when: demand`'s first notice (kept until someone needs the GPU);
# warning: SIGTERM at `deadline` unless kept; reclaimed: the follow-up; suspended: the
# suspend rung checkpointed it; restore: where the resume its owner asked for stands.
Kind = Literal["idle", "warning", "reclaimed", "suspended", "restore"]
# What a suspended job's notice tells (kind suspended: "suspended"; kind restore: the rest).
RestoreNews = Literal["", "suspended", "waiting", "refused", "stopping"]


@dataclass(frozen=True)
class ProvenFacts:
    """The target as the node saw it at its last live re-check (untrusted text included:
    a user chose the command line; escaping is the renderer's job, untrusted.py)."""

    node: str
    pid: int
    gpu_uuid: str
    gpu_index: int | None = None
    gpu_model: str = ""
    user: str = ""
    uid: int | None = None
    project: str = ""  # the node's project mapping (user, groups, namespace)
    program: str = ""
    cmdline: str = ""
    memory_bytes: int | None = None
    sm_util: float | None = None
    namespace: str = ""
    pod: str = ""
    slurm_job: str = ""
    last_activity: float | None = None  # its latest heartbeat or log write (unix seconds)
    power_watts: float | None = None  # its share of the GPU's board power (by memory held)
    # Its owner's presence on the node at that check (exporter/presence.py): the most recently
    # used login terminal and its idle time, the connections to its notebook server.
    owner_terminal: str = ""
    owner_terminal_idle: float | None = None
    owner_notebook_connections: int | None = None
    checked_at: float = 0.0

    def presence(self) -> OwnerPresence:
        """What the check saw of the owner, as the decision read it (one reading of it)."""
        return OwnerPresence(
            sessions=int(self.owner_terminal_idle is not None),  # recorded only with a session
            idle_seconds=self.owner_terminal_idle,
            terminal=self.owner_terminal,
            notebook_connections=self.owner_notebook_connections,
        )

    @classmethod
    def from_live(cls, case: Case, live: LiveState) -> ProvenFacts:
        seen = live.presence
        return cls(
            node=case.node,
            pid=case.pid,
            gpu_uuid=case.uuid,
            gpu_index=live.gpu_index,
            gpu_model=live.gpu_model,
            user=live.user or "",
            uid=live.uid,
            project=live.project,
            program=live.program,
            cmdline=live.cmdline,
            memory_bytes=live.gpu_memory_bytes,
            sm_util=live.sm_util,
            namespace=live.namespace,
            pod=live.pod,
            slurm_job=live.slurm_job,
            last_activity=live.last_activity,
            power_watts=live.power_share_watts,
            owner_terminal=seen.terminal if seen and seen.sessions else "",
            owner_terminal_idle=seen.idle_seconds if seen and seen.sessions else None,
            owner_notebook_connections=seen.notebook_connections if seen else None,
            checked_at=live.sampled_at,
        )

    @classmethod
    def of_case(cls, case: Case) -> ProvenFacts | None:
        """The facts recorded on the case, or None when the node never proved any."""
        if not case.facts:
            return None
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in case.facts.items() if k in known})

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def gpu(self) -> str:
        """The GPU as people name it: its index on the node, else its UUID."""
        return str(self.gpu_index) if self.gpu_index is not None else self.gpu_uuid


# alert label -> how to read the same fact from ProvenFacts
_CLAIMS = {
    "gpu": lambda f: f.gpu if f.gpu_index is not None else None,
    "command": lambda f: f.program or None,
    "user": lambda f: f.user or None,
    "project": lambda f: f.project,
    "namespace": lambda f: f.namespace,
    "pod": lambda f: f.pod,
}


def disagreements(labels: dict[str, str], facts: ProvenFacts) -> dict[str, dict[str, str]]:
    """Labels the alert carries that the node contradicts: {label: {alert, node}}. A label
    the node has no reading for is not a disagreement (nothing to compare)."""
    found = {}
    for label, read in _CLAIMS.items():
        claimed = labels.get(label)
        proven = read(facts)
        if claimed and proven is not None and claimed != proven:
            found[label] = {"alert": claimed, "node": str(proven)}
    return found


@dataclass(frozen=True)
class OwnerHint:
    """Who the workload names as its owner, proven by the scheduler (a pod's annotation on
    the pod the cgroup names; Slurm's job record): never from the alert."""

    user: str = ""
    email: str = ""
    language: str = ""


@dataclass(frozen=True)
class Notice:
    kind: Kind
    case: int
    facts: ProvenFacts
    alertname: str  # which idle definition flagged it (the rule, not a fact about people)
    since: float  # when the condition started (unix seconds)
    deadline: float  # SIGTERM unless kept (warning), when it was sent (reclaimed); 0 (idle)
    term_timeout: float
    grace: float
    freed_bytes: int = 0
    keep_url: str = ""
    owner: OwnerHint = OwnerHint()
    thresholds: tuple[tuple[str, float], ...] = ()
    waiting: str = ""  # who waits for this GPU (reclaim_when: demand); untrusted text
    # The demand source that reads them ("wait", "slurm", "kubernetes", "pool"): the product's
    # own words about how they wait belong in the template, never in the untrusted text.
    waiting_through: str = ""
    # Repeat habits: the owner's earlier reclaims within `repeat_window` when a step
    # applies (0: none); `copy_project`: the project's contact is told too.
    repeat_prior: int = 0
    repeat_window: float = 0.0
    copy_project: bool = False
    keep_needs_sre: bool = False
    # The service class (a tree other hosts can reach): quiet between requests is what a
    # service does, so it is reclaimed only as the rule's service class says.
    service: bool = False
    service_window: float = 0.0
    # What made it one (policy.ServiceEvidence): declared, clients, client, unproven, alert.
    service_by: str = ""
    service_ports: tuple[int, ...] = ()
    service_clients: int = 0
    service_client_ago: float | None = None
    service_watched: float | None = None
    # The owner's presence holds the reclaim back this long past the deadline (0: off), a
    # terminal counting while it saw input within `presence_idle` (policy: Owner presence).
    presence_grace: float = 0.0
    presence_idle: float = 1800.0
    # The rule's suspend rung is on: at the deadline the job is suspended where the node can
    # checkpoint it (presence holds back only the SIGTERM of one it cannot).
    suspend: bool = False
    # A suspended job's news (kind restore): "waiting" (no GPU had room: not tried, first
    # in line), "refused" (the driver refused try `restore_try` of `restore_tries`) or
    # "stopping" (its suspension ends on the ladder: `restore_detail` says why).
    restore: RestoreNews = ""
    restore_detail: str = ""  # our words, with the node's GPU names in them: escaped
    restore_try: int = 0
    restore_tries: int = 0
    # The evidence picture (actuator/evidence/): the PNG for e-mail, its link for chat.
    picture_png: bytes = field(default=b"", repr=False)
    picture_url: str = ""

    @property
    def presence_seen(self) -> bool:
        """The node saw its owner present at its check, where presence holds anything back."""
        seen = self.facts.presence().present(self.presence_idle)
        return self.presence_grace > 0 and seen is not None

    @property
    def user(self) -> str:
        """Whose notice this is: the scheduler-proven owner, else the process's user."""
        return self.owner.user or self.facts.user

    def to_json(self) -> dict[str, Any]:
        """The JSON webhook's body and the audit's copy (stable keys)."""
        f = self.facts
        return {
            "kind": self.kind,
            "case": self.case,
            "node": f.node,
            "gpu": f.gpu,
            "uuid": f.gpu_uuid,
            "gpu_model": f.gpu_model,
            "pid": f.pid,
            "command": f.program,
            "cmdline": f.cmdline,
            "user": self.user,
            "project": f.project,
            "namespace": f.namespace,
            "pod": f.pod,
            "slurm_job": f.slurm_job,
            "alertname": self.alertname,
            "gpu_memory_bytes": f.memory_bytes,
            "since": self.since,
            "sigterm_at": self.deadline or None,
            "term_timeout": self.term_timeout,
            "freed_bytes": self.freed_bytes,
            "keep_url": self.keep_url,
            "snooze": f"/api/v1/cases/{self.case}/snooze",
            "owner_email": self.owner.email,
            "owner_language": self.owner.language,
            "thresholds": dict(self.thresholds),
            "waiting": self.waiting,
            "waiting_through": self.waiting_through,
            "service": self.service,
            "picture_url": self.picture_url,
            "message": self.message(),
        }

    def message(self) -> str:
        f = self.facts
        head = f"GPU process {f.pid} of {self.user or '?'} on {f.node} holds GPU memory and is idle"
        if self.kind == "idle":
            return f"{head}; it is kept, and reclaimed only when someone needs this GPU."
        if self.kind == "reclaimed":
            return f"{head}; it was reclaimed."
        waits = f" {self.waiting} is waiting for this GPU;" if self.waiting else ""
        return f"{head};{waits} it will be sent SIGTERM in {self.grace:g}s unless snoozed."
