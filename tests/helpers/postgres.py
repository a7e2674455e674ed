"""A real PostgreSQL server on loopback for one test session (actuator/demo/postgres.py,
which chaos runs use too)."""

from __future__ import annotations

from actuator.demo.postgres import PgServer, pg_bin, postgres_server

__all__ = ["PgServer", "pg_bin", "postgres_server"]
