"""Which optional part of the package a missing library belongs to, so that a command run
without it says what to install (never a traceback): the exporter and the simulation need
the core dependencies only; everything else is an extra (pyproject.toml)."""

from __future__ import annotations

# top-level import name -> the extra that installs it
EXTRA_OF = {
    "flask": "actuator",
    "asgiref": "actuator",
    "requests": "actuator",
    "jinja2": "actuator",
    "markdown": "actuator",
    "prometheus_api_client": "actuator",
    "cryptography": "actuator",
    "gunicorn": "agent",
    "werkzeug": "agent",
    "psycopg": "postgres",
    "ldap3": "ldap",
    "jwt": "oidc",
    "kubernetes": "kubernetes",
    "grpc": "kubernetes",
    "google": "kubernetes",
    "hostlist": "slurm-rest",
}


def missing_extra(error: ModuleNotFoundError) -> str | None:
    """The sentence to print for a library an extra would have installed, else None."""
    top = (error.name or "").partition(".")[0]
    extra = EXTRA_OF.get(top)
    if extra is None:
        return None
    also = " (the 'actuator' extra includes it)" if extra == "agent" else ""
    return (
        f"this needs the {extra!r} extra{also} ({top} is not installed): "
        f"pip install 'gpu-reclaimer[{extra}]'"
    )
