"""Keep links, on each backend: a link's nonce acts once, across connections (a link
clicked twice, or in two workers at once, keeps or releases one time)."""

from __future__ import annotations

import threading

from actuator.store import open_store


def test_a_link_acts_once_and_remembers_when_and_how(database: str) -> None:
    store = open_store(database)
    store.init()
    assert store.keep_link_use("n-1") is None
    assert store.use_keep_link("n-1", 7, 1000.0, "keep")
    assert not store.use_keep_link("n-1", 7, 1001.0, "release")  # a reused link
    assert store.keep_link_use("n-1") == (1000.0, "keep")
    assert store.use_keep_link("n-2", 7, 1002.0, "release")  # another link of the case


def test_two_workers_clicking_at_once_act_once(database: str) -> None:
    stores = [open_store(database) for _ in range(4)]
    for store in stores:
        store.init()
    won: list[bool] = []
    start = threading.Barrier(len(stores))

    def click(store: object) -> None:
        start.wait(10)
        won.append(store.use_keep_link("n-race", 3, 50.0, "keep"))  # type: ignore[attr-defined]

    threads = [threading.Thread(target=click, args=(s,)) for s in stores]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert sorted(won) == [False, False, False, True]
