"""PKCS12 key and trust stores (broker/security.py): loaded with `cryptography`, handed to the ssl module
without the private key touching the disk in clear; a wrong password refuses to start naming the setting;
JKS is still refused with the keytool command. A TLS handshake over a socket pair proves the contexts work."""

from __future__ import annotations

import os
import shutil
import socket
import ssl
import subprocess
import tempfile
import threading

import pytest

pytest.importorskip("cryptography")

from odradek.broker.config import BrokerConfig, ConfigError
from odradek.broker.context import SecurityProtocol
from odradek.broker.security import StoreFormat, client_ssl_context, listener_security
from tests.pki import make_pki

PASSWORD = "store-pw"


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return make_pki(tmp_path_factory.mktemp("pki"))


def config(**props) -> BrokerConfig:
    return BrokerConfig.from_properties({k: str(v) for k, v in props.items()})


def pkcs12_ssl(pki, **extra) -> BrokerConfig:
    return config(listeners="SSL://127.0.0.1:0", **{
        "ssl.keystore.type": "PKCS12", "ssl.keystore.location": pki.pkcs12_keystore("server", PASSWORD),
        "ssl.keystore.password": PASSWORD, "ssl.truststore.type": "PKCS12",
        "ssl.truststore.location": pki.pkcs12_truststore(PASSWORD), "ssl.truststore.password": PASSWORD,
        "ssl.client.auth": "required", **extra})


def _handshake(server_ctx: ssl.SSLContext, client_ctx: ssl.SSLContext) -> dict | None:
    """Both ends of a TLS handshake over a socket pair; the server's view of the client certificate."""
    a, b = socket.socketpair()
    seen: dict = {}

    def serve():
        with server_ctx.wrap_socket(a, server_side=True) as tls:
            seen["peer"] = tls.getpeercert()
            tls.sendall(b"ok")

    thread = threading.Thread(target=serve)
    thread.start()
    with client_ctx.wrap_socket(b, server_hostname="localhost") as tls:
        assert tls.recv(2) == b"ok"
    thread.join(30)
    return seen.get("peer")


def test_store_format_is_told_from_the_bytes():
    assert StoreFormat.of(b"-----BEGIN CERTIFICATE-----\n") is StoreFormat.PEM
    assert StoreFormat.of(b"\xfe\xed\xfe\xed\x00\x00\x00\x02") is StoreFormat.JKS
    assert StoreFormat.of(b"\xce\xce\xce\xce") is StoreFormat.JKS
    assert StoreFormat.of(b"0\x82\x04\x00") is StoreFormat.PKCS12


def test_pkcs12_key_and_trust_stores_serve_mutual_tls(pki):
    server = listener_security(pkcs12_ssl(pki), "SSL", SecurityProtocol.SSL).ssl_context
    assert server.verify_mode == ssl.CERT_REQUIRED and server.cert_store_stats()["x509_ca"] == 1
    cert, key = pki.client("alice")
    client = ssl.create_default_context(cafile=str(pki.ca))
    client.load_cert_chain(str(cert), str(key))
    peer = _handshake(server, client)
    assert ("commonName", "alice") in [rdn[0] for rdn in peer["subject"]]


def test_a_node_connects_with_its_pkcs12_stores(pki):
    """client_ssl_context (inter-broker, controller): PKCS12 trust store and key store for mTLS."""
    c = pkcs12_ssl(pki)
    server = listener_security(c, "SSL", SecurityProtocol.SSL).ssl_context
    peer = _handshake(server, client_ssl_context(c, "SSL"))
    assert ("commonName", "localhost") in [rdn[0] for rdn in peer["subject"]]


def test_a_store_typed_jks_that_keytool_wrote_as_pkcs12_loads(pki):
    """Kafka's default type is JKS while keytool has written PKCS12 since Java 9; Java reads either."""
    c = pkcs12_ssl(pki, **{"ssl.keystore.type": "JKS", "ssl.truststore.type": "JKS"})
    assert listener_security(c, "SSL", SecurityProtocol.SSL).ssl_context.verify_mode == ssl.CERT_REQUIRED


def test_wrong_or_missing_passwords_refuse_to_start_naming_the_setting(pki):
    with pytest.raises(ConfigError) as e:
        listener_security(pkcs12_ssl(pki, **{"ssl.keystore.password": "wrong"}), "SSL", SecurityProtocol.SSL)
    assert e.value.key == "ssl.keystore.password" and "wrong ssl.keystore.password" in str(e.value)
    with pytest.raises(ConfigError) as e:
        listener_security(pkcs12_ssl(pki, **{"ssl.truststore.password": "wrong"}), "SSL", SecurityProtocol.SSL)
    assert e.value.key == "ssl.truststore.password"
    no_password = config(listeners="SSL://127.0.0.1:0", **{
        "ssl.keystore.type": "PKCS12", "ssl.keystore.location": pki.pkcs12_keystore("server", PASSWORD)})
    with pytest.raises(ConfigError) as e:
        listener_security(no_password, "SSL", SecurityProtocol.SSL)
    assert e.value.key == "ssl.keystore.password"


