"""Operators with a real identity: OIDC tokens (RS256 JWTs) checked against a JWKS the test
serves over loopback with keys it makes; roles from groups; the audit names the person; the
shared token is Alertmanager's only; failed authentication is counted and audited. (LDAP
binds: test_ldap_operators.py.)"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import rsa

from actuator.app import create_app
from actuator.models import State
from actuator.operators import OidcVerifier, Operators
from actuator.runtime import Runtime
from actuator.store.cases import insert_case
from tests.helpers.api import TOKEN, make_runtime
from tests.helpers.cases import make_case

ISSUER, AUDIENCE = "https://sso.example.com/realms/gpu", "gpu-reclaimer"


class Issuer:
    def __init__(self) -> None:
        self.key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self.stranger = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        jwk = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(self.key.public_key()))
        self.jwks = {"keys": [jwk | {"kid": "k1", "use": "sig", "alg": "RS256"}]}

    def token(self, *, key: Any = None, kid: str = "k1", **claims: Any) -> str:
        now = int(time.time())
        body = {
            "iss": ISSUER,
            "aud": AUDIENCE,
            "sub": "u-1",
            "iat": now,
            "exp": now + 300,
            "preferred_username": "hanmeimei",
            "groups": ["gpu-sre"],
        } | claims
        return jwt.encode(body, key or self.key, algorithm="RS256", headers={"kid": kid})


@pytest.fixture(scope="module")
def issuer() -> Iterator[tuple[Issuer, str]]:
    state = Issuer()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            data = json.dumps(state.jwks).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield state, f"http://127.0.0.1:{server.server_address[1]}/protocol/openid-connect/certs"
    finally:
        server.shutdown()


@pytest.fixture
def rt(tmp_path: Path, issuer: tuple[Issuer, str]) -> Runtime:
    runtime = make_runtime(tmp_path)
    roles = {"sre": ["gpu-sre"], "admin": ["gpu-admin"]}
    runtime.operators = Operators(OidcVerifier(ISSUER, AUDIENCE, issuer[1], roles=roles))
    return runtime


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def audit(rt: Runtime) -> list[dict[str, Any]]:
    path = Path(rt.config.storage.audit_log)
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_roles_from_groups_and_the_audit_names_the_person(rt, issuer) -> None:
    keys, _ = issuer
    client = create_app(rt).test_client()
    case = make_case(id=0, state=State.NOTIFIED)
    with rt.store._tx() as conn:
        insert_case(conn, case, {})
    sre = bearer(keys.token())
    assert client.get("/api/v1/cases", headers=sre).status_code == 200
    said = {"duration": "1h", "by": "someone else", "reason": "debugging"}
    r = client.post(f"/api/v1/cases/{case.id}/snooze", headers=sre, json=said)
    assert r.status_code == 200, r.json
    (snooze,) = [a for a in audit(rt) if a["event"] == "snooze"]
    assert snooze["by"] == f"hanmeimei (oidc {ISSUER}), said 'someone else'"
    # Resetting the breaker is an admin's.
    assert client.post("/api/v1/breaker/reset", headers=sre, json={}).status_code == 403
    admin = bearer(keys.token(preferred_username="lilei", groups=["gpu-admin"]))
    assert (
        client.post("/api/v1/breaker/reset", headers=admin, json={"reason": "checked"}).status_code
        == 200
    )
    (reset,) = [a for a in audit(rt) if a["event"] == "breaker_reset"]
    assert reset["by"] == f"lilei (oidc {ISSUER})"


def test_bad_tokens_and_the_shared_token_are_refused_counted_and_audited(rt, issuer) -> None:
    keys, _ = issuer
    client = create_app(rt).test_client()
    now = int(time.time())
    refused = {
        "expired": keys.token(exp=now - 120, iat=now - 600),
        "audience": keys.token(aud="another-service"),
        "issuer": keys.token(iss="https://evil.example.com"),
        "key": keys.token(key=keys.stranger, kid="k9"),  # a key the issuer does not list
        "invalid": keys.token(key=keys.stranger),  # right kid, wrong signature
    }
    for reason, token in refused.items():
        r = client.get("/api/v1/cases", headers=bearer(token))
        assert r.status_code == 401, (reason, r.json)
    unsigned = jwt.encode(
        {"iss": ISSUER, "aud": AUDIENCE, "sub": "x", "exp": now + 60, "iat": now},
        key=None,
        algorithm="none",
    )
    assert client.get("/api/v1/cases", headers=bearer(unsigned)).status_code == 401
    nobody = keys.token(groups=["students"])
    assert client.get("/api/v1/cases", headers=bearer(nobody)).status_code == 403  # no role
    assert client.get("/api/v1/audit", headers=bearer(TOKEN)).status_code == 403  # shared
    assert client.get("/api/v1/cases").status_code == 401
    # The shared token still delivers Alertmanager's alerts.
    alerts = {
        "version": "4",
        "status": "firing",
        "receiver": "r",
        "groupKey": "g",
        "groupLabels": {},
        "commonLabels": {},
        "commonAnnotations": {},
        "externalURL": "http://am",
        "alerts": [],
    }
    assert client.post("/api/v1/alerts", headers=bearer(TOKEN), json=alerts).status_code == 200
    failures = {a["reason"] for a in audit(rt) if a["event"] == "auth_failed"}
    assert failures >= {
        "expired",
        "audience",
        "issuer",
        "key",
        "invalid",
        "role",
        "shared_token",
        "missing",
    }
    metrics = client.get("/metrics").get_data(as_text=True)
    assert 'gpu_reclaimer_auth_failures_total{reason="expired"} 1.0' in metrics
    assert not [a for a in audit(rt) if "eyJ" in json.dumps(a)]  # no token in the audit
