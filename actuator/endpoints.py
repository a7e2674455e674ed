"""The endpoints the actuator posts JSON to (chat robots, the JSON webhook, Alertmanager).

One `Endpoint` per configured URL, with the environment's settings for it read once, when it
is made: the proxy variables and NO_PROXY, the CA bundle variables (REQUESTS_CA_BUNDLE,
CURL_CA_BUNDLE), ~/.netrc. They are read by requests' own helpers, so an endpoint takes
exactly the proxy, CA bundle and credentials a requests session would. The actuator's
environment does not change while it runs (requests read it again at every post: a tenth of
a notice's CPU).

The post itself goes through urllib3, the HTTP client under requests, without requests'
per-request machinery (hooks, cookies, redirects, adapters): that was a third of the CPU of a
notice's post (`benchmarks/notice_cost.py`). A redirect is not followed (a robot URL that
redirects is misconfigured, and following it would turn the POST into a GET): the caller
sees its 3xx status. The answer is read to at most `MAX_ANSWER` bytes: an endpoint that
never stops answering cannot fill the actuator's memory.
"""

from __future__ import annotations

import json
import logging
import os
import urllib.parse
from dataclasses import dataclass
from typing import Any

import certifi
import requests
import urllib3
from requests.utils import (
    get_auth_from_url,
    get_netrc_auth,
    prepend_scheme_if_needed,
    select_proxy,
)

log = logging.getLogger(__name__)
MAX_ANSWER = 64 * 1024  # bytes of an answer kept: success answers are a few dozen
POOL_SIZE = 10  # connections kept per host, as requests keeps (several nodes post at once)


class EndpointError(Exception):
    """No answer: refused, timed out, a TLS or proxy failure, or a body JSON cannot carry."""


@dataclass(frozen=True)
class Answer:
    status: int
    body: bytes  # at most MAX_ANSWER bytes of it
    cut: bool = False  # the endpoint said more than that: `body` is its beginning

    @property
    def text(self) -> str:
        return self.body.decode("utf-8", errors="replace")

    def json(self) -> Any:
        """The answer as JSON (ValueError when it is not)."""
        return json.loads(self.body)


@dataclass(frozen=True)
class Settings:
    """What the environment says for one URL (read by `Settings.of`)."""

    proxy: str | None  # as the environment gives it
    verify: bool | str  # False, True (requests' CA bundle) or a bundle file or directory
    auth: tuple[str, str] | None  # from ~/.netrc

    @classmethod
    def of(cls, url: str) -> Settings:
        found = requests.Session().merge_environment_settings(url, {}, None, None, None)
        proxy = select_proxy(url, found["proxies"])
        return cls(
            proxy=proxy or None,
            verify=True if found["verify"] is None else found["verify"],
            auth=get_netrc_auth(url),
        )


def _pool(settings: Settings) -> urllib3.PoolManager:
    tls: dict[str, Any] = {"cert_reqs": "CERT_REQUIRED"}
    if settings.verify is False:
        tls = {"cert_reqs": "CERT_NONE"}
    else:
        # requests' default bundle, or the one the environment names
        bundle = certifi.where() if settings.verify is True else settings.verify
        tls["ca_cert_dir" if os.path.isdir(bundle) else "ca_certs"] = bundle
    if settings.proxy is None:
        return urllib3.PoolManager(maxsize=POOL_SIZE, **tls)
    proxy = prepend_scheme_if_needed(settings.proxy, "http")  # as requests does
    username, password = get_auth_from_url(proxy)
    if proxy.lower().startswith("socks"):
        from urllib3.contrib.socks import SOCKSProxyManager  # needs PySocks, as requests does

        return SOCKSProxyManager(
            proxy, username=username, password=password, maxsize=POOL_SIZE, **tls
        )
    headers = urllib3.make_headers(proxy_basic_auth=f"{username}:{password}") if username else {}
    return urllib3.ProxyManager(proxy, proxy_headers=headers, maxsize=POOL_SIZE, **tls)


def _origin(url: str) -> str:
    """Scheme, host and port only: a robot's URL carries its key in the query."""
    parts = urllib.parse.urlsplit(url)
    return f"{parts.scheme}://{parts.hostname or ''}{':' if parts.port else ''}{parts.port or ''}"


class Endpoint:
    """Sends JSON to one URL (any path or query on its scheme and host), or asks it, with
    the environment's settings for it read when it is made."""

    def __init__(self, url: str) -> None:
        self.settings = Settings.of(url)
        self.headers = {"User-Agent": "gpu-reclaimer"}
        if self.settings.auth:
            user, password = self.settings.auth
            self.headers.update(urllib3.make_headers(basic_auth=f"{user}:{password}"))
        try:
            self._pool: urllib3.PoolManager | None = _pool(self.settings)
            self._unusable = ""
        except (ImportError, ValueError) as exc:
            # A proxy variable urllib3 cannot use (malformed, an unknown scheme, SOCKS without
            # PySocks): the actuator still starts, and every post to this URL fails saying
            # why, as it did through requests.
            self._pool = None
            self._unusable = f"the proxy {self.settings.proxy!r} is not usable: {exc}"
            log.error("posts to %s: %s", _origin(url), self._unusable)

    def post_json(
        self, url: str, body: Any, *, timeout: float, headers: dict[str, str] | None = None
    ) -> Answer:
        """POST `body` as JSON; its answer, whatever its status (EndpointError: none)."""
        return self.request("POST", url, body, timeout=timeout, headers=headers)

    def request(
        self,
        method: str,
        url: str,
        body: Any = None,
        *,
        timeout: float,
        headers: dict[str, str] | None = None,
        max_answer: int = MAX_ANSWER,
    ) -> Answer:
        """One request (`body`, if any, as JSON) and its answer, whatever its status
        (EndpointError: none)."""
        if self._pool is None:
            raise EndpointError(self._unusable)
        sent = {
            **self.headers,
            **({"Content-Type": "application/json"} if body is not None else {}),
        }
        return exchange(
            self._pool,
            method,
            url,
            body,
            headers={**sent, **(headers or {})},
            timeout=timeout,
            max_answer=max_answer,
        )


def exchange(
    pool: urllib3.PoolManager,
    method: str,
    url: str,
    body: Any = None,
    *,
    headers: dict[str, str],
    timeout: float,
    max_answer: int = MAX_ANSWER,
) -> Answer:
    """One request (`body` as JSON, if any) and its answer, whatever its status; no retry,
    no redirect followed, at most `max_answer` bytes of the answer read (EndpointError: no
    answer)."""
    data = None
    if body is not None:
        try:
            data = json.dumps(body, allow_nan=False).encode()
        except ValueError as exc:
            raise EndpointError(f"not JSON: {exc}") from exc
    try:
        response = pool.request(
            method,
            url,
            body=data,
            headers=headers,
            timeout=urllib3.Timeout(connect=timeout, read=timeout),
            retries=False,
            redirect=False,
            preload_content=False,
        )
        try:
            kept = response.read(max_answer + 1)
        except BaseException:
            response.close()
            raise
    except (urllib3.exceptions.HTTPError, OSError) as exc:
        raise EndpointError(f"{type(exc).__name__}: {exc}") from exc
    if len(kept) > max_answer:
        response.close()  # the rest is not read: this connection is not reused
    else:
        response.release_conn()
    return Answer(response.status, kept[:max_answer], cut=len(kept) > max_answer)
