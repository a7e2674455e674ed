"""Who is warned: the user, else the owner the workload names, else the project's contact,
else the SRE route, each only where it can be reached on a channel the site configured;
with none of them, nobody (the notice is undeliverable and the escalation waits)."""

from __future__ import annotations

from pathlib import Path

import pytest

from actuator.notifications.owners import Contact, DirectoryError, OwnerDirectory
from tests.helpers.notices import LILEI

DIRECTORY = """
users:
  alice: {name: 李雷, email: alice@example.com, wecom: lilei, language: zh-CN,
          timezone: Asia/Shanghai}
  bob: {slack: U024BE7LH, email: bob@example.com, channels: [slack]}
  carol: {name: Carol}
projects:
  vision: {name: Vision team, email: vision-oncall@example.com}
sre: {name: GPU SRE, slack: S0123SRE}
"""


@pytest.fixture
def directory(tmp_path: Path) -> OwnerDirectory:
    path = tmp_path / "owners.yml"
    path.write_text(DIRECTORY, encoding="utf-8")
    return OwnerDirectory.load(path)


def test_the_user_first_on_every_channel_configured_for_them(directory: OwnerDirectory) -> None:
    found = directory.resolve("alice", "vision", {"email", "wecom", "slack"})
    assert found is not None and found.via == "user"
    assert found.channels == ("email", "wecom")  # the order channels are listed in
    assert found.contact.language == "zh-CN" and found.contact.timezone == "Asia/Shanghai"
    only_wecom = directory.resolve("alice", "vision", {"wecom"})
    assert only_wecom is not None and only_wecom.channels == ("wecom",)


def test_a_contacts_own_channel_list_is_kept(directory: OwnerDirectory) -> None:
    found = directory.resolve("bob", None, {"email", "slack"})
    assert found is not None and found.channels == ("slack",)  # not e-mail: bob chose


def test_unreachable_or_unknown_users_fall_back_in_order(directory: OwnerDirectory) -> None:
    # carol has no address: the project's contact; no project: the SRE route.
    project = directory.resolve("carol", "vision", {"email", "slack"})
    assert project is not None and project.via == "project" and project.channels == ("email",)
    sre = directory.resolve("dave", "unknown-project", {"email", "slack"})
    assert sre is not None and sre.via == "sre" and sre.contact.name == "GPU SRE"
    # The named owner (a pod's annotation) comes before the project.
    named = Contact(name="Pod owner", email="owner@example.com")
    via_name = directory.resolve("carol", "vision", {"email"}, named=named)
    assert via_name is not None and via_name.contact == named
    # Nobody reachable on what the site configured: nobody, never a guess.
    assert directory.resolve("dave", None, {"dingtalk"}) is None


def test_the_file_wins_over_the_directory_service_for_the_same_name(
    directory: OwnerDirectory,
) -> None:
    asked: list[str] = []

    def lookup(user: str) -> Contact | None:
        asked.append(user)
        return Contact(email=f"{user}@ldap.example.com")

    alice = directory.resolve("alice", None, {"email"}, lookup=lookup)
    assert alice is not None and alice.contact.email == "alice@example.com" and asked == []
    erin = directory.resolve("erin", None, {"email"}, lookup=lookup)
    assert erin is not None and erin.contact.email == "erin@ldap.example.com"
    assert asked == ["erin"]


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("users: {a: {timezone: Mars/Olympus}}", "unknown time zone 'Mars/Olympus'"),
        ("users: {a: {email: not-an-address}}", "users.a.email"),
        ("users: {a: {pager: 123}}", "users.a.pager"),
        ("users: {a: {language: fr}}", "users.a.language"),
        ("users: [a, b", "owner directory"),
    ],
)
def test_a_bad_directory_is_named_with_the_key(tmp_path: Path, text: str, says: str) -> None:
    path = tmp_path / "owners.yml"
    path.write_text(text)
    with pytest.raises(DirectoryError) as error:
        OwnerDirectory.load(path)
    assert says in str(error.value) and str(path) in str(error.value)


def test_a_missing_owner_falls_back_to_the_project_then_the_sre_route() -> None:
    directory = OwnerDirectory(
        users={"lilei": LILEI, "mute": Contact(name="no address")},
        projects={"vision": Contact(name="Vision on-call", email="vision@example.com")},
        sre=Contact(name="GPU SRE", slack="S0SRE"),
    )
    assert directory.resolve("lilei", "vision", {"email", "wecom"}).via == "user"
    assert directory.resolve("lilei", "vision", {"wecom"}).channels == ("wecom",)
    assert directory.resolve("nobody", "vision", {"email"}).via == "project"
    assert directory.resolve("mute", "vision", {"email"}).via == "project"  # no address
    assert directory.resolve("nobody", "other", {"email", "slack"}).via == "sre"
    assert directory.resolve("nobody", "other", {"email"}) is None  # never silently nobody


def test_a_directory_file_with_a_mistake_names_it(tmp_path: Path) -> None:
    path = tmp_path / "owners.yml"
    path.write_text("users:\n  alice: {email: alice@example.com, timezone: Mars/Olympus}\n")
    with pytest.raises(
        DirectoryError, match=r"(?s)owners.yml.*users.alice.timezone: .*unknown time zone .Mars"
    ):
        OwnerDirectory.load(path)
