"""broker/security.py and the security settings: JAAS, certificate principals and mapping rules, TLS key
stores from PEM (file or inline) and the refusal of stores we cannot read, SASL mechanisms per listener;
`storage format --add-scram`; the SCRAM credential decisions of AlterUserScramCredentials."""

from __future__ import annotations

import ssl

import pytest

from odradek.broker.config import BrokerConfig, ConfigError
from odradek.broker.context import SecurityProtocol
from odradek.broker.security import (
    PrincipalMapper, client_credentials, distinguished_name, listener_security, node_security, parse_jaas,
)
from odradek.broker.storage_tool import parse_add_scram, read_bootstrap_records, write_bootstrap_records
from odradek.protocol.errors import ErrorCode
from odradek.protocol.messages import REQUESTS
from odradek.protocol.sasl import ScramMechanism, salted_password, scram_credential
from odradek.metadata.controller.scram_control import ScramControlManager
from odradek.metadata.image import replay_all
from tests.pki import make_pki

JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" '
        'password="admin \\"secret\\"" user_admin="admin \\"secret\\"" user_alice=alice-pw;')


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return make_pki(tmp_path_factory.mktemp("pki"))


def config(**props) -> BrokerConfig:
    return BrokerConfig.from_properties({k: str(v) for k, v in props.items()})


def test_jaas_options_quoted_escaped_and_bare():
    entry = parse_jaas(JAAS)
    assert entry.login_module.endswith("PlainLoginModule") and entry.flag == "required"
    assert entry.options == {"username": "admin", "password": 'admin "secret"', "user_admin": 'admin "secret"',
                             "user_alice": "alice-pw"}
    assert "secret" not in repr(entry)
    with pytest.raises(ConfigError):
        parse_jaas("user_a=b;")


def test_dn_rfc2253_and_mapping_rules():
    cert = {"subject": ((("countryName", "US"),), (("organizationName", "Acme, Inc"),), (("commonName", "Alice"),))}
    assert distinguished_name(cert) == "CN=Alice,O=Acme\\, Inc,C=US"
    assert distinguished_name(None) is None and distinguished_name({}) is None
    assert PrincipalMapper("DEFAULT").name("CN=Alice,O=Acme") == "CN=Alice,O=Acme"
    rules = PrincipalMapper("RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/,RULE:^CN=([a-zA-Z]+),.*$/$1/L, DEFAULT")
    assert rules.name("CN=kafka-svc,OU=ServiceUsers,O=Acme") == "kafka-svc"
    assert rules.name("CN=Alice,O=Acme") == "alice"
    assert rules.name("O=NoCommonName") == "O=NoCommonName"
    assert PrincipalMapper("RULE:^CN=(.*)$/$1/U").name("CN=bob") == "BOB"
    with pytest.raises(ValueError):
        PrincipalMapper("RULE:^CN=(.*)$/$1/").name("O=x")
    assert str(PrincipalMapper("DEFAULT").principal(cert)) == "User:CN=Alice,O=Acme\\, Inc,C=US"


def test_listener_overrides_and_unknown_listener_keys():
    c = config(**{"listener.name.internal.ssl.client.auth": "required", "ssl.client.auth": "requested"})
    assert c.listener_setting("INTERNAL", "ssl.client.auth") == "required"
    assert c.listener_setting("external", "ssl.client.auth") == "requested"
    with pytest.raises(ConfigError) as e:
        config(**{"listener.name.internal.ssl.no.such.key": "x"})
    assert "no.such.key" in str(e.value)
    with pytest.raises(ConfigError):
        config(**{"ssl.client.auth": "sometimes"})


