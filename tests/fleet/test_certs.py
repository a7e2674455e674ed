"""The fleet's small CA: keys written 0600, a CA never overwritten, agents' certificates
for serving (named by their node), the actuator's for client authentication, all signed
by the CA and refused by another one."""

from __future__ import annotations

import ssl
import stat
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.x509.oid import ExtendedKeyUsageOID

from actuator.fleet import certs


def _load(path: Path) -> x509.Certificate:
    return x509.load_pem_x509_certificate(path.read_bytes())


def _usage(cert: x509.Certificate) -> list[x509.ObjectIdentifier]:
    return list(cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value)


def test_keys_are_private_and_a_ca_is_never_overwritten(tmp_path: Path) -> None:
    ca = certs.make_ca(tmp_path)
    agent = certs.issue_agent(tmp_path, "gpu-node-1")
    for key in (ca.key, agent.key):
        assert stat.S_IMODE(key.stat().st_mode) == 0o600
    before = ca.cert.read_bytes()
    with pytest.raises(FileExistsError):
        certs.make_ca(tmp_path)
    assert ca.cert.read_bytes() == before


def test_an_agent_serves_under_its_node_name_and_the_actuator_is_a_client(
    tmp_path: Path,
) -> None:
    certs.make_ca(tmp_path)
    agent = _load(certs.issue_agent(tmp_path, "gpu-node-1", ips=("10.0.0.7",)).cert)
    actuator = _load(certs.issue_actuator(tmp_path).cert)
    names = agent.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert names.get_values_for_type(x509.DNSName) == ["gpu-node-1"]
    assert [str(ip) for ip in names.get_values_for_type(x509.IPAddress)] == ["10.0.0.7"]
    assert _usage(agent) == [ExtendedKeyUsageOID.SERVER_AUTH]
    assert _usage(actuator) == [ExtendedKeyUsageOID.CLIENT_AUTH]
    for cert in (agent, actuator):
        assert not cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca


def test_a_certificate_verifies_against_its_own_ca_only(tmp_path: Path) -> None:
    ours, theirs = tmp_path / "ours", tmp_path / "theirs"
    certs.make_ca(ours)
    certs.make_ca(theirs)
    agent = certs.issue_agent(ours, "gpu-node-1")
    mine = _load(agent.cert)
    mine.verify_directly_issued_by(_load(ours / "ca.pem"))
    with pytest.raises(InvalidSignature):  # same subject name, another key
        mine.verify_directly_issued_by(_load(theirs / "ca.pem"))
    # And as TLS will load them: the pair matches, the CA is a CA.
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(agent.cert, agent.key)
    context.load_verify_locations(ours / "ca.pem")


def test_issuing_without_a_ca_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        certs.issue_agent(tmp_path, "gpu-node-1")
