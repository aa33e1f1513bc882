"""A secured Kafka server.properties, written as Kafka's documentation writes one, loads with only its paths
changed; every key this broker cannot honour refuses the start, naming the key, rather than being ignored.

The file below is a KRaft combined node with every listener secured (clients over SASL_SSL with SCRAM and
PLAIN, an mTLS listener, SASL_SSL between brokers and to the controller), the StandardAuthorizer, and the
connection and authentication limits. Its listeners' TLS contexts and SASL settings are built as the broker
builds them at start (broker/security.py), so a setting that would fail there fails here.
"""

from __future__ import annotations

import pytest

from odradek.broker.config import BrokerConfig, ConfigError, parse_properties
from odradek.broker.context import SecurityProtocol
from odradek.broker.handlers import accepted_versions, advertised_versions, load_handlers
from odradek.broker.network import KafkaProtocol, NetworkServer
from odradek.broker.security import listener_security, node_security
from odradek.broker.server import ip_overrides, listener_max_connections, protected_listeners
from tests.harness.kafka_properties import KAFKA_SERVER_PROPERTIES
from tests.harness.sasl import FakeTransport
from tests.pki import make_pki


@pytest.fixture(scope="module")
def kafka_properties(tmp_path_factory):
    directory = tmp_path_factory.mktemp("kafka-props")
    pki = make_pki(directory)
    text = KAFKA_SERVER_PROPERTIES.format(dir=directory, keystore=pki.pkcs12_keystore("server", "ks-secret"),
                                          truststore=pki.pkcs12_truststore("ts-secret"))
    return parse_properties(text, origin="server.properties")[0]


def load(props: dict, **changes) -> BrokerConfig:
    merged = {**props, **changes}
    return BrokerConfig.from_properties({k: v for k, v in merged.items() if v is not None})


def test_a_secured_kafka_server_properties_loads_and_every_listener_is_secured(kafka_properties):
    config = load(kafka_properties)
    built = {l.name: listener_security(config, l.name, SecurityProtocol(l.security_protocol), lambda m, u: None)
             for l in config.listener_list()}
    assert {name: s.protocol.value for name, s in built.items()} == {
        "CLIENT": "SASL_SSL", "INTERNAL": "SASL_SSL", "CONTROLLER": "SASL_SSL", "MTLS": "SSL"}
    assert built["CLIENT"].mechanisms == ("SCRAM-SHA-512", "PLAIN") and built["CLIENT"].verify_plain("bob", "bob-secret")
    assert built["CONTROLLER"].mechanisms == ("PLAIN",)
    assert built["CLIENT"].reauth_ms == 3_600_000 and built["CLIENT"].max_receive_bytes == 524288
    assert built["MTLS"].principal_mapper.name("CN=carol,O=demo") == "carol"
    # The nodes' own logins: SCRAM to the inter-broker listener, PLAIN to the controller, both over TLS.
    inter = node_security(config, config.inter_broker_listener, "sasl.mechanism.inter.broker.protocol")
    controller = node_security(config, "CONTROLLER", "sasl.mechanism.controller.protocol")
    assert (inter.mechanism, inter.username, controller.mechanism) == ("SCRAM-SHA-512", "admin", "PLAIN")
    assert inter.ssl_context.check_hostname
    # Kafka writes super.users with semicolons, and a principal may hold commas: it renders back as written.
    assert config.to_properties()["super.users"] == "User:admin;User:CN=localhost"
    assert load(kafka_properties, **{"super.users": "User:CN=b,O=x;User:admin"}).super_users == ("User:CN=b,O=x", "User:admin")


