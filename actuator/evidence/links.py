"""Signed links to one evidence picture (itsdangerous, as the keep links).

A picture link names one case and one picture and carries no authority but to see that
picture: chat shows it to whoever reads the channel, so it must not be a keep link. It is
signed with a key derived from the actuator's secret under its own salt (a keep link is
never a picture link, nor the reverse) and expires with the evidence (the store's
retention)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from actuator.keeplinks import LinkError, loads_signed, timed_serializer

SALT = "gpu-reclaimer evidence picture v1"


@dataclass(frozen=True)
class PictureRef:
    case_id: int
    picture_id: int


class PictureLinks:
    def __init__(
        self,
        key: bytes,
        public_url: str,
        *,
        ttl: float,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.public_url, self.ttl = public_url.rstrip("/"), ttl
        self.serializer = timed_serializer(key, SALT, clock)

    def path(self, ref: PictureRef) -> str:
        """The picture's path on the actuator (the keep page's <img>)."""
        token = self.serializer.dumps({"c": ref.case_id, "p": ref.picture_id})
        return f"/evidence/{token}.png"

    def url(self, ref: PictureRef) -> str:
        return self.public_url + self.path(ref)

    def verify(self, token: str) -> PictureRef:
        """The picture a link names, or LinkError (actuator/keeplinks.py)."""
        data = loads_signed(self.serializer, token, self.ttl)  # LinkError: expired, not ours
        if not (
            isinstance(data, dict)
            and isinstance(data.get("c"), int)
            and isinstance(data.get("p"), int)
        ):
            raise LinkError("this link is not valid")
        return PictureRef(data["c"], data["p"])
