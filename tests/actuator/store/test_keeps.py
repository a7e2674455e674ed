"""Keeps asked before any case existed, on each backend: by process identity (a reused PID
or another boot is another process), one active per process, expiring, listed per owner,
revocable once."""

from __future__ import annotations

from actuator.store import open_store

NODE, BOOT = "gpu-07", "boot-1"


def test_a_keep_belongs_to_one_process_and_expires(database: str) -> None:
    store = open_store(database)
    store.init()
    keep = store.add_keep(NODE, 4242, 1000, BOOT, 1001, until=2000.0, now=1000.0, by="alice")
    assert keep.by == "alice" and keep.until == 2000.0 and not keep.revoked
    assert store.active_keep(NODE, 4242, 1000, BOOT, now=1999.0) == keep
    assert store.active_keep(NODE, 4242, 1000, BOOT, now=2000.0) is None  # expired
    # The same PID started later (other start ticks), after a reboot, or on another node:
    # another process, not kept.
    assert store.active_keep(NODE, 4242, 1001, BOOT, now=1500.0) is None
    assert store.active_keep(NODE, 4242, 1000, "boot-2", now=1500.0) is None
    assert store.active_keep("gpu-08", 4242, 1000, BOOT, now=1500.0) is None


def test_a_new_keep_replaces_the_active_one(database: str) -> None:
    store = open_store(database)
    store.init()
    first = store.add_keep(NODE, 4242, 1000, BOOT, 1001, until=5000.0, now=1000.0, by="alice")
    second = store.add_keep(NODE, 4242, 1000, BOOT, 1001, until=3000.0, now=1100.0, by="alice")
    assert second.id != first.id
    assert store.active_keep(NODE, 4242, 1000, BOOT, now=1200.0) == second  # shorter wins
    assert [k.id for k in store.list_keeps(NODE, now=1200.0)] == [second.id]


def test_keeps_are_listed_per_owner_and_revoked_once(database: str) -> None:
    store = open_store(database)
    store.init()
    alice = store.add_keep(NODE, 1, 10, BOOT, 1001, until=3000.0, now=1000.0, by="alice")
    bob = store.add_keep(NODE, 2, 20, BOOT, 1002, until=2000.0, now=1000.0, by="bob")
    store.add_keep("gpu-08", 3, 30, BOOT, 1001, until=3000.0, now=1000.0, by="alice")
    assert [k.id for k in store.list_keeps(NODE, now=1500.0)] == [bob.id, alice.id]
    assert [k.id for k in store.list_keeps(NODE, now=1500.0, uid=1001)] == [alice.id]
    assert store.revoke_keep(alice.id) and not store.revoke_keep(alice.id)
    assert store.active_keep(NODE, 1, 10, BOOT, now=1500.0) is None
    assert [k.id for k in store.list_keeps(NODE, now=1500.0)] == [bob.id]
