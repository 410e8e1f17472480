"""The webhook's own certificates: a self-signed CA and a serving certificate it signs.

Pure (no API calls): issue a pair for the names the API server reaches the operator by,
decide when to renew (at 2/3 of the lifetime, when the names change, or when what is
stored is unreadable), and the CA bundle the webhook configuration must carry. A renewal
issues a new CA too and keeps the old one in the bundle until it expires, so the API
server trusts the old serving certificate and the new one alike while the switch happens.
"""

from __future__ import annotations

import base64
import binascii
import datetime
import ipaddress
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

LIFETIME = datetime.timedelta(days=365)
RENEW_AFTER = 2 / 3  # of the lifetime
BACKDATE = datetime.timedelta(minutes=5)  # clocks of the API server and the operator differ
CA_NAME = "spyre-operator-webhook-ca"
# The keys of the Secret that keeps them (tls.crt/tls.key as a kubernetes.io/tls Secret has).
CA_CERT, CA_KEY, CERT, KEY, PREVIOUS_CA = (
    "ca.crt",
    "ca.key",
    "tls.crt",
    "tls.key",
    "previous-ca.crt",
)


_NO = dict.fromkeys(
    (
        "content_commitment",
        "key_encipherment",
        "data_encipherment",
        "key_agreement",
        "encipher_only",
        "decipher_only",
    ),
    False,
)
CA_USAGE = x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True, **_NO)


@dataclass(frozen=True)
class Certs:
    """PEM bytes. `previous_ca`: the CA before the last renewal (b"" when none)."""

    ca_cert: bytes
    ca_key: bytes
    cert: bytes
    key: bytes
    previous_ca: bytes = b""

    def to_data(self) -> dict[str, str]:
        """As the `data` of a Secret (base64)."""
        values = {
            CA_CERT: self.ca_cert,
            CA_KEY: self.ca_key,
            CERT: self.cert,
            KEY: self.key,
            PREVIOUS_CA: self.previous_ca,
        }
        return {k: base64.b64encode(v).decode() for k, v in values.items()}

    @classmethod
    def from_data(cls, data: Mapping[str, str] | None) -> Certs | None:
        """From a Secret's `data`; None when anything is missing or not base64."""
        data = data or {}
        try:
            raw = {
                k: base64.b64decode(data.get(k) or "", validate=True)
                for k in (CA_CERT, CA_KEY, CERT, KEY, PREVIOUS_CA)
            }
        except (binascii.Error, ValueError):
            return None
        if not all(raw[k] for k in (CA_CERT, CA_KEY, CERT, KEY)):
            return None
        return cls(raw[CA_CERT], raw[CA_KEY], raw[CERT], raw[KEY], raw[PREVIOUS_CA])


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())  # fast to make; the API server accepts it


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _san(hosts: Sequence[str]) -> x509.SubjectAlternativeName:
    names: list[x509.GeneralName] = []
    for host in hosts:
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            names.append(x509.DNSName(host))
    return x509.SubjectAlternativeName(names)


def issue(
    hosts: Sequence[str],
    now: datetime.datetime,
    lifetime: datetime.timedelta = LIFETIME,
    previous_ca: bytes = b"",
    ca_name: str = CA_NAME,
) -> Certs:
    """A new CA (named ca_name) and a serving certificate for `hosts` (DNS names or IP
    addresses)."""
    if not hosts:
        raise ValueError("a serving certificate needs at least one host name or address")
    start, end = now - BACKDATE, now + lifetime
    ca_key, key = _key(), _key()
    issuer = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, ca_name)])
    ca = (
        x509.CertificateBuilder()
        .subject_name(issuer)
        .issuer_name(issuer)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(CA_USAGE, critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, hosts[0])]))
        .issuer_name(issuer)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(_san(hosts), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    pem = serialization.Encoding.PEM
    return Certs(
        ca.public_bytes(pem), _pem_key(ca_key), cert.public_bytes(pem), _pem_key(key), previous_ca
    )


# cryptography 38 (Debian bookworm's, which the s390x operator image carries: PyPI has
# no s390x wheel) lacks verify_directly_issued_by (40) and the *_utc fields (42).
def validity(cert: x509.Certificate) -> tuple[datetime.datetime, datetime.datetime]:
    """The certificate's not-before and not-after, in UTC."""
    if hasattr(cert, "not_valid_before_utc"):
        return cert.not_valid_before_utc, cert.not_valid_after_utc
    start, end = cert.not_valid_before, cert.not_valid_after  # naive UTC before 42
    return start.replace(tzinfo=datetime.UTC), end.replace(tzinfo=datetime.UTC)


def check_issued_by(cert: x509.Certificate, ca: x509.Certificate) -> None:
    """Raise ValueError/InvalidSignature unless ca's (EC) key signed cert."""
    if cert.issuer != ca.subject:
        raise ValueError("issuer mismatch")
    key = ca.public_key()
    if not isinstance(key, ec.EllipticCurvePublicKey) or cert.signature_hash_algorithm is None:
        raise TypeError("the CA's key is not an EC key")
    key.verify(cert.signature, cert.tbs_certificate_bytes, ec.ECDSA(cert.signature_hash_algorithm))


def renewal_due(certs: Certs, hosts: Sequence[str], now: datetime.datetime) -> str | None:
    """Why `certs` must be replaced (for the log), or None while they serve `hosts` well."""
    try:
        ca = x509.load_pem_x509_certificate(certs.ca_cert)
        cert = x509.load_pem_x509_certificate(certs.cert)
        serialization.load_pem_private_key(certs.key, None)
        check_issued_by(cert, ca)
    except (ValueError, TypeError, InvalidSignature):
        return "the stored certificate is unreadable or not signed by the stored CA"
    start, end = validity(cert)
    if now >= start + (end - start) * RENEW_AFTER:
        return f"the certificate expires at {end:%Y-%m-%d %H:%M} UTC (renewed at 2/3 of its life)"
    served = set(cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value)
    if served != set(_san(hosts)):
        return f"the certificate is not for exactly {', '.join(hosts)}"
    return None


def bundle(certs: Certs, now: datetime.datetime) -> bytes:
    """What the webhook configuration's caBundle must hold: the CA, and the previous one
    until it expires (the switch to the renewed certificate is not atomic)."""
    out = certs.ca_cert
    if certs.previous_ca:
        try:
            previous = x509.load_pem_x509_certificate(certs.previous_ca)
        except ValueError:
            return out
        if validity(previous)[1] > now:
            out += certs.previous_ca
    return out