def test_a_trust_store_is_not_a_key_store_and_pem_type_wants_pem(pki):
    with pytest.raises(ConfigError) as e:
        listener_security(config(listeners="SSL://127.0.0.1:0", **{
            "ssl.keystore.type": "PKCS12", "ssl.keystore.location": pki.pkcs12_truststore(PASSWORD),
            "ssl.keystore.password": PASSWORD}), "SSL", SecurityProtocol.SSL)
    assert "no private key" in str(e.value)
    with pytest.raises(ConfigError) as e:
        listener_security(config(listeners="SSL://127.0.0.1:0", **{
            "ssl.keystore.type": "PEM", "ssl.keystore.location": pki.pkcs12_keystore("server", PASSWORD),
            "ssl.keystore.password": PASSWORD}), "SSL", SecurityProtocol.SSL)
    assert e.value.key == "ssl.keystore.type"


def test_jks_is_refused_with_the_keytool_conversion(tmp_path):
    jks = tmp_path / "broker.jks"
    jks.write_bytes(b"\xfe\xed\xfe\xed\x00\x00\x00\x02")
    with pytest.raises(ConfigError) as e:
        listener_security(config(listeners="SSL://127.0.0.1:0", **{"ssl.keystore.location": jks}), "SSL", SecurityProtocol.SSL)
    assert "keytool -importkeystore" in str(e.value) and "PKCS12" in str(e.value) and e.value.key == "ssl.keystore.type"


def test_no_private_key_is_left_on_disk(pki, monkeypatch, tmp_path):
    """The key passes through one temporary file, encrypted, in a private directory removed at once."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    written: list[bytes] = []
    real_load = ssl.SSLContext.load_cert_chain

    def spy(self, certfile, keyfile=None, password=None):
        with open(certfile, "rb") as f:
            written.append(f.read())
        assert os.stat(certfile).st_mode & 0o077 == 0 and os.stat(os.path.dirname(certfile)).st_mode & 0o077 == 0
        return real_load(self, certfile, keyfile, password)

    monkeypatch.setattr(ssl.SSLContext, "load_cert_chain", spy)
    listener_security(pkcs12_ssl(pki), "SSL", SecurityProtocol.SSL)
    inline = config(listeners="SSL://127.0.0.1:0", **{
        "ssl.keystore.type": "PEM", "ssl.keystore.key": pki.server_key.read_text(),
        "ssl.keystore.certificate.chain": pki.server_cert.read_text() + pki.ca.read_text()})
    listener_security(inline, "SSL", SecurityProtocol.SSL)
    assert len(written) == 2 and all(b"BEGIN ENCRYPTED PRIVATE KEY" in w and b"BEGIN PRIVATE KEY" not in w for w in written)
    assert list(tmp_path.iterdir()) == []


def test_stores_written_by_keytool(pki, tmp_path):
    """What Kafka users have: keytool's PKCS12 key store and trust store load; its JKS is refused."""
    keytool = shutil.which("keytool")
    if keytool is None:
        pytest.skip("keytool (Java) is not installed")

    def run(*args):
        subprocess.run([keytool, *args, "-storepass", PASSWORD, "-noprompt"], check=True, capture_output=True, timeout=120)

    run("-genkeypair", "-alias", "broker", "-keyalg", "EC", "-groupname", "secp256r1", "-dname", "CN=localhost",
        "-validity", "2", "-storetype", "PKCS12", "-keystore", str(tmp_path / "broker.p12"))
    run("-importcert", "-alias", "ca", "-file", str(pki.ca), "-storetype", "PKCS12", "-keystore", str(tmp_path / "trust.p12"))
    run("-importkeystore", "-srckeystore", str(tmp_path / "broker.p12"), "-srcstoretype", "PKCS12", "-srcstorepass", PASSWORD,
        "-destkeystore", str(tmp_path / "broker.jks"), "-deststoretype", "JKS")
    c = config(listeners="SSL://127.0.0.1:0", **{
        "ssl.keystore.type": "PKCS12", "ssl.keystore.location": tmp_path / "broker.p12", "ssl.keystore.password": PASSWORD,
        "ssl.truststore.type": "PKCS12", "ssl.truststore.location": tmp_path / "trust.p12", "ssl.truststore.password": PASSWORD,
        "ssl.client.auth": "required"})
    assert listener_security(c, "SSL", SecurityProtocol.SSL).ssl_context.cert_store_stats()["x509_ca"] == 1
    with pytest.raises(ConfigError) as e:
        listener_security(config(listeners="SSL://127.0.0.1:0", **{
            "ssl.keystore.location": tmp_path / "broker.jks", "ssl.keystore.password": PASSWORD}), "SSL", SecurityProtocol.SSL)
    assert "keytool -importkeystore" in str(e.value)
