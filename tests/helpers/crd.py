"""A CustomResourceDefinition's OpenAPI schema as JSON Schema, to validate objects offline."""

from __future__ import annotations

from pathlib import Path
from typing import Any

KUBE = Path(__file__).resolve().parents[2] / "deploy" / "kubernetes"


def crd_schema(crd: dict[str, Any], version: str) -> dict[str, Any]:
    (entry,) = [v for v in crd["spec"]["versions"] if v["name"] == version]
    return _openapi_to_jsonschema(entry["schema"]["openAPIV3Schema"])


def _openapi_to_jsonschema(node: Any) -> Any:
    """OpenAPI v3 structural schema -> JSON Schema: int-or-string, as the API server reads it."""
    if isinstance(node, dict):
        out = {
            k: _openapi_to_jsonschema(v)
            for k, v in node.items()
            if not k.startswith("x-kubernetes-")
        }
        if isinstance(out.get("pattern"), str) and "(?i)" in out["pattern"][1:]:
            # Go's regexp takes `^(?i)...`; Python's wants global flags first.
            out["pattern"] = "(?i)" + out["pattern"].replace("(?i)", "")
        if node.get("x-kubernetes-int-or-string"):
            out.pop("type", None)
            out["anyOf"] = [{"type": "integer"}, {"type": "string"}]
        return out
    if isinstance(node, list):
        return [_openapi_to_jsonschema(v) for v in node]
    return node
