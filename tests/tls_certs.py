"""A private CA and the certificates it signs, for the TLS tests (PEM files in a directory of the test)."""

from __future__ import annotations

import datetime
import ipaddress
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


class CertificateAuthority:
    def __init__(self, root: Path, name: str = "Sluice test CA") -> None:
        root.mkdir(parents=True, exist_ok=True)
        self.root = root
        self.key = ec.generate_private_key(ec.SECP256R1())
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
        now = datetime.datetime.now(datetime.UTC)
        self.cert = (x509.CertificateBuilder().subject_name(subject).issuer_name(subject)
                     .public_key(self.key.public_key()).serial_number(x509.random_serial_number())
                     .not_valid_before(now - datetime.timedelta(minutes=5))
                     .not_valid_after(now + datetime.timedelta(days=2))
                     .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
                     .add_extension(x509.KeyUsage(digital_signature=True, content_commitment=False,
                                                  key_encipherment=False, data_encipherment=False, key_agreement=False,
                                                  key_cert_sign=True, crl_sign=True, encipher_only=False,
                                                  decipher_only=False), critical=True)
                     .add_extension(x509.SubjectKeyIdentifier.from_public_key(self.key.public_key()), critical=False)
                     .sign(self.key, hashes.SHA256()))
        self.cert_path = root / f"{name.replace(' ', '-')}.pem"
        self.cert_path.write_bytes(self.cert.public_bytes(serialization.Encoding.PEM))

    def issue(self, name: str, *, server: bool = True, hosts: tuple[str, ...] = ("localhost", "127.0.0.1"),
              directory: Path | None = None, client_too: bool = False) -> tuple[Path, Path]:
        """A certificate for ``name`` signed by this CA, and its key: (cert path, key path)."""
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        alt: list[x509.GeneralName] = []
        for h in hosts:
            try:
                alt.append(x509.IPAddress(ipaddress.ip_address(h)))
            except ValueError:
                alt.append(x509.DNSName(h))
        usage = [ExtendedKeyUsageOID.SERVER_AUTH] if server else [ExtendedKeyUsageOID.CLIENT_AUTH]
        if client_too:
            usage.append(ExtendedKeyUsageOID.CLIENT_AUTH)
        cert = (x509.CertificateBuilder().subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
                .issuer_name(self.cert.subject).public_key(key.public_key()).serial_number(x509.random_serial_number())
                .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=1))
                .add_extension(x509.SubjectAlternativeName(alt), critical=False)
                .add_extension(x509.ExtendedKeyUsage(usage), critical=False)
                # (Python 3.13's default context checks strictly: these identifiers must be there)
                .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
                .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(self.key.public_key()),
                               critical=False)
                .sign(self.key, hashes.SHA256()))
        where = directory or self.root
        where.mkdir(parents=True, exist_ok=True)
        cert_path, key_path = where / f"{name}.pem", where / f"{name}.key"
        key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                               serialization.NoEncryption()))
        cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        return cert_path, key_path


def common_name(der: bytes) -> str:
    """The subject's common name of a DER certificate (what ``SSLSocket.getpeercert(True)`` gives)."""
    cert = x509.load_der_x509_certificate(der)
    return str(cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value)
