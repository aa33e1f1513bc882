"""A throwaway PKI for the security tests, made with the `openssl` command line (no Python dependency).

    pki = make_pki(tmp_path)
    pki.ca            # the test CA's certificate (the trust store)
    pki.server_store  # the broker's key store: private key + certificate (CN=localhost, SAN localhost and 127.0.0.1) + CA
    pki.client("alice")  # (certificate, key) of a client signed by the CA, subject CN=alice,OU=test,O=Odradek
    pki.rogue_client  # (certificate, key) signed by another CA, which the broker does not trust
    pki.pkcs12_keystore("server", "pw")   # the same key store as PKCS12 (made with `cryptography`)
    pki.pkcs12_keystore("alice", "pw")    # a client's key store (librdkafka's ssl.keystore.location)
    pki.pkcs12_truststore("pw")           # the CA as a PKCS12 trust store

EC P-256 keys: made in milliseconds, so a module fixture costs well under a second.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def _ca(directory: Path, name: str) -> tuple[Path, Path]:
    key, cert = directory / f"{name}.key", directory / f"{name}.pem"
    _openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
             "-keyout", str(key), "-out", str(cert), "-days", "3", "-subj", f"/CN={name}",
             "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign",
             cwd=directory)
    return cert, key


def _leaf(directory: Path, name: str, subject: str, ca: tuple[Path, Path], extensions: str) -> tuple[Path, Path]:
    key, csr, cert, ext = (directory / f"{name}{s}" for s in (".key", ".csr", ".pem", ".ext"))
    _openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", str(key),
             "-out", str(csr), "-subj", subject, cwd=directory)
    ext.write_text(extensions)
    _openssl("x509", "-req", "-in", str(csr), "-CA", str(ca[0]), "-CAkey", str(ca[1]), "-CAcreateserial",
             "-out", str(cert), "-days", "3", "-extfile", str(ext), cwd=directory)
    return cert, key


@dataclass
class Pki:
    directory: Path
    ca: Path
    ca_key: Path
    server_cert: Path
    server_key: Path
    server_store: Path
    rogue_client: tuple[Path, Path]

    def pkcs12_keystore(self, name: str, password: str) -> Path:
        """`name`'s key, certificate and the CA as a PKCS12 file ("server" or a client name)."""
        cert, key = (self.server_cert, self.server_key) if name == "server" else self.client(name)
        return write_pkcs12(self.directory / f"{name}-keystore.p12", password, key=key, cert=cert, cas=[self.ca])

    def pkcs12_truststore(self, password: str) -> Path:
        return write_pkcs12(self.directory / "truststore.p12", password, cas=[self.ca])

    def client(self, name: str) -> tuple[Path, Path]:
        cert = self.directory / f"client-{name}.pem"
        if not cert.exists():
            _leaf(self.directory, f"client-{name}", f"/O=Odradek/OU=test/CN={name}", (self.ca, self.ca_key),
                  "extendedKeyUsage=clientAuth\n")
        return cert, self.directory / f"client-{name}.key"


def write_pkcs12(path: Path, password: str, *, key: Path | None = None, cert: Path | None = None,
                 cas: list[Path] = ()) -> Path:
    """A PKCS12 store of PEM files, encrypted (AES-256, PBKDF2) with `password`, as keytool writes one."""
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.serialization import pkcs12

    private_key = serialization.load_pem_private_key(key.read_bytes(), None) if key else None
    certificate = x509.load_pem_x509_certificate(cert.read_bytes()) if cert else None
    authorities = [x509.load_pem_x509_certificate(ca.read_bytes()) for ca in cas]
    path.write_bytes(pkcs12.serialize_key_and_certificates(
        path.stem.encode(), private_key, certificate, authorities or None,
        serialization.BestAvailableEncryption(password.encode())))
    return path


def make_pki(directory: Path) -> Pki:
    directory.mkdir(parents=True, exist_ok=True)
    ca = _ca(directory, "test-ca")
    server = _leaf(directory, "server", "/CN=localhost", ca,
                   "subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth,clientAuth\n")
    store = directory / "server-store.pem"
    store.write_text(server[1].read_text() + server[0].read_text() + ca[0].read_text())
    rogue_ca = _ca(directory, "rogue-ca")
    rogue = _leaf(directory, "rogue-client", "/CN=mallory", rogue_ca, "extendedKeyUsage=clientAuth\n")
    return Pki(directory, ca[0], ca[1], server[0], server[1], store, rogue)
