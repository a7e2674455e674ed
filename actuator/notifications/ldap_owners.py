"""Owners from LDAP (ldap3): the process's user name looked up under a base with a filter,
the entry's attributes mapped to a contact (`mail`, `preferredLanguage`, an attribute that
holds the WeCom id, ...), answers cached for a while. An LDAP that cannot be reached reads
as "not found": the notice falls back to the project's contact and the SRE route (and the
detail says why), it never blocks or goes to nobody.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

import ldap3
from ldap3.core.exceptions import LDAPException
from ldap3.utils.conv import escape_filter_chars
from pydantic import ValidationError

from actuator.notifications.owners import Contact

log = logging.getLogger(__name__)

# Contact field -> LDAP attribute; overridable per site.
DEFAULT_ATTRIBUTES: dict[str, str] = {
    "name": "displayName",
    "email": "mail",
    "language": "preferredLanguage",
}
CONTACT_FIELDS = ("name", "email", "wecom", "dingtalk", "feishu", "slack", "language", "timezone")


def language_of(value: str) -> str:
    """RFC 2798 preferredLanguage (`zh-CN`, `zh`, `zh-Hans;q=1`, `en-US`) -> zh-CN or en."""
    first = value.split(",")[0].split(";")[0].strip().lower()
    return "zh-CN" if first.startswith("zh") else "en"


class LdapOwners:
    def __init__(
        self,
        url: str,
        base: str,
        *,
        user_filter: str = "(uid={user})",
        bind_dn: str | None = None,
        password: str | None = None,
        attributes: Mapping[str, str] | None = None,
        timezone: str = "UTC",
        cache_ttl: float = 600.0,
        timeout: float = 5.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.url, self.base, self.user_filter = url, base, user_filter
        self.bind_dn, self.password, self.timezone = bind_dn, password, timezone
        self.attributes = {**DEFAULT_ATTRIBUTES, **(attributes or {})}
        unknown = set(self.attributes) - set(CONTACT_FIELDS)
        if unknown:
            raise ValueError(f"unknown contact fields in the LDAP attribute map: {unknown}")
        self.cache_ttl, self.timeout, self.clock = cache_ttl, timeout, clock
        self._cache: dict[str, tuple[float, Contact | None]] = {}
        self._lock = threading.Lock()
        self.last_error = ""

    def lookup(self, user: str) -> Contact | None:
        now = self.clock()
        with self._lock:
            hit = self._cache.get(user)
            if hit and now - hit[0] < self.cache_ttl:
                return hit[1]
        try:
            contact = self._search(user)
        except (LDAPException, ValidationError) as exc:
            self.last_error = f"LDAP {self.url}: {type(exc).__name__}: {exc}"
            log.warning("owner lookup for %r: %s", user, self.last_error)
            return None  # not cached: the next notice asks again
        self.last_error = ""
        with self._lock:
            self._cache[user] = (now, contact)
        return contact

    def _search(self, user: str) -> Contact | None:
        server = ldap3.Server(self.url, connect_timeout=self.timeout, get_info=ldap3.NONE)
        receive = max(1, round(self.timeout))  # ldap3 packs it into SO_RCVTIMEO: whole seconds
        with ldap3.Connection(
            server,
            user=self.bind_dn,
            password=self.password,
            auto_bind=True,
            receive_timeout=receive,
            read_only=True,
        ) as conn:
            conn.search(
                self.base,
                self.user_filter.format(user=escape_filter_chars(user)),
                attributes=sorted(set(self.attributes.values())),
                size_limit=2,
            )
            entries = conn.entries
        if len(entries) != 1:
            if len(entries) > 1:
                log.warning("owner lookup for %r: %d entries match, using none", user, len(entries))
            return None
        return self._contact(entries[0].entry_attributes_as_dict)

    def _contact(self, entry: dict[str, list[Any]]) -> Contact:
        fields: dict[str, Any] = {"timezone": self.timezone}
        for field, attribute in self.attributes.items():
            values = entry.get(attribute) or []
            if values:
                fields[field] = str(values[0])
        if "language" in fields:
            fields["language"] = language_of(fields["language"])
        return Contact.model_validate(fields)