def test_ssl_listener_from_a_pem_file_and_from_inline_pem(pki):
    c = config(listeners="SSL://127.0.0.1:0", **{"ssl.keystore.type": "PEM", "ssl.keystore.location": pki.server_store,
                                                   "ssl.truststore.type": "PEM", "ssl.truststore.location": pki.ca,
                                                   "ssl.client.auth": "required",
                                                   "ssl.enabled.protocols": "TLSv1.3"})
    security = listener_security(c, "SSL", SecurityProtocol.SSL)
    ctx = security.ssl_context
    assert ctx.verify_mode == ssl.CERT_REQUIRED and ctx.minimum_version == ssl.TLSVersion.TLSv1_3
    inline = config(listeners="SSL://127.0.0.1:0", **{
        "ssl.keystore.type": "PEM", "ssl.keystore.key": pki.server_key.read_text(),
        "ssl.keystore.certificate.chain": pki.server_cert.read_text() + pki.ca.read_text(),
        "ssl.cipher.suites": "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256"})
    assert listener_security(inline, "SSL", SecurityProtocol.SSL).ssl_context.verify_mode == ssl.CERT_NONE


def test_stores_we_cannot_read_and_missing_key_stores_refuse_to_start(tmp_path):
    jks = tmp_path / "broker.jks"
    jks.write_bytes(b"\xfe\xed\xfe\xed\x00\x00\x00\x02")
    with pytest.raises(ConfigError) as e:
        listener_security(config(listeners="SSL://127.0.0.1:0", **{"ssl.keystore.location": jks}), "SSL", SecurityProtocol.SSL)
    assert "JKS" in str(e.value) and "PEM" in str(e.value) and e.value.key == "ssl.keystore.type"
    with pytest.raises(ConfigError) as e:
        listener_security(config(listeners="SSL://127.0.0.1:0"), "SSL", SecurityProtocol.SSL)
    assert e.value.key == "ssl.keystore.location"


def test_sasl_listener_mechanisms_and_plain_users():
    c = config(listeners="SASL_PLAINTEXT://127.0.0.1:0", **{
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256", "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
        "connections.max.reauth.ms": 3600000})
    security = listener_security(c, "SASL_PLAINTEXT", SecurityProtocol.SASL_PLAINTEXT)
    assert security.mechanisms == ("PLAIN", "SCRAM-SHA-256") and security.reauth_ms == 3600000
    assert security.verify_plain("alice", "alice-pw") and not security.verify_plain("alice", "x")
    assert not security.verify_plain("nobody", "alice-pw")
    assert client_credentials(c, "SASL_PLAINTEXT", "PLAIN") == ("admin", 'admin "secret"')
    with pytest.raises(ConfigError) as e:  # Kafka's default mechanism, GSSAPI, is not served
        listener_security(config(listeners="SASL_PLAINTEXT://127.0.0.1:0"), "SASL_PLAINTEXT", SecurityProtocol.SASL_PLAINTEXT)
    assert e.value.key == "sasl.enabled.mechanisms"
    with pytest.raises(ConfigError) as e:  # PLAIN without users
        listener_security(config(listeners="SASL_PLAINTEXT://127.0.0.1:0", **{"sasl.enabled.mechanisms": "PLAIN"}),
                          "SASL_PLAINTEXT", SecurityProtocol.SASL_PLAINTEXT)
    assert "jaas" in e.value.key
    with pytest.raises(ConfigError) as e:  # inter-broker SASL without credentials to log in with
        node_security(config(listeners="SASL_PLAINTEXT://127.0.0.1:0", **{"sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512"}),
                      "SASL_PLAINTEXT", "sasl.mechanism.inter.broker.protocol")
    assert "jaas" in e.value.key


