"""The two clocks of the actuator.

Every wait (grace, term/kill/release timeouts, snooze, limit and breaker windows, lease
expiry, re-arm) is measured on CLOCK_BOOTTIME: it never steps, counts suspend, and is the
same for every process on the host, so a value one worker stored is valid for another
and across restarts (not across reboots: the boot id tells those apart). Wall time is for
records, humans, and comparisons with wall timestamps from outside (alert `startsAt`,
heartbeat and log mtimes).
"""

from __future__ import annotations

import time


def boottime() -> float:
    return time.clock_gettime(time.CLOCK_BOOTTIME)
