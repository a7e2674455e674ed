"""GET /evidence/<token>.png: the picture for a valid link, with headers that keep it
inert; a changed link refused; a pruned picture gone."""

from __future__ import annotations

from pathlib import Path

from flask import Flask

from actuator.evidence.links import PictureLinks, PictureRef
from actuator.evidence.page import picture_blueprint
from actuator.keeplinks import link_key
from actuator.store import Store

PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(256))


def test_a_picture_is_served_to_its_link_only(tmp_path: Path) -> None:
    store = Store(tmp_path / "store.db")
    store.init()
    links = PictureLinks(link_key("token"), "https://reclaimer.example.com", ttl=3600)
    app = Flask("test")
    app.register_blueprint(picture_blueprint(store, links))
    client = app.test_client()
    picture = store.save_picture(7, 1.0, PNG)
    path = links.path(PictureRef(7, picture))
    served = client.get(path)
    assert served.status_code == 200 and served.data == PNG
    assert served.headers["Content-Type"] == "image/png"
    assert served.headers["X-Content-Type-Options"] == "nosniff"
    assert served.headers["Content-Security-Policy"] == "default-src 'none'"
    changed = path[:-6] + ("A" if path[-6] != "A" else "B") + ".png"
    assert client.get(changed).status_code == 403
    # A valid link to a picture of another case, or one pruned: not found.
    assert client.get(links.path(PictureRef(8, picture))).status_code == 404
    assert client.get(links.path(PictureRef(7, picture + 1))).status_code == 404
