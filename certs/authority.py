"""A private CA and the serving certificate it signs, for the webhook and extender.

Keys are ECDSA P-256 (fast handshakes under admission load); the CA is
valid for ten years, the serving certificate for one. Host names and IP
addresses both go into the subjectAltName, as API servers and Go's TLS
stack verify only SANs. `write` puts PEM files on disk, private keys 0600.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import ipaddress
import os
from pathlib import Path
from typing import Sequence

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

CA_VALIDITY = dt.timedelta(days=3650)
SERVING_VALIDITY = dt.timedelta(days=365)
DEFAULT_DNS_NAMES = ("localhost", "127.0.0.1")


@dataclasses.dataclass(frozen=True)
class Bundle:
    """PEM bytes of the CA certificate and of the serving certificate and key."""

    ca_crt: bytes
    tls_crt: bytes
    tls_key: bytes


def _san(name: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(name))
    except ValueError:
        return x509.DNSName(name)


def generate(dns_names: Sequence[str] = DEFAULT_DNS_NAMES, *, now: dt.datetime | None = None) -> Bundle:
    """A new CA and a serving certificate for `dns_names` (host names or IPs).

    Raises ValueError when no name is given."""
    names = list(dict.fromkeys(dns_names))
    if not names:
        raise ValueError("at least one --dns-name is required")
    now = now or dt.datetime.now(dt.timezone.utc)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "karpy-ca")])
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + CA_VALIDITY)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True, key_cert_sign=True, crl_sign=True, content_commitment=False,
                key_encipherment=False, data_encipherment=False, key_agreement=False,
                encipher_only=False, decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, names[0])]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + SERVING_VALIDITY)
        .add_extension(x509.SubjectAlternativeName([_san(n) for n in names]), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )
    return Bundle(
        ca_crt=ca_cert.public_bytes(serialization.Encoding.PEM),
        tls_crt=cert.public_bytes(serialization.Encoding.PEM),
        tls_key=key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        ),
    )


def write(bundle: Bundle, out_dir: str | os.PathLike[str]) -> list[Path]:
    """Write ca.crt, tls.crt and tls.key into `out_dir` (created if needed); keys 0600."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for name, data, mode in (
        ("ca.crt", bundle.ca_crt, 0o644),
        ("tls.crt", bundle.tls_crt, 0o644),
        ("tls.key", bundle.tls_key, 0o600),
    ):
        path = out / name
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chmod(path, mode)  # O_CREAT's mode does not apply to a file that already existed
        written.append(path)
    return written
