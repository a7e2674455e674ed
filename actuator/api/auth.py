"""Who may call the API: the one auth object every blueprint answers to.

Alertmanager's webhook takes the shared bearer token. Without operators configured, so
does everything else; with them, people sign in as themselves (an OIDC token or their
directory password) and need the role their endpoint asks (`ROLES`), and the shared token
is refused there. The probes and /metrics are open; the keep and evidence pages carry their
own signed links. Every refusal is counted and audited (never the token itself), and the
principal that acted is what the audit names (`actor`).
"""

from __future__ import annotations

import contextlib
import hmac

from flask import Response, g, request

from actuator.api.responses import error
from actuator.audit import AuditError
from actuator.audit_records import AuthFailed
from actuator.operators import AuthError, Principal, Role
from actuator.runtime import Runtime
from actuator.store import StoreUnavailable

# The shared bearer token is a principal too: whoever holds it, the audit names it.
SHARED_TOKEN = Principal(
    name="token",
    subject="token",
    roles=frozenset({"admin"}),
    issuer="shared bearer token",
    method="token",
)
OPEN_PATHS = ("/metrics", "/-/healthy", "/-/ready")
WEBHOOK = "/api/v1/alerts"
# Who may do what, with operators configured (blueprint.endpoint -> role); any other: admin.
ROLES: dict[str, Role] = {
    "cases.cases": "sre",
    "cases.case": "sre",
    "cases.why": "sre",
    "cases.snooze": "sre",
    "admin.audit": "sre",
    "admin.breaker_reset": "admin",
    "admin.repeat_reset": "admin",
}


class Auth:
    def __init__(self, rt: Runtime) -> None:
        self.rt = rt
        self._expected = rt.token.encode()

    def count(self, code: int) -> None:
        """The webhook's answers, by status code (for /metrics)."""
        with contextlib.suppress(StoreUnavailable):
            self.rt.store.count_request(code)

    def guard(self) -> tuple[Response, int] | None:
        """Before every request: None to go on, or the refusal."""
        rt = self.rt
        if request.path in OPEN_PATHS:
            return None
        if rt.links is not None and request.path.startswith("/keep/"):
            return None  # the signed link is the credential (actuator/keep_page.py)
        if rt.pictures is not None and request.path.startswith("/evidence/"):
            return None  # so is a picture's (actuator/evidence/page.py)
        if rt.operators is not None and request.path != WEBHOOK:
            return self._person(ROLES.get(request.endpoint or "", "admin"))
        denied = self._token()
        if denied is not None and request.path == WEBHOOK:
            self.count(denied[1])
        return denied

    def actor(self, declared: str) -> str:
        """Who did it, for the audit: the authenticated principal (a person, or "token" for
        the shared bearer token); what the caller typed in `by` is kept beside it, never
        recorded as who acted."""
        principal: Principal = g.get("principal") or SHARED_TOKEN
        said = f", said {declared!r}" if declared and declared != principal.name else ""
        if principal is SHARED_TOKEN:
            return f"token (the shared bearer token){said}"
        return f"{principal.name} ({principal.method} {principal.issuer}){said}"

    def _token(self) -> tuple[Response, int] | None:
        header = request.headers.get("Authorization", "")
        scheme, _, given = header.partition(" ")
        if scheme.lower() != "bearer" or not given.strip():
            return self._failed("missing", "missing bearer token")
        if not hmac.compare_digest(given.strip().encode(), self._expected):
            return self._failed("invalid", "invalid token", 403)
        g.principal = SHARED_TOKEN
        return None

    def _person(self, role: Role) -> tuple[Response, int] | None:
        """With operators configured: a person (OIDC token or directory password) with the
        role, not the shared token."""
        operators = self.rt.operators
        assert operators is not None
        scheme, _, given = request.headers.get("Authorization", "").partition(" ")
        given = given.strip()
        if scheme.lower() not in ("bearer", "basic") or not given:
            return self._failed("missing", f"sign in: {operators.schemes} is needed")
        if hmac.compare_digest(given.encode(), self._expected):
            return self._failed(
                "shared_token",
                "the shared token is for Alertmanager's alerts only; people sign in as themselves",
                403,
            )
        try:
            if scheme.lower() == "bearer":
                principal = operators.bearer(given)
            else:
                auth = request.authorization
                if auth is None or auth.type != "basic" or auth.username is None:
                    return self._failed("invalid", "malformed Basic credentials")
                principal = operators.basic(auth.username, auth.password or "")
        except AuthError as exc:
            return self._failed(exc.reason, str(exc))
        if not principal.may(role):
            return self._failed("role", f"{principal.name} does not have the {role} role", 403)
        g.principal = principal
        return None

    def _failed(self, reason: str, message: str, code: int = 401) -> tuple[Response, int]:
        """Counted and audited (never the token itself)."""
        with contextlib.suppress(StoreUnavailable):
            self.rt.store.count("auth_failures", reason)
        with contextlib.suppress(AuditError):
            self.rt.audit.write(
                AuthFailed(
                    reason=reason,
                    path=request.path,
                    method=request.method,
                    remote=request.remote_addr,
                )
            )
        resp, status = error(code, message)
        if code == 401:
            resp.headers["WWW-Authenticate"] = 'Bearer realm="gpu-reclaimer"'
        return resp, status
