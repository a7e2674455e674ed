"""Picture links: signed, read-only, expiring; a keep link's token is never a picture's."""

from __future__ import annotations

import pytest

from actuator.evidence.links import PictureLinks, PictureRef
from actuator.keeplinks import KeepLinks, LinkError, link_key

KEY = link_key("token")


def test_a_picture_link_shows_one_picture_and_is_no_keep_link() -> None:
    now = [1000.0]
    links = PictureLinks(KEY, "https://reclaimer.example.com/", ttl=3600, clock=lambda: now[0])
    url = links.url(PictureRef(3, 9))
    assert url.startswith("https://reclaimer.example.com/evidence/") and url.endswith(".png")
    token = url.rsplit("/", 1)[1].removesuffix(".png")
    assert links.verify(token) == PictureRef(3, 9)
    with pytest.raises(LinkError, match="not valid"):
        links.verify(token[:-2] + ("A" if token[-2] != "A" else "B") + token[-1])
    keep = KeepLinks(KEY, "https://reclaimer.example.com").token(3)
    with pytest.raises(LinkError, match="not valid"):
        links.verify(keep)  # a keep link's token is not a picture's
    now[0] += 3601
    with pytest.raises(LinkError, match="expired"):
        links.verify(token)
