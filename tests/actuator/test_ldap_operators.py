"""Operators who sign in with their directory password (actuator/ldap_operators.py), against
a real OpenLDAP (slapd on loopback): a bind as the person, groups as roles, the API's
decisions and audit under that name; and each way a sign-in is refused, with the directory's
word for it, never a guess: a wrong or empty password, a name that would change the DN, a
directory that cannot be reached."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from actuator.app import create_app
from actuator.ldap_operators import LdapBindVerifier
from actuator.models import State
from actuator.operators import AuthError, Operators
from actuator.store.cases import insert_case
from tests.helpers.api import make_runtime
from tests.helpers.cases import make_case
from tests.helpers.slapd import GROUPS, PEOPLE
from tests.support import free_port


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def audit(rt: Any) -> list[dict[str, Any]]:
    path = Path(rt.config.storage.audit_log)
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


@pytest.fixture(scope="module")
def directory(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    from tests.helpers.slapd import slapd

    with slapd(tmp_path_factory.mktemp("slapd")) as server:
        server.add_person("wangfang", userPassword="correct horse")
        server.add_person("zhaolei", userPassword="battery staple")
        server.add_person("student", userPassword="letmein")
        server.add_person("liqiang", userPassword="correct horse")
        server.add_group("gpu-sre", "wangfang", "zhaolei", "liqiang")
        server.add_group("gpu-admin", "zhaolei")
        yield server


def basic(user: str, password: str) -> dict[str, str]:
    import base64

    return {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}


def test_people_sign_in_with_their_directory_password_and_groups_give_roles(
    tmp_path: Path, directory: Any
) -> None:
    runtime = make_runtime(tmp_path)
    ldap = LdapBindVerifier(
        directory.url,
        f"uid={{user}},{PEOPLE}",
        group_base=GROUPS,
        roles={"sre": ["gpu-sre"], "admin": ["gpu-admin"]},
    )
    runtime.operators = Operators(ldap=ldap)
    client = create_app(runtime).test_client()
    case = make_case(id=0, state=State.NOTIFIED)
    with runtime.store._tx() as conn:
        insert_case(conn, case, {})
    sre = basic("wangfang", "correct horse")
    assert client.get("/api/v1/cases", headers=sre).status_code == 200
    r = client.post(f"/api/v1/cases/{case.id}/snooze", headers=sre, json={"duration": "1h"})
    assert r.status_code == 200, r.json
    (snooze,) = [a for a in audit(runtime) if a["event"] == "snooze"]
    assert snooze["by"] == f"wangfang (ldap {directory.url})"
    assert client.post("/api/v1/breaker/reset", headers=sre, json={}).status_code == 403
    admin = basic("zhaolei", "battery staple")
    assert (
        client.post("/api/v1/breaker/reset", headers=admin, json={"reason": "ok"}).status_code
        == 200
    )
    # Refused: a wrong password, an empty one (an anonymous bind LDAP would let through), a
    # name that would change the DN, a person without a role, a bearer token here.
    for headers, code in (
        (basic("wangfang", "wrong"), 401),
        (basic("wangfang", ""), 401),
        (basic("*)(uid=*", "x"), 401),
        (basic("student", "letmein"), 403),
        (bearer("some-token"), 401),
    ):
        assert client.get("/api/v1/cases", headers=headers).status_code == code, headers
    reasons = [a["reason"] for a in audit(runtime) if a["event"] == "auth_failed"]
    assert reasons.count("password") == 1 and "role" in reasons and "scheme" in reasons
    assert not [a for a in audit(runtime) if "horse" in json.dumps(a)]  # no password kept


def _verifier(url: str, **over: Any) -> LdapBindVerifier:
    return LdapBindVerifier(
        url, f"uid={{user}},{PEOPLE}", group_base=GROUPS, roles={"sre": ["gpu-sre"]}, **over
    )


def test_a_bind_names_the_person_and_is_remembered_for_a_while(directory: Any) -> None:
    now = [0.0]
    ldap = _verifier(directory.url, cache_ttl=60, clock=lambda: now[0])
    who = ldap.verify("liqiang", "correct horse")
    assert (who.name, who.subject, who.roles) == ("liqiang", f"uid=liqiang,{PEOPLE}", {"sre"})
    assert (who.issuer, who.method) == (directory.url, "ldap")
    assert ldap.verify("student", "letmein").roles == frozenset()  # known, no role
    directory.set_password("liqiang", "new horse")
    assert ldap.verify("liqiang", "correct horse") == who  # within the minute: remembered
    now[0] = 60.0
    with pytest.raises(AuthError) as old:  # then asked again: the directory's word
        ldap.verify("liqiang", "correct horse")
    assert old.value.reason == "password"
    assert ldap.verify("liqiang", "new horse").name == "liqiang"


@pytest.mark.parametrize(
    ("user", "password", "reason"),
    [
        ("wangfang", "wrong", "password"),
        ("nobody-here", "x", "password"),
        ("wangfang", "", "invalid"),  # an anonymous bind, which LDAP lets through
        ("*)(uid=*", "x", "invalid"),
        ("uid=wangfang,ou=people", "x", "invalid"),
        ("a" * 65, "x", "invalid"),
    ],
)
def test_each_refusal_has_its_reason(directory: Any, user: str, password: str, reason: str) -> None:
    with pytest.raises(AuthError) as refused:
        _verifier(directory.url).verify(user, password)
    assert refused.value.reason == reason


def test_a_directory_that_cannot_be_reached_refuses_everyone() -> None:
    ldap = _verifier(f"ldap://127.0.0.1:{free_port()}", timeout=1)
    with pytest.raises(AuthError) as down:
        ldap.verify("wangfang", "correct horse")
    assert down.value.reason == "ldap" and "cannot be reached" in str(down.value)


def test_the_person_s_dn_must_have_a_place_for_the_name() -> None:
    with pytest.raises(ValueError, match=r"must contain \{user\}"):
        LdapBindVerifier("ldap://x", "uid=fixed,ou=people", group_base=GROUPS)
