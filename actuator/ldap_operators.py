"""Operators who sign in with their directory password: HTTP Basic over TLS, checked by an
LDAP bind as the person (ldap3), their groups (entries whose `member` is the person's DN)
mapped to roles. The password is never stored; a successful bind is remembered for a
minute under a salted hash, so each request does not cost a bind.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import re
import threading
import time
from collections.abc import Callable, Iterable, Mapping

import ldap3
from ldap3.core.exceptions import LDAPBindError, LDAPException
from ldap3.utils.conv import escape_filter_chars
from ldap3.utils.dn import escape_rdn

from actuator.operators import AuthError, Principal

# A user name as typed at a login prompt: nothing that could change the DN or the filter.
USER_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")


class LdapBindVerifier:
    def __init__(
        self,
        url: str,
        user_dn: str,
        *,
        group_base: str,
        group_filter: str = "(&(objectClass=groupOfNames)(member={dn}))",
        roles: Mapping[str, Iterable[str]] | None = None,
        timeout: float = 5.0,
        cache_ttl: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if "{user}" not in user_dn:
            raise ValueError("user_dn must contain {user}")
        self.url = url
        self.server = ldap3.Server(url, connect_timeout=timeout)
        self.user_dn, self.group_base, self.group_filter = user_dn, group_base, group_filter
        self.roles = {role: set(groups) for role, groups in (roles or {}).items()}
        self.timeout, self.cache_ttl, self.clock = timeout, cache_ttl, clock
        self._salt = os.urandom(16)
        self._cache: dict[str, tuple[float, Principal]] = {}
        self._lock = threading.Lock()

    def verify(self, user: str, password: str) -> Principal:
        if not USER_NAME.fullmatch(user):
            raise AuthError("invalid", "not a user name")
        if not password:  # an empty password is an anonymous bind, which LDAP lets through
            raise AuthError("invalid", "a password is needed")
        key = hmac.new(self._salt, f"{user}\0{password}".encode(), hashlib.sha256).hexdigest()
        with self._lock:
            cached = self._cache.get(key)
            if cached is not None and self.clock() - cached[0] < self.cache_ttl:
                return cached[1]
        principal = self._bind(user, password)
        with self._lock:
            self._cache = {
                k: v for k, v in self._cache.items() if self.clock() - v[0] < self.cache_ttl
            }
            self._cache[key] = (self.clock(), principal)
        return principal

    def _bind(self, user: str, password: str) -> Principal:
        dn = self.user_dn.format(user=escape_rdn(user))
        try:
            conn = ldap3.Connection(
                self.server,
                dn,
                password,
                auto_bind=True,
                receive_timeout=max(1, int(self.timeout)),  # whole seconds (SO_RCVTIMEO)
            )
        except LDAPBindError:
            raise AuthError("password", "wrong user name or password") from None
        except (LDAPException, OSError) as exc:
            raise AuthError("ldap", f"the directory cannot be reached: {exc}") from None
        try:
            conn.search(
                self.group_base,
                self.group_filter.format(dn=escape_filter_chars(dn)),
                attributes=["cn"],
            )
            groups = {str(e.cn.value) for e in conn.entries if e.cn.value}
        except LDAPException as exc:
            raise AuthError("ldap", f"cannot read the groups: {exc}") from None
        finally:
            conn.unbind()
        roles = frozenset(r for r, members in self.roles.items() if members & groups)
        return Principal(user, dn, roles, self.url, method="ldap")
