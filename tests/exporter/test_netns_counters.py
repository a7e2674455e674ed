"""A namespace's own TCP counters: parsed from the kernel's files, and anything malformed
is unreadable, never zero."""

from __future__ import annotations

import os
from pathlib import Path

from exporter.netns_counters import read_counters

SNMP = (
    "Ip: Forwarding DefaultTTL\nIp: 1 64\n"
    "Tcp: RtoAlgorithm ActiveOpens PassiveOpens CurrEstab\nTcp: 1 10 42 3\n"
)
NETSTAT = "IpExt: InNoRoutes InOctets OutOctets\nIpExt: 0 1000 500\n"
SNMP6 = "Ip6InReceives 7\nIp6InOctets 300\nIp6OutOctets 200\n"


def _proc(
    tmp_path: Path, snmp: str = SNMP, netstat: str = NETSTAT, snmp6: str | None = SNMP6
) -> str:
    net = tmp_path / "77" / "net"
    net.mkdir(parents=True)
    (net / "snmp").write_text(snmp)
    (net / "netstat").write_text(netstat)
    if snmp6 is not None:
        (net / "snmp6").write_text(snmp6)
    return str(tmp_path)


def test_the_counters_of_a_namespace(tmp_path: Path) -> None:
    found = read_counters(77, _proc(tmp_path))
    assert found is not None and (found.accepted, found.octets) == (42, 2000)


def test_without_ipv6_its_bytes_are_nought(tmp_path: Path) -> None:
    found = read_counters(77, _proc(tmp_path, snmp6=None))
    assert found is not None and found.octets == 1500


def test_malformed_counters_are_unreadable(tmp_path: Path) -> None:
    short = "Tcp: ActiveOpens PassiveOpens\nTcp: 10\n"
    assert read_counters(77, _proc(tmp_path / "a", snmp=short)) is None
    assert read_counters(77, _proc(tmp_path / "b", snmp="Tcp: PassiveOpens\nTcp: x\n")) is None
    assert read_counters(77, _proc(tmp_path / "c", netstat="IpExt: InOctets\nIpExt: 5\n")) is None
    assert read_counters(77, str(tmp_path / "none")) is None


def test_this_hosts_own_counters_read(tmp_path: Path) -> None:
    found = read_counters(os.getpid())
    assert found is not None and found.accepted >= 0 and found.octets >= 0
