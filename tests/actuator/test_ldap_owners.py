"""Owners from LDAP (a real slapd): entries become contacts in their language and time
zone, a name is never a filter, a wrong bind says so, and an LDAP that goes away leaves the
cached answers serving and sends new names to the SRE route with the reason."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from actuator.notifications.messages import Renderer
from actuator.notifications.notify import OwnerNotifier
from actuator.notifications.owners import Contact, OwnerDirectory
from tests.helpers.notices import NOW, notice


@pytest.fixture(scope="module")
def ldap_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    from tests.helpers.slapd import slapd

    with slapd(tmp_path_factory.mktemp("slapd")) as server:
        server.add_person(
            "lilei",
            displayName="李雷",
            mail="lilei@example.com",
            preferredLanguage="zh-CN",
            employeeNumber="lilei-wecom",
        )
        server.add_person(
            "bob", displayName="Bob", mail="bob@example.com", preferredLanguage="en-US"
        )
        yield server


def _ldap_owners(url: str, **over: Any) -> Any:
    from actuator.notifications.ldap_owners import LdapOwners
    from tests.helpers.slapd import PEOPLE, READER_DN, READER_PASSWORD

    settings: dict[str, Any] = dict(
        bind_dn=READER_DN,
        password=READER_PASSWORD,
        attributes={"wecom": "employeeNumber"},
        timezone="Asia/Shanghai",
        timeout=2.0,
    )
    return LdapOwners(url, PEOPLE, **(settings | over))


def test_ldap_entries_become_contacts_in_their_language(ldap_server) -> None:
    owners = _ldap_owners(ldap_server.url)
    lilei = owners.lookup("lilei")
    assert lilei == Contact(
        name="李雷",
        email="lilei@example.com",
        wecom="lilei-wecom",
        language="zh-CN",
        timezone="Asia/Shanghai",
    )
    assert owners.lookup("bob").language == "en"  # en-US
    assert owners.lookup("nobody") is None
    assert owners.lookup("*") is None  # escaped: not a wildcard over every entry
    assert owners.lookup("lilei)(uid=*") is None
    wrong = _ldap_owners(ldap_server.url, password="guess")
    assert wrong.lookup("lilei") is None and "invalidCredentials" in wrong.last_error


def test_an_unreachable_ldap_falls_back_to_the_sre_route_and_says_why(tmp_path: Path) -> None:
    from tests.helpers.slapd import slapd

    with slapd(tmp_path / "slapd") as server:
        server.add_person("lilei", mail="lilei@example.com", preferredLanguage="zh")
        owners = _ldap_owners(server.url)
        assert owners.lookup("lilei").email == "lilei@example.com"
    # slapd is gone: the cached answer still serves, a new name falls back with the reason
    assert owners.lookup("lilei").email == "lilei@example.com"
    directory = OwnerDirectory(sre=Contact(name="GPU SRE", email="sre@example.com"))

    class Sent:
        name = "email"
        to: list[str] = []

        def send(self, message: Any, contact: Contact) -> Any:
            from actuator.notifications.channels import Delivery

            self.to.append(contact.email or "")
            return Delivery(True, "accepted")

    channel = Sent()
    notifier = OwnerNotifier(
        directory, {"email": channel}, Renderer(), clock=lambda: NOW, ldap=owners
    )
    result = notifier.send(notice(user="hanmeimei", project="none"), dry_run=False)
    assert result.delivered and channel.to == ["sre@example.com"]
    assert "to sre GPU SRE (LDAP ldap://127.0.0.1" in result.detail
    assert notifier.send(notice(user="lilei"), dry_run=False).delivered
    assert channel.to[-1] == "lilei@example.com"  # from the cache
