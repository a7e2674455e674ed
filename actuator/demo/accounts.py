"""The simulated day's people: jobs belong to several users in several projects, so the
per-user and per-project panels and reports show who holds idle GPUs.

The jobs really run as those accounts (the exporter and the actuator read the owner from
/proc like anywhere else), which only root can do: the accounts must exist, or root asks for
them to be created (`demo --day --create-users`; system accounts with no home and no login
shell, named with a `day-` prefix so no real person's account is used). Otherwise every job
runs as whoever runs the day, and the day says so.
"""

from __future__ import annotations

import os
import pwd
import random
import shutil
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass

# user -> project; the prefix keeps the day off real people's accounts.
DAY_USERS: Mapping[str, str] = {
    "day-alice": "vision",
    "day-bob": "vision",
    "day-lilei": "nlp",
    "day-wangfang": "speech",
}


@dataclass(frozen=True)
class Accounts:
    users: Mapping[str, str]  # usable accounts -> project; empty: jobs run as the caller
    note: str  # why not, when empty


def exists(user: str) -> bool:
    try:
        pwd.getpwnam(user)
    except KeyError:
        return False
    return True


def create(user: str) -> str:
    """A system account with no home and no login shell ('' on success, else why not)."""
    useradd = shutil.which("useradd") or "/usr/sbin/useradd"
    options = ["--system", "--no-create-home", "--user-group", "--shell", "/usr/sbin/nologin"]
    done = subprocess.run([useradd, *options, user], capture_output=True, text=True, check=False)
    return (
        "" if done.returncode == 0 else done.stderr.strip() or f"useradd exited {done.returncode}"
    )


def day_accounts(*, create_missing: bool, euid: int | None = None) -> Accounts:
    """The accounts the day's jobs run as, or none and why."""
    if (os.geteuid() if euid is None else euid) != 0:
        return Accounts({}, "not root: every job runs as you (one user, one project)")
    missing = [u for u in DAY_USERS if not exists(u)]
    if missing and not create_missing:
        return Accounts(
            {},
            f"no accounts {', '.join(missing)} (--create-users makes them): every job runs as you",
        )
    for user in missing:
        why = create(user)
        if why and not exists(user):  # made meanwhile by another day run: theirs is ours
            return Accounts({}, f"cannot create {user}: {why}; every job runs as you")
    return Accounts(dict(DAY_USERS), "")


def owner_of(job_id: int, seed: int) -> str:
    """Who a job belongs to: seeded apart from the job mix, so the mix stays the same."""
    names = sorted(DAY_USERS)
    return random.Random(f"{seed}-{job_id}").choice(names)
