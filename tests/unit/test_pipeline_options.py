"""Parsing the data source's options as Spark's Kafka connector spells them (pipeline/options.py)."""

from __future__ import annotations

import pickle

import pytest

from odradek.client.cluster import TopicPartition as TP
from odradek.pipeline.options import (
    ClientOptions,
    OptionError,
    SinkOptions,
    SourceOptions,
    parse_duration_ms,
)

BOOT = {"kafka.bootstrap.servers": "127.0.0.1:9092"}


def lower(options: dict) -> dict:
    """Spark hands options over with lower-case keys."""
    return {k.lower(): v for k, v in options.items()}


def source(streaming: bool = False, **options) -> SourceOptions:
    return SourceOptions.parse(lower({**BOOT, **options}), streaming=streaming)


def test_defaults_batch_and_stream():
    batch = source(subscribe="a, b,a")
    assert batch.subscription.topics == ("a", "b")
    assert (batch.starting.kind, batch.ending.kind) == ("earliest", "latest")
    assert batch.fail_on_data_loss and not batch.include_headers
    stream = source(True, subscribePattern="raw-.*")
    assert stream.starting.kind == "latest" and stream.ending is None
    assert stream.subscription.matches("raw-events") and not stream.subscription.matches("xraw-events")
    assert stream.max_trigger_delay_ms == 15 * 60 * 1000


def test_options_are_case_insensitive_and_camel_case_names_work():
    o = SourceOptions.parse({**BOOT, "subscribe": "t", "startingoffsets": "earliest", "maxoffsetspertrigger": "7",
                             "includeheaders": "TRUE"}, streaming=True)
    assert o.starting.kind == "earliest" and o.max_offsets_per_trigger == 7 and o.include_headers
    o = SourceOptions.parse({**BOOT, "subscribe": "t", "maxOffsetsPerTrigger": "9"}, streaming=True)
    assert o.max_offsets_per_trigger == 9


def test_exactly_one_subscription():
    with pytest.raises(OptionError, match="exactly one"):
        source()
    with pytest.raises(OptionError, match="exactly one"):
        source(subscribe="a", assign='{"a":[0]}')
    with pytest.raises(OptionError, match="regular expression"):
        source(subscribePattern="(")
    assert source(assign='{"a":[1,0]}').subscription.partitions == (TP("a", 0), TP("a", 1))


def test_bootstrap_is_required():
    with pytest.raises(OptionError, match="bootstrap"):
        SourceOptions.parse({"subscribe": "t"}, streaming=False)


def test_starting_and_ending_rules():
    o = source(startingOffsets='{"t":{"0":5,"1":-2}}', endingOffsets='{"t":{"0":9,"1":-1}}', subscribe="t")
    assert o.starting.mapping == {TP("t", 0): 5, TP("t", 1): -2}
    assert o.ending.mapping == {TP("t", 0): 9, TP("t", 1): -1}
    with pytest.raises(OptionError, match="latest"):
        source(subscribe="t", startingOffsets="latest")
    with pytest.raises(OptionError, match="latest"):
        source(subscribe="t", startingOffsets='{"t":{"0":-1}}')
    with pytest.raises(OptionError, match="earliest"):
        source(subscribe="t", endingOffsets="earliest")
    with pytest.raises(OptionError, match="earliest"):
        source(subscribe="t", endingOffsets='{"t":{"0":-2}}')
    with pytest.raises(OptionError, match="streaming"):
        source(True, subscribe="t", endingOffsets="latest")
    with pytest.raises(OptionError, match="-3"):
        source(subscribe="t", startingOffsets='{"t":{"0":-3}}')
    with pytest.raises(OptionError, match="not assigned"):
        source(assign='{"t":[0]}', startingOffsets='{"t":{"1":0}}')


def test_timestamp_precedence():
    o = source(subscribe="t", startingTimestamp="1000", startingOffsetsByTimestamp='{"t":{"0":5}}',
               startingOffsets="earliest")
    assert (o.starting.kind, o.starting.timestamp) == ("timestamp", 1000)
    o = source(subscribe="t", startingOffsetsByTimestamp='{"t":{"0":5}}', startingOffsets="earliest")
    assert o.starting.kind == "timestamps" and o.starting.mapping == {TP("t", 0): 5}
    o = source(subscribe="t", endingTimestamp="2000")
    assert (o.ending.kind, o.ending.timestamp) == ("timestamp", 2000)
    with pytest.raises(OptionError):
        source(subscribe="t", startingOffsetsByTimestampStrategy="maybe")


def test_trigger_limits():
    o = source(True, subscribe="t", maxOffsetsPerTrigger="100", minOffsetsPerTrigger="10", maxTriggerDelay="30s")
    assert (o.max_offsets_per_trigger, o.min_offsets_per_trigger, o.max_trigger_delay_ms) == (100, 10, 30_000)
    with pytest.raises(OptionError, match="must not exceed"):
        source(True, subscribe="t", maxOffsetsPerTrigger="10", minOffsetsPerTrigger="11")
    with pytest.raises(OptionError, match="at least 1"):
        source(True, subscribe="t", maxOffsetsPerTrigger="0")


@pytest.mark.parametrize("text,ms", [("15m", 900_000), ("30s", 30_000), ("500ms", 500), ("250", 250),
                                     ("2 hours", 7_200_000), ("1d", 86_400_000)])
