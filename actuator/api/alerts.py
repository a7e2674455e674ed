"""POST /api/v1/alerts: Alertmanager's webhook. The body is parsed and validated here
(content type, size, JSON without duplicate keys, the v4 payload); receiving it is
`operations.receive_alerts`, which any transport can call."""

from __future__ import annotations

import json
import time

from flask import Blueprint, Response, jsonify, request
from pydantic import ValidationError
from werkzeug.exceptions import RequestEntityTooLarge

from actuator import operations
from actuator.api.auth import Auth
from actuator.api.responses import error, validation_details
from actuator.models import AlertmanagerPayload, reject_duplicate_keys
from actuator.runtime import Runtime


def alerts_blueprint(rt: Runtime, auth: Auth) -> Blueprint:
    api = Blueprint("alerts", __name__)

    @api.post("/api/v1/alerts")
    def alerts() -> tuple[Response, int]:
        started = time.perf_counter()
        if rt.deliveries is not None:
            rt.deliveries.mark()  # an authenticated delivery: the reconciler waits for it
        if request.mimetype != "application/json":
            auth.count(415)
            return error(415, "Content-Type must be application/json")
        try:
            raw = request.get_data(cache=False)
        except RequestEntityTooLarge:
            auth.count(413)
            return error(413, f"body larger than {rt.config.server.max_body} bytes")
        try:
            data = json.loads(raw, object_pairs_hook=reject_duplicate_keys)
        except (ValueError, RecursionError) as exc:
            auth.count(400)
            return error(400, f"body is not valid JSON: {str(exc)[:200]}")
        try:
            payload = AlertmanagerPayload.model_validate(data)
        except ValidationError as exc:
            auth.count(422)
            return error(422, "not an Alertmanager v4 payload", details=validation_details(exc))
        ingest = operations.receive_alerts(rt, payload)
        return jsonify(
            {
                "status": "accepted",
                "received": ingest.received,
                "recorded": ingest.recorded,
                "ignored": ingest.ignored,
                "rejected": ingest.rejected,
                "truncated": payload.truncatedAlerts,
                "took_ms": round((time.perf_counter() - started) * 1000, 3),
            }
        ), 200

    return api
