"""A network namespace's own TCP counters: what the kernel counts for every connection in
it, those opened and closed between two readings included (a client per request).

`/proc/<pid>/net/snmp` (`Tcp: PassiveOpens`, connections accepted, IPv4 and IPv6 alike),
`/proc/<pid>/net/netstat` (`IpExt: InOctets OutOctets`) and `/proc/<pid>/net/snmp6`
(`Ip6InOctets Ip6OutOctets`) answer for the namespace `pid` lives in. They are read only
for namespaces other than the exporter's own: a container's or a pod's, which its job owns
(the host's counts every user's traffic and says nothing of one job). Two readings' delta
says that connections were accepted and how many bytes moved meanwhile, never by whom
inside the namespace: a sidecar's traffic counts too (the safe side: more work seen, never
less).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class NamespaceCounters:
    accepted: int  # TCP connections accepted since the namespace was made
    octets: int  # IP bytes received and sent (IPv4 and IPv6)


def _fields(text: str, prefix: str) -> dict[str, int]:
    """The `PREFIX: names` / `PREFIX: values` pair of lines as a mapping (snmp, netstat)."""
    rows = [line.split()[1:] for line in text.splitlines() if line.startswith(prefix + ":")]
    if len(rows) < 2 or len(rows[0]) != len(rows[1]):
        return {}
    try:
        return {name: int(value) for name, value in zip(rows[0], rows[1], strict=True)}
    except ValueError:
        return {}


def _pairs(text: str) -> dict[str, int]:
    """`name value` lines (snmp6)."""
    out: dict[str, int] = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1].isdigit():
            out[parts[0]] = int(parts[1])
    return out


def read_counters(pid: int, proc_root: str = "/proc") -> NamespaceCounters | None:
    """The counters of `pid`'s network namespace; None when unreadable or incomplete."""
    base = Path(proc_root) / str(pid) / "net"
    try:
        tcp = _fields((base / "snmp").read_text(), "Tcp")
        ip = _fields((base / "netstat").read_text(), "IpExt")
    except OSError:
        return None
    try:
        ip6 = _pairs((base / "snmp6").read_text())
    except OSError:
        ip6 = {}  # no IPv6 in the namespace: its bytes are nought
    needed = ("PassiveOpens" in tcp, "InOctets" in ip, "OutOctets" in ip)
    if not all(needed):
        return None
    octets = ip["InOctets"] + ip["OutOctets"]
    octets += ip6.get("Ip6InOctets", 0) + ip6.get("Ip6OutOctets", 0)
    return NamespaceCounters(accepted=tcp["PassiveOpens"], octets=octets)
