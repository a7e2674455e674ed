"""The circuit breaker's one row, on each backend: closed until opened, each move reported
once (a second opener learns it was already open), and the first reason kept."""

from __future__ import annotations

from actuator.store import open_store


def test_the_breaker_moves_once_each_way_and_keeps_its_first_reason(database: str) -> None:
    store = open_store(database)
    store.init()
    assert store.breaker() == (False, None, "")
    assert store.set_breaker(True, 100.0, "5 SIGTERMs in a minute")
    assert not store.set_breaker(True, 101.0, "another limit")  # already open
    assert store.breaker() == (True, 100.0, "5 SIGTERMs in a minute")
    assert store.set_breaker(False, 200.0, "reset by sre-ana")
    assert not store.set_breaker(False, 201.0, "reset again")
    assert store.breaker() == (False, 200.0, "reset by sre-ana")


def test_another_connection_sees_the_breaker_open(database: str) -> None:
    first, second = open_store(database), open_store(database)
    first.init()
    second.init()
    first.set_breaker(True, 100.0, "limit")
    assert second.breaker()[0] is True
    assert not second.set_breaker(True, 100.5, "limit")  # one opener wins, across workers
