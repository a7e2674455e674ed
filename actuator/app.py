"""The actuator's Flask app, assembled: the auth object, the API's blueprints (actuator/api/),
the keep and evidence pages where configured, and the error handlers that keep every answer
a reason (4xx) or a retry (503), never a bare 500."""

from __future__ import annotations

import logging

from flask import Flask, Response, request
from werkzeug.exceptions import HTTPException

from actuator.api.admin import admin_blueprint
from actuator.api.alerts import alerts_blueprint
from actuator.api.auth import WEBHOOK, Auth
from actuator.api.cases import cases_blueprint
from actuator.api.health import health_blueprint
from actuator.api.responses import error
from actuator.audit import AuditError
from actuator.runtime import Runtime
from actuator.store import StoreUnavailable

log = logging.getLogger(__name__)


def create_app(rt: Runtime) -> Flask:
    app = Flask("actuator")
    app.config["MAX_CONTENT_LENGTH"] = rt.config.server.max_body
    app.json.sort_keys = False  # type: ignore[attr-defined]
    auth = Auth(rt)
    app.before_request(auth.guard)
    app.register_blueprint(alerts_blueprint(rt, auth))
    app.register_blueprint(cases_blueprint(rt, auth))
    app.register_blueprint(admin_blueprint(rt, auth))
    app.register_blueprint(health_blueprint(rt))
    if rt.links is not None:
        from actuator.keep_page import keep_blueprint

        app.register_blueprint(keep_blueprint(rt, rt.links, rt.config.notifier.keep_max))
    if rt.pictures is not None:
        from actuator.evidence.page import picture_blueprint

        app.register_blueprint(picture_blueprint(rt.store, rt.pictures))

    @app.errorhandler(HTTPException)
    def _http_error(exc: HTTPException) -> tuple[Response, int]:
        code = exc.code or 500
        if request.path == WEBHOOK:
            auth.count(code)
        return error(code, exc.description or exc.name)

    @app.errorhandler(StoreUnavailable)
    def _store_down(exc: StoreUnavailable) -> tuple[Response, int]:
        log.error("store unavailable: %s", exc)
        return error(503, "store unavailable, retry later")

    @app.errorhandler(AuditError)
    def _audit_down(exc: AuditError) -> tuple[Response, int]:
        log.error("audit log: %s", exc)
        return error(503, f"audit log unavailable, retry later: {exc}")

    @app.errorhandler(Exception)
    def _unexpected(exc: Exception) -> tuple[Response, int]:
        """Never a bare 500: a dependency that failed in a way nobody foresaw is 'away'
        (503, with the reason, and the traceback in the log for the SRE)."""
        log.exception("%s %s failed", request.method, request.path)
        return error(503, f"unavailable: {type(exc).__name__}: {exc}"[:300])

    return app
