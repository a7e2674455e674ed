"""Signed, expiring, single-case "keep my job" links (itsdangerous, Flask's own signer).

A link names one case and a random nonce, is signed with a key derived from the actuator's
secret, and expires after `ttl`; it carries no other authority. A tampered link fails the
signature, an old one its age, and a nonce the store has seen act once is refused again
(see `Store.use_keep_link`). The page's form carries a CSRF value derived from the link, so
only a page served for that link can post to it.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from itsdangerous import BadSignature, SignatureExpired, TimestampSigner, URLSafeTimedSerializer

SALT = "gpu-reclaimer keep link v1"


class LinkError(Exception):
    """Why a link cannot be used: expired or tampered (the message is safe to show)."""


@dataclass(frozen=True)
class Claim:
    case_id: int
    nonce: str


def timed_serializer(key: bytes, salt: str, clock: Callable[[], float]) -> URLSafeTimedSerializer:
    """itsdangerous' timed serializer, its timestamps on `clock` (so a link's age is the
    clock's, and tests can move it)."""

    class _Signer(TimestampSigner):
        def get_timestamp(self) -> int:
            return int(clock())

    return URLSafeTimedSerializer(key, salt=salt, signer=_Signer)


def loads_signed(serializer: URLSafeTimedSerializer, token: str, ttl: float) -> Any:
    """The signed payload, or LinkError saying whether the link expired or is not ours."""
    try:
        return serializer.loads(token, max_age=int(ttl))
    except SignatureExpired:
        raise LinkError("this link has expired") from None
    except BadSignature:
        raise LinkError("this link is not valid (it was changed or is not ours)") from None


def link_key(secret: str) -> bytes:
    """The links' own key, derived from the actuator's secret (every worker derives the same;
    rotating the secret voids every link)."""
    return hmac.new(secret.encode(), SALT.encode(), hashlib.sha256).digest()


class KeepLinks:
    def __init__(
        self,
        key: bytes,
        public_url: str,
        *,
        ttl: float = 86400.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.key, self.public_url, self.ttl, self.clock = key, public_url.rstrip("/"), ttl, clock
        self.serializer = timed_serializer(key, SALT, clock)

    @property
    def origin(self) -> str:
        """scheme://host[:port] of the public URL, as browsers send it in `Origin`."""
        scheme, _, rest = self.public_url.partition("://")
        return f"{scheme}://{rest.split('/', 1)[0]}"

    def token(self, case_id: int) -> str:
        return str(self.serializer.dumps({"c": case_id, "n": secrets.token_urlsafe(12)}))

    def url(self, case_id: int) -> str:
        return f"{self.public_url}/keep/{self.token(case_id)}"

    def verify(self, token: str) -> Claim:
        data = loads_signed(self.serializer, token, self.ttl)
        if (
            not isinstance(data, dict)
            or not isinstance(data.get("c"), int)
            or not isinstance(data.get("n"), str)
        ):
            raise LinkError("this link is not valid")
        return Claim(data["c"], data["n"])

    def csrf(self, token: str) -> str:
        return hmac.new(self.key, b"csrf\0" + token.encode(), hashlib.sha256).hexdigest()

    def check_csrf(self, token: str, given: str) -> bool:
        return hmac.compare_digest(self.csrf(token), given or "")