def test_add_scram_forms_and_the_bootstrap_file(tmp_path):
    by_password = parse_add_scram("SCRAM-SHA-256=[name=alice,password=alice-secret]")
    assert by_password.mechanism == 1 and by_password.iterations == 4096 and len(by_password.salt) == 32
    expected = scram_credential(ScramMechanism.SCRAM_SHA_256, "alice-secret", by_password.salt, 4096)
    assert by_password.stored_key == expected.stored_key
    salted = parse_add_scram('SCRAM-SHA-512=[name="bob",iterations=8192,salt="c2FsdA==",saltedpassword="'
                             + __import__("base64").b64encode(salted_password(ScramMechanism.SCRAM_SHA_512, "pw", b"salt", 8192)).decode()
                             + '"]')
    assert salted.iterations == 8192 and salted.stored_key == scram_credential(ScramMechanism.SCRAM_SHA_512, "pw", b"salt", 8192).stored_key
    for bad in ("SCRAM-SHA-1=[name=a,password=b]", "SCRAM-SHA-256=[password=b]", "SCRAM-SHA-256=[name=a]",
                "SCRAM-SHA-256=[name=a,password=b,iterations=10]", "nonsense"):
        with pytest.raises(ValueError):
            parse_add_scram(bad)
    write_bootstrap_records(str(tmp_path), [by_password, salted])
    assert b"alice-secret" not in (tmp_path / "bootstrap.checkpoint").read_bytes()
    image = replay_all(read_bootstrap_records(str(tmp_path)))
    assert set(image.scram_credentials) == {("alice", 1), ("bob", 2)}
    assert read_bootstrap_records(str(tmp_path / "none")) == ()


def test_alter_user_scram_credentials_decisions():
    decide_scram_changes = ScramControlManager().alter_user_scram_credentials
    cls = REQUESTS[51]
    salt, salted = b"salt", salted_password(ScramMechanism.SCRAM_SHA_512, "pw", b"salt", 4096)
    up = lambda name, mech=2, it=4096: cls.ScramCredentialUpsertion(name=name, mechanism=mech, iterations=it, salt=salt,
                                                                    salted_password=salted)
    image = replay_all([])
    records, outcome = decide_scram_changes(image, [], [up("alice"), up("bob", mech=9), up("carol", it=100), up("")])
    assert [r.name for r in records] == ["alice"]
    assert outcome["alice"] == (0, None)
    assert outcome["bob"][0] == ErrorCode.UNSUPPORTED_SASL_MECHANISM
    assert outcome["carol"][0] == ErrorCode.UNACCEPTABLE_CREDENTIAL
    assert outcome[""][0] == ErrorCode.UNACCEPTABLE_CREDENTIAL
    image = replay_all(records)
    assert image.scram_credentials[("alice", 2)].stored_key == scram_credential(ScramMechanism.SCRAM_SHA_512, "pw", salt, 4096).stored_key
    delete = lambda name, mech=2: cls.ScramCredentialDeletion(name=name, mechanism=mech)
    records, outcome = decide_scram_changes(image, [delete("alice"), delete("dave")], [])
    assert [type(r).__name__ for r in records] == ["RemoveUserScramCredentialRecord"]
    assert outcome["dave"][0] == ErrorCode.RESOURCE_NOT_FOUND
    records, outcome = decide_scram_changes(image, [delete("alice")], [up("alice")])
    assert records == [] and outcome["alice"][0] == ErrorCode.DUPLICATE_RESOURCE


def test_inline_trust_store_and_requested_client_auth(pki):
    c = config(listeners="SSL://127.0.0.1:0", **{
        "ssl.keystore.type": "PEM", "ssl.keystore.location": pki.server_store,
        "ssl.truststore.type": "PEM", "ssl.truststore.certificates": pki.ca.read_text(), "ssl.client.auth": "requested"})
    ctx = listener_security(c, "SSL", SecurityProtocol.SSL).ssl_context
    assert ctx.verify_mode == ssl.CERT_OPTIONAL and ctx.cert_store_stats()["x509_ca"] == 1


def test_sasl_requests_on_a_listener_without_sasl_get_illegal_sasl_state():
    from odradek.broker.handlers.sasl import handle_sasl_authenticate, handle_sasl_handshake

    assert handle_sasl_handshake(None, None, REQUESTS[17](mechanism="PLAIN")).error_code == ErrorCode.ILLEGAL_SASL_STATE
    assert handle_sasl_authenticate(None, None, REQUESTS[36](auth_bytes=b"")).error_code == ErrorCode.ILLEGAL_SASL_STATE
