"""GET /evidence/<token>.png: one evidence picture, for whoever holds its signed link
(chat readers, the keep page). The link is the only authority it needs or gives."""

from __future__ import annotations

from flask import Blueprint, Response

from actuator.evidence.links import PictureLinks
from actuator.keeplinks import LinkError
from actuator.store import Store, StoreUnavailable

HEADERS = {
    "Content-Security-Policy": "default-src 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "private, max-age=86400",  # a picture never changes once drawn
}


def picture_blueprint(store: Store, links: PictureLinks) -> Blueprint:
    page = Blueprint("evidence", __name__)

    @page.get("/evidence/<token>.png")
    def picture(token: str) -> Response:
        try:
            ref = links.verify(token)
        except LinkError as exc:
            return _text(403, str(exc))
        try:
            png = store.picture(ref.case_id, ref.picture_id)
        except StoreUnavailable as exc:
            return _text(503, str(exc))
        if png is None:  # pruned with its case
            return _text(404, "this picture is no longer kept")
        response = Response(png, status=200, mimetype="image/png")
        response.headers.update(HEADERS)
        return response

    return page


def _text(status: int, text: str) -> Response:
    response = Response(text + "\n", status=status, mimetype="text/plain")
    response.headers.update({**HEADERS, "Cache-Control": "no-store"})
    return response