def test_security_inter_broker_protocol_names_the_inter_broker_listener(kafka_properties):
    older = load(kafka_properties, **{"inter.broker.listener.name": None,
                                      "listeners": "SASL_SSL://localhost:9093,CONTROLLER://localhost:9097,MTLS://localhost:9094",
                                      "advertised.listeners": None,
                                      "listener.security.protocol.map": "SASL_SSL:SASL_SSL,CONTROLLER:SASL_SSL,MTLS:SSL",
                                      "security.inter.broker.protocol": "SASL_SSL"})
    assert older.inter_broker_listener == "SASL_SSL"
    with pytest.raises(ConfigError, match="only one of") as both:
        load(kafka_properties, **{"security.inter.broker.protocol": "SASL_SSL"})
    assert both.value.key == "security.inter.broker.protocol"
    with pytest.raises(ConfigError, match="not one of the listeners"):
        load(kafka_properties, **{"inter.broker.listener.name": None, "security.inter.broker.protocol": "SSL"})


@pytest.mark.parametrize("key, value", [
    ("sasl.kerberos.service.name", "kafka"),
    ("listener.name.client.sasl.kerberos.service.name", "kafka"),
    ("listener.name.client.gssapi.sasl.jaas.config",
     'com.sun.security.auth.module.Krb5LoginModule required useKeyTab=true keyTab="/k" principal="kafka/h@R";'),
])
def test_kerberos_settings_refuse_to_start_naming_gssapi(kafka_properties, key, value):
    with pytest.raises(ConfigError, match="GSSAPI \\(Kerberos\\) is not served") as refused:
        load(kafka_properties, **{key: value})
    assert refused.value.key == key


@pytest.mark.parametrize("changes, key", [
    ({"sasl.enabled.mechanisms": "GSSAPI,SCRAM-SHA-512,PLAIN"}, "sasl.enabled.mechanisms"),  # not quietly left out
    ({"listener.name.client.sasl.enabled.mechanisms": "GSSAPI"}, "sasl.enabled.mechanisms"),
    ({"sasl.mechanism.inter.broker.protocol": "GSSAPI"}, "sasl.mechanism.inter.broker.protocol"),
])
def test_gssapi_as_a_mechanism_refuses_where_it_would_be_used(kafka_properties, changes, key):
    config = load(kafka_properties, **changes)  # inert on a broker without SASL listeners, as in Kafka
    with pytest.raises(ConfigError, match="GSSAPI \\(Kerberos\\) is not served") as refused:
        for l in config.listener_list():
            listener_security(config, l.name, SecurityProtocol(l.security_protocol))
        node_security(config, config.inter_broker_listener, "sasl.mechanism.inter.broker.protocol")
    assert refused.value.key == key


@pytest.mark.parametrize("changes, key, words", [
    ({"principal.builder.class": "com.acme.LdapPrincipalBuilder"}, "principal.builder.class", "is not served"),
    ({"authorizer.class.name": "kafka.security.authorizer.AclAuthorizer"}, "authorizer.class.name", "is not served"),
    ({"listener.name.client.max.connections.per.ip": "5"}, "listener.name.client.max.connections.per.ip", "not read per listener"),
    ({"listener.name.client.log.retention.ms": "5"}, "listener.name.client.log.retention.ms", "not read per listener"),
    ({"listener.name.client.plain.sasl.login.class": "x"}, "listener.name.client.plain.sasl.login.class", "is unknown"),
    ({"max.connections.per.ip.overrides": "127.0.0.1"}, "max.connections.per.ip.overrides", "host:count"),
    ({"ssl.trustmanager.algorithm": "com.acme.Pinning"}, "ssl.trustmanager.algorithm", "must be one of"),
    ({"ssl.provider": "BCFIPS"}, "ssl.provider", "unknown config"),  # a JCA provider: nothing here to honour it
])
def test_settings_not_honoured_refuse_at_load(kafka_properties, changes, key, words):
    with pytest.raises(ConfigError, match=words) as refused:
        load(kafka_properties, **changes)
    assert refused.value.key == key


@pytest.mark.parametrize("key", [
    "listener.name.client.plain.sasl.server.callback.handler.class",
    "listener.name.client.scram-sha-512.sasl.server.callback.handler.class",
    "sasl.server.callback.handler.class",
])
def test_a_server_callback_handler_of_another_class_refuses_to_start(kafka_properties, key):
    config = load(kafka_properties, **{key: "com.acme.LdapCallbackHandler"})
    with pytest.raises(ConfigError, match="com.acme.LdapCallbackHandler is not served"):
        listener_security(config, "CLIENT", SecurityProtocol.SASL_SSL)


