"""Which node an alert names, and the hands that act there.

`NodeDirectory` answers the reconciler's "the node's `Node`, or nothing": the node the
actuator runs on (in-process), else an agent found by, in this order, the static map, the
exporters Prometheus scrapes (the agent listens beside each), and the URL template. A node
no source knows is refused `unknown_node` by the reconciler. Node names are
checked before they go into a URL, so a forged `node` label cannot point the actuator at
another host (and mutual TLS would refuse that host anyway).
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING

from actuator.fleet.remote import ClientTls, RemoteNode
from actuator.node import Node

if TYPE_CHECKING:
    from actuator.config import AgentsSettings

log = logging.getLogger(__name__)

# A host name (RFC 1123 labels), which is also what the exporter reports as `node`.
NODE_NAME = re.compile(
    r"(?=.{1,253}$)[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
    r"(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*"
)


def valid_node_name(name: str) -> bool:
    return NODE_NAME.fullmatch(name) is not None


class PrometheusAgents:
    """node -> agent URL from the exporters Prometheus already scrapes: every exporter
    reports its `node` on `gpu_info`, and its node's agent listens beside it on
    `agent_port`. (Prometheus does not scrape the agents themselves: they admit only the
    actuator's certificate.) Refreshed now and then; kept, not emptied, when Prometheus is
    away, so a Prometheus outage never turns known nodes into unknown ones."""

    def __init__(
        self,
        url: str,
        job: str,
        *,
        agent_port: int = 9837,
        refresh: float = 30.0,
        timeout: float = 5.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        from prometheus_api_client import PrometheusConnect

        self._prom = PrometheusConnect(url=url, disable_ssl=False, timeout=timeout)
        self.job = job
        self.agent_port = agent_port
        self.refresh = refresh
        self.clock = clock
        self._lock = threading.Lock()
        self._at = float("-inf")
        self._urls: dict[str, str] = {}

    def urls(self) -> dict[str, str]:
        with self._lock:
            if self.clock() - self._at < self.refresh:
                return self._urls
            self._at = self.clock()
        try:
            series = self._prom.custom_query(
                f'count by (node, instance) (gpu_info{{job="{self.job}"}})'
            )
        except Exception as exc:  # the library raises several kinds; keep what we had
            log.warning("agent discovery through Prometheus failed: %s", exc)
            return self._urls
        found: dict[str, str] = {}
        for s in series:
            labels = s.get("metric", {})
            node, host = labels.get("node", ""), _host(labels.get("instance", ""))
            if valid_node_name(node) and host and node not in found:
                found[node] = f"https://{host}:{self.agent_port}"
        with self._lock:
            self._urls = found
        return found


def _host(instance: str) -> str:
    """The host of a scrape target's `host:port` (or `[v6]:port`)."""
    if instance.startswith("["):
        return instance.partition("]")[0] + "]"
    host = instance.rpartition(":")[0] if ":" in instance else instance
    return host if valid_node_name(host) or _is_ipv4(host) else ""


def _is_ipv4(text: str) -> bool:
    parts = text.split(".")
    return len(parts) == 4 and all(p.isascii() and p.isdigit() and int(p) < 256 for p in parts)


class AgentResolver:
    def __init__(
        self,
        tls: ClientTls,
        *,
        static: Mapping[str, str] | None = None,
        url_template: str | None = None,
        prometheus: PrometheusAgents | None = None,
        timeout: float = 5.0,
    ) -> None:
        self.tls = tls
        self.static = dict(static or {})
        self.url_template = url_template
        self.prometheus = prometheus
        self.timeout = timeout
        self._nodes: dict[tuple[str, str], RemoteNode] = {}
        self._lock = threading.Lock()

    def url(self, name: str) -> str | None:
        if name in self.static:
            return self.static[name]
        if not valid_node_name(name):
            return None
        if self.prometheus is not None:
            found = self.prometheus.urls().get(name)
            if found:
                return found
        if self.url_template is not None:
            return self.url_template.format(node=name)
        return None

    def get(self, name: str) -> RemoteNode | None:
        url = self.url(name)
        if url is None:
            return None
        with self._lock:
            node = self._nodes.get((name, url))
            if node is None:
                node = RemoteNode(name, url, self.tls, timeout=self.timeout)
                self._nodes[(name, url)] = node
            return node


class NodeDirectory:
    """The reconciler's nodes: fixed ones (the local node, or test doubles) and agents."""

    def __init__(
        self, fixed: Node | Mapping[str, Node] | None = None, agents: AgentResolver | None = None
    ) -> None:
        if fixed is None:
            self.fixed: dict[str, Node] = {}
        elif isinstance(fixed, Mapping):
            self.fixed = dict(fixed)
        else:
            self.fixed = {fixed.name: fixed}
        self.agents = agents

    def get(self, name: str) -> Node | None:
        node = self.fixed.get(name)
        if node is None and self.agents is not None:
            return self.agents.get(name)
        return node

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and self.get(name) is not None

    def __getitem__(self, name: str) -> Node:
        node = self.get(name)
        if node is None:
            raise KeyError(name)
        return node

    def __iter__(self) -> Iterator[str]:
        return iter(self.fixed)

    def wait_exit(self, timeout: float) -> None:
        """Wake early when a signalled process of this node exits; else just wait."""
        for node in self.fixed.values():
            node.wait_exit(timeout)
            return
        time.sleep(timeout)


def build_agents(settings: AgentsSettings) -> AgentResolver:
    tls = ClientTls(settings.tls.ca_file, settings.tls.certfile, settings.tls.keyfile)
    prometheus = None
    if settings.prometheus is not None:
        p = settings.prometheus
        prometheus = PrometheusAgents(
            p.url, p.job, agent_port=p.agent_port, refresh=p.refresh, timeout=settings.timeout
        )
    return AgentResolver(
        tls,
        static=settings.static,
        url_template=settings.url_template,
        prometheus=prometheus,
        timeout=settings.timeout,
    )
