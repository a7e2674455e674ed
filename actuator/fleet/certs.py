"""A small CA for the fleet's mutual TLS: the CA, the actuator's client certificate
(clientAuth only) and one server certificate per agent (serverAuth only, named for its
node). Purposes are exclusive, so an agent's key cannot call another agent."""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

CA_NAME = "gpu-reclaimer fleet CA"
ACTUATOR_NAME = "gpu-reclaimer-actuator"


@dataclass(frozen=True)
class Issued:
    cert: Path
    key: Path


_CA_USAGE = x509.KeyUsage(
    digital_signature=False,
    content_commitment=False,
    key_encipherment=False,
    data_encipherment=False,
    key_agreement=False,
    key_cert_sign=True,
    crl_sign=True,
    encipher_only=False,
    decipher_only=False,
)


def _write_key(path: Path, key: ec.EllipticCurvePrivateKey) -> None:
    data = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _load_ca(directory: Path) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    cert = x509.load_pem_x509_certificate((directory / "ca.pem").read_bytes())
    key = serialization.load_pem_private_key((directory / "ca.key").read_bytes(), None)
    assert isinstance(key, ec.EllipticCurvePrivateKey)
    return cert, key


def make_ca(directory: Path, *, days: int = 3650) -> Issued:
    """ca.pem and ca.key (0600); refuses to overwrite an existing CA."""
    directory.mkdir(parents=True, exist_ok=True)
    if (directory / "ca.key").exists():
        raise FileExistsError(f"{directory / 'ca.key'} exists: the fleet already has a CA")
    key = ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(CA_NAME))
        .issuer_name(_name(CA_NAME))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(_CA_USAGE, critical=True)
        .sign(key, hashes.SHA256())
    )
    _write_key(directory / "ca.key", key)
    (directory / "ca.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return Issued(directory / "ca.pem", directory / "ca.key")


def issue(
    directory: Path,
    stem: str,
    common_name: str,
    *,
    server: bool,
    dns: tuple[str, ...] = (),
    ips: tuple[str, ...] = (),
    days: int = 825,
) -> Issued:
    """STEM.pem and STEM.key signed by the CA in `directory`: serverAuth (an agent, with its
    names) or clientAuth (the actuator)."""
    ca_cert, ca_key = _load_ca(directory)
    key = ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.UTC)
    usage = ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(common_name))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
    )
    names: list[x509.GeneralName] = [x509.DNSName(d) for d in dns]
    names += [x509.IPAddress(ipaddress.ip_address(i)) for i in ips]
    if names:
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
    cert = builder.sign(ca_key, hashes.SHA256())
    _write_key(directory / f"{stem}.key", key)
    (directory / f"{stem}.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return Issued(directory / f"{stem}.pem", directory / f"{stem}.key")


def issue_actuator(directory: Path, name: str = ACTUATOR_NAME) -> Issued:
    return issue(directory, "actuator", name, server=False)


def issue_agent(
    directory: Path, node: str, *, dns: tuple[str, ...] = (), ips: tuple[str, ...] = ()
) -> Issued:
    return issue(directory, f"agent-{node}", node, server=True, dns=(node, *dns), ips=ips)