def test_connection_limits_per_address_override_and_per_listener(kafka_properties):
    config = load(kafka_properties)
    overrides = ip_overrides(config)
    assert overrides["127.0.0.1"] == 300 or overrides["127.0.0.1"] == 200  # localhost may resolve to it too
    assert listener_max_connections(config) == {"MTLS": 50}
    with pytest.raises(ConfigError, match="cannot resolve") as unresolvable:
        ip_overrides(load(kafka_properties, **{"max.connections.per.ip.overrides": "no-such-host.invalid:3"}))
    assert unresolvable.value.key == "max.connections.per.ip.overrides"

    registry = load_handlers()
    server = NetworkServer(dispatch=lambda ctx: None, accepted_versions=accepted_versions(registry),
                           advertised_versions=advertised_versions(registry), max_frame_bytes=1 << 20,
                           max_connections=1000, queued_max_requests=500, connections_max_idle_ms=600_000,
                           max_connections_per_ip=1, max_connections_per_ip_overrides={"10.0.0.9": 3},
                           listener_max_connections={"MTLS": 2})

    def connect(listener: str) -> KafkaProtocol:
        proto = KafkaProtocol(server, listener, SecurityProtocol.PLAINTEXT)
        proto.connection_made(FakeTransport())  # from 10.0.0.9
        return proto

    on_mtls = [connect("MTLS") for _ in range(3)]
    assert [c.closed for c in on_mtls] == [False, False, True]  # the listener's own limit
    other = [connect("PLAINTEXT") for _ in range(2)]
    assert [c.closed for c in other] == [False, True]  # the address's override (3), not max.connections.per.ip (1)
    on_mtls[0].connection_lost(None)
    assert server.connections_per_listener == {"MTLS": 1, "PLAINTEXT": 1}
    assert not connect("MTLS").closed

    # max.connections (KIP-402) refuses clients, never the inter-broker or controller listeners.
    assert protected_listeners(config) == {"INTERNAL", "CONTROLLER"}
    server.max_connections, server.protected_listeners = len(server.connections), frozenset({"INTERNAL"})
    server.max_connections_per_ip_overrides = {"10.0.0.9": 100}
    assert connect("PLAINTEXT").closed and not connect("INTERNAL").closed


def test_cipher_suites_bound_the_protocols_as_in_java(kafka_properties):
    import ssl

    def context(suites: str, protocols: str = "TLSv1.2,TLSv1.3") -> ssl.SSLContext:
        config = load(kafka_properties, **{"ssl.cipher.suites": suites, "ssl.enabled.protocols": protocols})
        return listener_security(config, "MTLS", SecurityProtocol.SSL).ssl_context

    tls12_only = context("TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384")  # no TLS 1.3 suite: Java enables no TLS 1.3
    assert (tls12_only.minimum_version, tls12_only.maximum_version) == (ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.TLSv1_2)
    assert {c["name"] for c in tls12_only.get_ciphers() if c["protocol"] == "TLSv1.2"} == {"ECDHE-ECDSA-AES256-GCM-SHA384"}
    tls13_only = context("TLS_AES_256_GCM_SHA384,TLS_AES_128_GCM_SHA256,TLS_CHACHA20_POLY1305_SHA256")
    assert tls13_only.minimum_version == ssl.TLSVersion.TLSv1_3
    with pytest.raises(ConfigError, match="cannot be narrowed") as narrowed:  # would be ignored for TLS 1.3
        context("TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,TLS_AES_256_GCM_SHA384")
    assert narrowed.value.key == "ssl.cipher.suites"
    for suites, protocols in (("TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384", "TLSv1.3"), ("TLS_AES_256_GCM_SHA384", "TLSv1.2")):
        with pytest.raises(ConfigError, match="no cipher suite listed"):  # Java would fail every handshake
            context(suites, protocols)
