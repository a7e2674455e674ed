"""Operators as people: OIDC bearer tokens (JWTs checked against the issuer's JWKS with
PyJWT: signature, issuer, audience, expiry) or an LDAP bind, their groups mapped to roles.

Roles: `sre` reads cases and the audit log and snoozes; `admin` also resets the circuit
breaker. With operators configured, the shared bearer token is Alertmanager's alone: it
delivers alerts and nothing else (actuator/app.py).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

Role = Literal["sre", "admin"]
ROLES: tuple[Role, ...] = ("sre", "admin")
ALGORITHMS = ("RS256", "RS384", "RS512", "ES256", "ES384", "PS256")  # never "none" nor HS*


class AuthError(Exception):
    """Why a token is refused; `reason` is a short label for the metric."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


@dataclass(frozen=True)
class Principal:
    name: str  # who, for the audit: preferred_username, email or sub
    subject: str
    roles: frozenset[str]
    issuer: str  # the OIDC issuer, or the directory's URL
    method: str = "oidc"  # how they signed in: oidc, ldap

    def may(self, role: Role) -> bool:
        return "admin" in self.roles or role in self.roles


class Operators:
    """The ways a person signs in: an OIDC bearer token, and/or the directory password
    (HTTP Basic, checked by an LDAP bind: actuator/ldap_operators.py)."""

    def __init__(self, oidc: OidcVerifier | None = None, ldap: Any | None = None) -> None:
        self.oidc, self.ldap = oidc, ldap

    def bearer(self, token: str) -> Principal:
        if self.oidc is None:
            raise AuthError("scheme", "sign in with your directory user name and password")
        return self.oidc.verify(token)

    def basic(self, user: str, password: str) -> Principal:
        if self.ldap is None:
            raise AuthError("scheme", "sign in with an OIDC bearer token")
        principal: Principal = self.ldap.verify(user, password)
        return principal

    @property
    def schemes(self) -> str:
        return " or ".join(
            n
            for n, v in (
                ("an OIDC bearer token", self.oidc),
                ("your directory password", self.ldap),
            )
            if v
        )


class OidcVerifier:
    def __init__(
        self,
        issuer: str,
        audience: str,
        jwks_url: str,
        *,
        groups_claim: str = "groups",
        roles: Mapping[str, Iterable[str]] | None = None,
        leeway: float = 30.0,
        timeout: float = 5.0,
    ) -> None:
        self.issuer, self.audience, self.groups_claim = issuer, audience, groups_claim
        self.roles = {role: set(groups) for role, groups in (roles or {}).items()}
        self.leeway = leeway
        import jwt  # the `oidc` extra: loaded only where operators sign in with OIDC

        self.jwks = jwt.PyJWKClient(jwks_url, cache_keys=True, lifespan=300, timeout=timeout)

    def verify(self, token: str) -> Principal:
        import jwt

        try:
            key = self.jwks.get_signing_key_from_jwt(token)
            claims: dict[str, Any] = jwt.decode(
                token,
                key.key,
                algorithms=list(ALGORITHMS),
                audience=self.audience,
                issuer=self.issuer,
                leeway=self.leeway,
                options={"require": ["exp", "iat", "iss", "aud", "sub"]},
            )
        except jwt.ExpiredSignatureError:
            raise AuthError("expired", "the token has expired") from None
        except jwt.InvalidAudienceError:
            raise AuthError("audience", "the token is for another audience") from None
        except jwt.InvalidIssuerError:
            raise AuthError("issuer", "the token is from another issuer") from None
        except jwt.PyJWKClientConnectionError as exc:
            raise AuthError("jwks", f"cannot fetch the issuer's keys: {exc}") from None
        except jwt.PyJWKClientError:
            raise AuthError(
                "key", "the token is signed with a key the issuer does not list"
            ) from None
        except jwt.InvalidTokenError as exc:
            raise AuthError("invalid", f"invalid token: {exc}") from None
        groups = claims.get(self.groups_claim) or []
        if isinstance(groups, str):
            groups = [groups]
        roles = frozenset(r for r, members in self.roles.items() if members & set(groups))
        name = str(claims.get("preferred_username") or claims.get("email") or claims["sub"])
        return Principal(name, str(claims["sub"]), roles, str(claims["iss"]))
