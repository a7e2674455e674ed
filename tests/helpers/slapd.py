"""A real OpenLDAP server (`slapd` from Debian's slapd package) on a loopback port, with an
mdb database in a temporary directory, the standard schemas, a read-only service account
and the entries a test adds."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import ldap3
import pytest

from tests.support import free_port, wait_until

SUFFIX = "dc=example,dc=com"
ROOT_DN, ROOT_PASSWORD = f"cn=admin,{SUFFIX}", "admin-secret"
READER_DN, READER_PASSWORD = f"cn=reclaimer,{SUFFIX}", "reader-secret"
PEOPLE = f"ou=people,{SUFFIX}"
GROUPS = f"ou=groups,{SUFFIX}"
SCHEMAS = Path("/etc/ldap/schema")


@dataclass
class Slapd:
    url: str
    process: subprocess.Popen[bytes]

    def add_person(self, uid: str, **attributes: str) -> None:
        with _root(self.url) as conn:
            attrs = {"cn": uid, "sn": uid, **attributes}
            assert conn.add(f"uid={uid},{PEOPLE}", ["inetOrgPerson"], attrs), conn.result

    def set_password(self, uid: str, password: str) -> None:
        with _root(self.url) as conn:
            change = {"userPassword": [(ldap3.MODIFY_REPLACE, [password])]}
            assert conn.modify(f"uid={uid},{PEOPLE}", change), conn.result

    def add_group(self, cn: str, *members: str) -> None:
        with _root(self.url) as conn:
            dns = [f"uid={m},{PEOPLE}" for m in members]
            assert conn.add(f"cn={cn},{GROUPS}", ["groupOfNames"], {"cn": cn, "member": dns}), (
                conn.result
            )

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=10)


def _root(url: str) -> ldap3.Connection:
    return ldap3.Connection(ldap3.Server(url), ROOT_DN, ROOT_PASSWORD, auto_bind=True)


def _binary() -> str:
    found = shutil.which("slapd") or (
        "/usr/sbin/slapd" if Path("/usr/sbin/slapd").exists() else None
    )
    if found is None:
        pytest.fail("slapd not found: `make setup` installs Debian's slapd package")
    return found


@contextmanager
def slapd(workdir: Path) -> Iterator[Slapd]:
    data = workdir / "data"
    data.mkdir(parents=True)
    conf = workdir / "slapd.conf"
    conf.write_text(f"""
include {SCHEMAS}/core.schema
include {SCHEMAS}/cosine.schema
include {SCHEMAS}/inetorgperson.schema
pidfile {workdir}/slapd.pid
argsfile {workdir}/slapd.args
modulepath /usr/lib/ldap
moduleload back_mdb
database mdb
maxsize 10485760
suffix "{SUFFIX}"
rootdn "{ROOT_DN}"
rootpw {ROOT_PASSWORD}
directory {data}
access to attrs=userPassword by anonymous auth by * none
access to dn.subtree="{GROUPS}" by users read by * none
access to * by dn.exact="{READER_DN}" read by * none
""")
    url = f"ldap://127.0.0.1:{free_port()}"
    log = (workdir / "slapd.log").open("wb")
    process = subprocess.Popen(
        [_binary(), "-f", str(conf), "-h", f"{url}/", "-d", "0"], stdout=log, stderr=log
    )
    server = Slapd(url, process)
    try:

        def up() -> bool:
            try:
                _root(url).unbind()
                return True
            except ldap3.core.exceptions.LDAPException:
                assert process.poll() is None, (workdir / "slapd.log").read_text()
                return False

        wait_until(up, 15)
        with _root(url) as conn:
            conn.add(SUFFIX, ["dcObject", "organization"], {"o": "Example", "dc": "example"})
            conn.add(PEOPLE, ["organizationalUnit"], {"ou": "people"})
            conn.add(GROUPS, ["organizationalUnit"], {"ou": "groups"})
            conn.add(
                READER_DN,
                ["person"],
                {"cn": "reclaimer", "sn": "reader", "userPassword": READER_PASSWORD},
            )
        yield server
    finally:
        server.stop()
        log.close()
