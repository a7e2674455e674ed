"""What one worker of the central service shares between its transports (the HTTP API, the
keep page, the keep socket) and the operations they call: the config, the store, the audit
log, the token and the optional parts. Built once, in actuator/server.py."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from actuator.audit import AuditLog
from actuator.clock import boottime
from actuator.config import ActuatorConfig
from actuator.evidence.links import PictureLinks
from actuator.intake_first import DeliveryClock
from actuator.keeplinks import KeepLinks
from actuator.operators import Operators
from actuator.store import Store


@dataclass
class Runtime:
    config: ActuatorConfig
    store: Store
    audit: AuditLog
    token: str
    links: KeepLinks | None = None  # "keep my job" links, when notifier.public_url is set
    pictures: PictureLinks | None = None  # evidence pictures' links (notifier.evidence too)
    operators: Operators | None = None  # people at the API, when `operators` is set
    clock: Callable[[], float] = time.time
    mono: Callable[[], float] = boottime
    started_mono: float = field(default_factory=boottime)
    deliveries: DeliveryClock | None = None  # the webhook marks each delivery on it
