"""A server.properties file written for Apache Kafka, which the broker must start from unchanged."""

from __future__ import annotations



KAFKA_SERVER_PROPERTIES = r"""
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@localhost:9097
listeners=CLIENT://localhost:9093,INTERNAL://localhost:9096,CONTROLLER://localhost:9097,MTLS://localhost:9094
advertised.listeners=CLIENT://localhost:9093,INTERNAL://localhost:9096,MTLS://localhost:9094
listener.security.protocol.map=CLIENT:SASL_SSL,INTERNAL:SASL_SSL,CONTROLLER:SASL_SSL,MTLS:SSL
inter.broker.listener.name=INTERNAL
controller.listener.names=CONTROLLER
log.dirs={dir}/data

sasl.enabled.mechanisms=SCRAM-SHA-512,PLAIN
sasl.mechanism.inter.broker.protocol=SCRAM-SHA-512
sasl.mechanism.controller.protocol=PLAIN
listener.name.controller.sasl.enabled.mechanisms=PLAIN
listener.name.internal.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required \
    username="admin" password="admin-secret";
listener.name.internal.plain.sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required \
    user_admin="admin-secret";
listener.name.controller.plain.sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required \
    username="admin" password="admin-secret" user_admin="admin-secret";
listener.name.client.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
listener.name.client.plain.sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required \
    user_admin="admin-secret" user_bob="bob-secret";
listener.name.client.plain.sasl.server.callback.handler.class=org.apache.kafka.common.security.plain.internals.PlainServerCallbackHandler

ssl.keystore.type=PKCS12
ssl.keystore.location={keystore}
ssl.keystore.password=ks-secret
ssl.key.password=ks-secret
ssl.truststore.type=PKCS12
ssl.truststore.location={truststore}
ssl.truststore.password=ts-secret
ssl.client.auth=required
ssl.endpoint.identification.algorithm=https
ssl.enabled.protocols=TLSv1.2,TLSv1.3
ssl.cipher.suites=TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,\
    TLS_AES_256_GCM_SHA384,TLS_AES_128_GCM_SHA256,TLS_CHACHA20_POLY1305_SHA256
ssl.principal.mapping.rules=RULE:^CN=([^,]+),.*$/$1/L,DEFAULT
ssl.secure.random.implementation=SHA1PRNG
ssl.keymanager.algorithm=SunX509
ssl.trustmanager.algorithm=PKIX
principal.builder.class=org.apache.kafka.common.security.authenticator.DefaultKafkaPrincipalBuilder

authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer
super.users=User:admin;User:CN=localhost
allow.everyone.if.no.acl.found=false

sasl.server.max.receive.size=524288
connection.failed.authentication.delay.ms=100
connections.max.reauth.ms=3600000
max.connections=1000
max.connections.per.ip=100
max.connections.per.ip.overrides=127.0.0.1:200,localhost:300
listener.name.mtls.max.connections=50
"""

# Kafka 4's config/server.properties as shipped (combined mode, a standalone quorum), comments dropped.
KAFKA4_SAMPLE = (
    # Kafka 4.0's config/server.properties (trimmed of comments): a dynamic quorum of this one controller
    # (controller.quorum.bootstrap.servers, formatted with --standalone), the controller listener advertised.
    "process.roles=broker,controller\n"
    "node.id=1\n"
    "controller.quorum.bootstrap.servers=localhost:9093\n"
    "listeners=PLAINTEXT://:9092,CONTROLLER://:9093\n"
    "inter.broker.listener.name=PLAINTEXT\n"
    "advertised.listeners=PLAINTEXT://localhost:9092,CONTROLLER://localhost:9093\n"
    "controller.listener.names=CONTROLLER\n"
    "listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,"
    "SASL_SSL:SASL_SSL\n"
    "num.network.threads=3\n"
    "num.io.threads=8\n"
    "socket.send.buffer.bytes=102400\n"
    "socket.receive.buffer.bytes=102400\n"
    "socket.request.max.bytes=104857600\n"
    "log.dirs=/tmp/kraft-combined-logs\n"
    "num.partitions=1\n"
    "num.recovery.threads.per.data.dir=1\n"
    "offsets.topic.replication.factor=1\n"
    "share.coordinator.state.topic.replication.factor=1\n"
    "share.coordinator.state.topic.min.isr=1\n"
    "transaction.state.log.replication.factor=1\n"
    "transaction.state.log.min.isr=1\n"
    "log.retention.hours=168\n"
    "log.segment.bytes=1073741824\n"
    "log.retention.check.interval.ms=300000\n"
)
