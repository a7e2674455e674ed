"""Keep links: signed, expiring, one case each, nothing else; a tampered or foreign link
and an old one are refused with a message safe to show; the form's CSRF value belongs to
its link."""

from __future__ import annotations

import base64
import json

import pytest

from actuator.keeplinks import KeepLinks, LinkError, link_key


def _links(now: list[float], secret: str = "s3cret", ttl: float = 3600) -> KeepLinks:
    return KeepLinks(
        link_key(secret), "https://gpu.example.org/reclaimer/", ttl=ttl, clock=lambda: now[0]
    )


def test_a_link_names_its_case_and_a_fresh_nonce_under_the_public_url() -> None:
    links = _links([1_000_000.0])
    url = links.url(42)
    assert url.startswith("https://gpu.example.org/reclaimer/keep/")
    token = url.rsplit("/", 1)[1]
    claim = links.verify(token)
    assert claim.case_id == 42
    assert links.verify(links.token(42)).nonce != claim.nonce  # each link its own nonce
    assert links.origin == "https://gpu.example.org"


def test_an_old_link_expires_and_the_message_says_so() -> None:
    now = [1_000_000.0]
    links = _links(now)
    token = links.token(7)
    now[0] += 3599
    assert links.verify(token).case_id == 7
    now[0] += 2
    with pytest.raises(LinkError, match="expired"):
        links.verify(token)


def test_a_changed_or_foreign_link_is_refused() -> None:
    now = [1_000_000.0]
    links = _links(now)
    token = links.token(7)
    # Another case id in the payload, the signature kept: the signature fails.
    _, rest = token.split(".", 1)
    forged = base64.urlsafe_b64encode(json.dumps({"c": 8, "n": "x"}).encode()).rstrip(b"=")
    with pytest.raises(LinkError, match="not valid"):
        links.verify(forged.decode() + "." + rest)
    with pytest.raises(LinkError, match="not valid"):
        links.verify(token[:-2] + ("AA" if not token.endswith("AA") else "BB"))
    # Signed by another actuator (another secret): not ours.
    with pytest.raises(LinkError, match="not valid"):
        _links(now, secret="another").verify(token)
    with pytest.raises(LinkError):
        links.verify("")


def test_a_signed_payload_that_is_not_a_claim_is_refused() -> None:
    links = _links([1_000_000.0])
    for payload in ({"c": "7", "n": "x"}, {"c": 7}, [7, "x"], "7"):
        with pytest.raises(LinkError, match="not valid"):
            links.verify(str(links.serializer.dumps(payload)))


def test_the_csrf_value_belongs_to_its_link_and_key() -> None:
    links = _links([1_000_000.0])
    one, two = links.token(1), links.token(2)
    assert links.check_csrf(one, links.csrf(one))
    assert not links.check_csrf(one, links.csrf(two))
    assert not links.check_csrf(one, "")
    assert not _links([1_000_000.0], secret="another").check_csrf(one, links.csrf(one))