def test_durations(text, ms):
    assert parse_duration_ms(text) == ms


def test_bad_duration():
    with pytest.raises(OptionError):
        parse_duration_ms("soon")


def test_kafka_passthrough_is_typed_and_split_per_client():
    c = ClientOptions.parse(lower({**BOOT, "kafka.request.timeout.ms": "5000", "kafka.linger.ms": "20",
                                   "kafka.isolation.level": "read_committed", "kafka.fetch.max.bytes": "1000000",
                                   "kafka.acks": "1", "kafka.enable.idempotence": "false",
                                   "kafka.group.id": "ignored", "kafka.some.unknown": "x"}))
    consumer, producer = c.consumer_config(), c.producer_config()
    assert consumer.request_timeout_ms == producer.request_timeout_ms == 5000
    assert consumer.isolation_level == "read_committed" and consumer.fetch_max_bytes == 1_000_000
    assert producer.linger_ms == 20 and producer.required_acks == 1 and producer.enable_idempotence is False
    # the connector's own settings win
    assert consumer.group_id is None and consumer.enable_auto_commit is False
    assert c.ignored == ("some.unknown",)
    assert pickle.loads(pickle.dumps(c)) == c


@pytest.mark.parametrize("name", ["auto.offset.reset", "key.deserializer", "value.serializer",
                                  "enable.auto.commit", "interceptor.classes"])
def test_rejected_kafka_settings(name):
    with pytest.raises(OptionError, match=name):
        ClientOptions.parse({**BOOT, f"kafka.{name}": "x"})


def test_security_settings_reach_the_client():
    options = ClientOptions.parse({**BOOT, "kafka.security.protocol": "SASL_SSL", "kafka.sasl.mechanism": "SCRAM-SHA-512",
                                   "kafka.sasl.jaas.config": 'org.apache.kafka.common.security.scram.ScramLoginModule '
                                                             'required username="alice" password="a\\"b";',
                                   "kafka.ssl.ca.location": "/ca.pem"})
    config = options.consumer_config()
    assert (config.security_protocol, config.sasl_mechanism, config.sasl_username, config.sasl_password,
            config.ssl_ca_location) == ("SASL_SSL", "SCRAM-SHA-512", "alice", 'a"b', "/ca.pem")
    with pytest.raises(OptionError, match="sasl"):  # SASL without credentials fails on the driver
        ClientOptions.parse({**BOOT, "kafka.security.protocol": "SASL_SSL"})


def test_secrets_are_redacted_where_the_options_are_printed():
    secrets = {"kafka.sasl.password": "pw-1", "kafka.ssl.key.password": "pw-2", "kafka.ssl.keystore.password": "pw-3",
               "kafka.sasl.oauthbearer.config": "principal=pw-4"}
    options = ClientOptions.parse({**BOOT, "kafka.security.protocol": "SASL_SSL", "kafka.sasl.username": "alice",
                                   **secrets, "kafka.client.id": "visible"})
    source = SourceOptions.parse({**BOOT, "subscribe": "t", "kafka.sasl.jaas.config":
                                  'x required username="alice" password="pw-5";'}, streaming=False)
    for text in (repr(options), str(options), repr(source)):
        assert "[redacted]" in text and "alice" in text
        assert not any(f"pw-{i}" in text for i in range(1, 6)), text
    assert pickle.loads(pickle.dumps(options)).consumer_config().sasl_password == "pw-1"  # only the printing


def test_bad_kafka_values_fail_at_parse_time():
    with pytest.raises(OptionError):
        ClientOptions.parse({**BOOT, "kafka.linger.ms": "soon"})
    with pytest.raises(OptionError):
        ClientOptions.parse({**BOOT, "kafka.compression.type": "brotli"})


def test_sink_options():
    s = SinkOptions.parse(lower({**BOOT, "topic": "out"}), streaming=True)
    assert s.topic == "out" and s.exactly_once and s.commit_topic == "_odradek-spark-sink-commits"
    s = SinkOptions.parse(lower({**BOOT, "sink.exactlyOnce": "false", "sink.commitTopic": "c"}), streaming=True)
    assert not s.exactly_once and s.commit_topic == "c" and s.topic is None
    assert not SinkOptions.parse(BOOT, streaming=False).exactly_once
    with pytest.raises(OptionError, match="streaming"):
        SinkOptions.parse(lower({**BOOT, "sink.exactlyOnce": "true"}), streaming=False)
    with pytest.raises(OptionError, match="for reading"):
        SinkOptions.parse(lower({**BOOT, "subscribe": "t"}), streaming=False)


def test_exactly_once_sink_options_must_allow_its_transactions():
    # Each task's producer is transactional, with a transactional id the sink derives itself.
    for refused in ({"kafka.acks": "1"}, {"kafka.enable.idempotence": "false"}):
        with pytest.raises(OptionError, match="sink.exactlyOnce=false"):
            SinkOptions.parse(lower({**BOOT, **refused}), streaming=True)
        at_least_once = SinkOptions.parse(lower({**BOOT, **refused, "sink.exactlyOnce": "false"}), streaming=True)
        assert not at_least_once.exactly_once
    for streaming in (True, False):
        with pytest.raises(OptionError, match="transactional.id"):
            SinkOptions.parse(lower({**BOOT, "kafka.transactional.id": "mine"}), streaming=streaming)
