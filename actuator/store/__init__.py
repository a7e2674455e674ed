"""Durable state, shared by every gunicorn worker.

Every write is one short transaction that is on disk before it returns, so a 2xx answer to
Alertmanager means the alerts are kept. Cases change state only through `transition()`, a
compare-and-set on the row's version (`transition_many`: a node pass's decisions in one
commit), so a snooze from the API and the reconciler can never both win. `database` holds
the SQLite mechanics; each other module one domain's queries.
"""

from __future__ import annotations

import os

from actuator.store.breaker import BreakerQueries
from actuator.store.cases import CaseQueries, Transition
from actuator.store.counters import CounterQueries
from actuator.store.database import SCHEMA_VERSION, Database, StoreUnavailable
from actuator.store.episodes import Episode, EpisodeQueries, Ingest
from actuator.store.guard import GuardFacts, GuardQueries, KeepKey
from actuator.store.keep_links import KeepLinkQueries
from actuator.store.keeps import AdvanceKeep, KeepQueries
from actuator.store.lease import Fence, LeaseLost, LeaseQueries
from actuator.store.pictures import PictureQueries
from actuator.store.repeats import RepeatQueries
from actuator.store.signals import SignalQueries
from actuator.store.waiters import Waiter, WaiterQueries

__all__ = [
    "SCHEMA_VERSION",
    "AdvanceKeep",
    "Database",
    "Episode",
    "Fence",
    "GuardFacts",
    "Ingest",
    "KeepKey",
    "LeaseLost",
    "Store",
    "StoreUnavailable",
    "Transition",
    "Waiter",
    "is_postgres",
    "open_store",
]


class Store(
    EpisodeQueries,
    CaseQueries,
    SignalQueries,
    GuardQueries,
    CounterQueries,
    LeaseQueries,
    BreakerQueries,
    KeepLinkQueries,
    KeepQueries,
    WaiterQueries,
    RepeatQueries,
    PictureQueries,
):
    """The actuator's store on SQLite: every domain's queries over one Database."""


def is_postgres(database: str) -> bool:
    return database.startswith(("postgresql://", "postgres://"))


def open_store(database: str | os.PathLike[str]) -> Store:
    """SQLite for a path (the single-node default), PostgreSQL for a postgresql:// URL
    (replicas sharing one database)."""
    if isinstance(database, str) and is_postgres(database):
        from actuator.store.postgres import PostgresStore

        return PostgresStore(database)
    return Store(database)
