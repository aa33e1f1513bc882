"""BrokerConfig: Kafka's names and defaults, server.properties parsing, precedence, refusals."""

from __future__ import annotations

from tests.harness.kafka_properties import KAFKA4_SAMPLE

import pytest
from pydantic import ValidationError

from odradek.broker.config import (
    BrokerConfig,
    ConfigError,
    ConfigType,
    Listener,
    broker_config_keys,
    env_var_name,
    load_config,
    parse_listener,
    parse_listeners,
    parse_properties,
)


def write(tmp_path, text: str):
    path = tmp_path / "server.properties"
    path.write_text(text)
    return path


# ---- defaults


def test_defaults_give_a_single_broker():
    cfg = load_config(None, [], {})
    assert cfg.node_id == 1
    assert cfg.listener_list() == [Listener("PLAINTEXT", "localhost", 9092, "PLAINTEXT")]
    assert cfg.advertised_listener_list() == cfg.listener_list()
    assert cfg.data_dirs == ("./odradek-data",)
    assert cfg.process_roles == ("broker", "controller")
    assert cfg.voters() == []
    assert cfg.metrics_port == 0
    assert cfg.log_format == "console" and cfg.log_level == "INFO"
    assert cfg.explicit_keys == frozenset()


@pytest.mark.parametrize(
    "key, value",
    [
        ("num.partitions", 1),
        ("default.replication.factor", 1),
        ("auto.create.topics.enable", True),
        ("message.max.bytes", 1048588),
        ("socket.request.max.bytes", 104857600),
        ("connections.max.idle.ms", 600000),
        ("max.connections", 2147483647),
        ("queued.max.requests", 500),
        ("num.io.threads", 8),
        ("log.segment.bytes", 1073741824),
        ("log.roll.hours", 168),
        ("log.roll.ms", None),
        ("log.retention.hours", 168),
        ("log.retention.minutes", None),
        ("log.retention.ms", None),
        ("log.retention.bytes", -1),
        ("log.retention.check.interval.ms", 300000),
        ("log.cleaner.enable", True),
        ("log.cleanup.policy", ("delete",)),
        ("log.index.interval.bytes", 4096),
        ("log.index.size.max.bytes", 10485760),
        ("log.flush.interval.messages", 2**63 - 1),
        ("log.flush.interval.ms", None),
        ("log.message.timestamp.type", "CreateTime"),
        ("offsets.topic.num.partitions", 50),
        ("offsets.retention.minutes", 10080),
        ("group.initial.rebalance.delay.ms", 3000),
        ("group.min.session.timeout.ms", 6000),
        ("group.max.session.timeout.ms", 1800000),
        ("transaction.state.log.num.partitions", 50),
        ("min.insync.replicas", 1),
        ("compression.type", "producer"),
    ],
)
def test_kafka_defaults(key, value):
    assert BrokerConfig().get(key) == value


def test_derived_durations():
    cfg = BrokerConfig()
    assert cfg.log_retention_ms_effective == 168 * 3600 * 1000
    assert cfg.log_roll_ms_effective == 168 * 3600 * 1000
    assert cfg.log_flush_interval_ms_effective == 2**63 - 1
    assert cfg.offsets_retention_ms == 10080 * 60 * 1000
    # ms beats minutes beats hours; any negative value means "forever".
    assert load_config(None, ["log.retention.hours=1"], {}).log_retention_ms_effective == 3600000
    assert (
        load_config(None, ["log.retention.hours=1", "log.retention.minutes=2"], {}).log_retention_ms_effective
        == 120000
    )
    both = load_config(None, ["log.retention.minutes=2", "log.retention.ms=5"], {})
    assert both.log_retention_ms_effective == 5
    assert load_config(None, ["log.retention.ms=-7"], {}).log_retention_ms_effective == -1
    assert load_config(None, ["log.roll.hours=2"], {}).log_roll_ms_effective == 7200000
    assert load_config(None, ["log.roll.hours=2", "log.roll.ms=10"], {}).log_roll_ms_effective == 10


def test_every_key_has_a_kafka_type_and_doc():
    keys = broker_config_keys()
    assert len({k for k, _, _ in keys}) == len(keys)
    for key, ktype, doc in keys:
        assert ktype != ConfigType.UNKNOWN, key
        assert doc, key


# ---- properties files


def test_properties_file_syntax(tmp_path):
    path = write(
        tmp_path,
        "# a comment\n"
        "! another comment\n"
        "\n"
        "   num.partitions = 3  \n"
        "log.dirs: /data/a,/data/b\n"
        "log.retention.hours 24\n"
        "listeners=PLAINTEXT://:9092,\\\n"
        "    CONTROLLER://:9093\n"
        "broker.rack=rack\\u0041\\=1\n"
        "num.partitions=4\n",
    )
    cfg = load_config(str(path), [], {})
    assert cfg.num_partitions == 4  # the later duplicate wins
    assert cfg.data_dirs == ("/data/a", "/data/b")
    assert cfg.log_retention_hours == 24
    assert [listener.name for listener in cfg.listener_list()] == ["PLAINTEXT", "CONTROLLER"]
    assert [listener.name for listener in cfg.client_listeners()] == ["PLAINTEXT"]
    assert cfg.broker_rack == "rackA=1"
    assert cfg.explicit_keys == {
        "num.partitions",
        "log.dirs",
        "log.retention.hours",
        "listeners",
        "broker.rack",
    }


def test_parse_properties_reports_lines():
    props, sources = parse_properties("a=1\n\n# c\nb = two words \n", origin="f")
    assert props == {"a": "1", "b": "two words"}
    assert sources == {"a": "f:1", "b": "f:4"}


def test_kafka_sample_config_loads(tmp_path):
    # The KRaft sample server.properties Kafka ships (trimmed of comments) loads unchanged.
    path = write(
        tmp_path,
        "process.roles=broker,controller\n"
        "node.id=1\n"
        "controller.quorum.voters=1@localhost:9093\n"
        "listeners=PLAINTEXT://:9092,CONTROLLER://:9093\n"
        "inter.broker.listener.name=PLAINTEXT\n"
        "advertised.listeners=PLAINTEXT://localhost:9092\n"
        "controller.listener.names=CONTROLLER\n"
        "listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SSL:SSL\n"
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
        "log.retention.check.interval.ms=300000\n",
    )
    cfg = load_config(path, [], {})
    assert cfg.voters()[0].node_id == 1 and cfg.voters()[0].port == 9093
    assert cfg.controller_listeners()[0].port == 9093
    assert cfg.inter_broker_listener == "PLAINTEXT"
    assert cfg.advertised_listener_list() == [Listener("PLAINTEXT", "localhost", 9092)]




def test_kafka4_sample_config_loads(tmp_path):
    from odradek.broker.server import refuse_unserved_settings

    cfg = load_config(write(tmp_path, KAFKA4_SAMPLE), [], {})
    refuse_unserved_settings(cfg)
    # The advertised controller listener is the controller's endpoint, not the clients' (the broker registers
    # advertised_listener_list as its endpoints: components.registration_endpoints).
    assert cfg.advertised_listener_list() == [Listener("PLAINTEXT", "localhost", 9092)]
    assert cfg.advertised_controller_listener_list() == [Listener("CONTROLLER", "localhost", 9093)]
    # controller.quorum.bootstrap.servers naming this controller alone: the standalone quorum of one.
    assert [str(v) for v in cfg.voters()] == ["1@localhost:9093"]
    # Naming another node is a dynamic quorum to join, which is not served.
    other = load_config(write(tmp_path, KAFKA4_SAMPLE), ["controller.quorum.bootstrap.servers=ctl:9093"], {})
    assert other.voters() == []
    with pytest.raises(ConfigError, match="dynamic controller quorum"):
        refuse_unserved_settings(other)


def test_shipped_server_properties_loads():
    import pathlib

    path = pathlib.Path(__file__).resolve().parents[2] / "configs" / "server.properties"
    cfg = load_config(path, [], {})
    assert cfg.node_id == 1
    assert cfg.listener_list()[0].port == 9092


def test_missing_file():
    with pytest.raises(ConfigError, match="cannot read config file"):
        load_config("/nonexistent/odradek/server.properties", [], {})


# ---- precedence


def test_precedence_file_env_override(tmp_path):
    path = write(tmp_path, "num.partitions=2\nlog.dirs=/from/file\nnum.io.threads=4\n")
    env = {
        "ODRADEK_NUM_PARTITIONS": "3",
        "ODRADEK_LOG_DIRS": "/from/env",
        "UNRELATED": "x",
        "ODRADEK_BOOTSTRAP_SERVERS": "y",  # the client CLI's, not a broker key: left alone
        "ODRADEK_LONG": "1",  # the test suite's
    }
    cfg = load_config(path, ["num.partitions=5"], env)
    assert cfg.num_partitions == 5  # override beats env beats file
    assert cfg.data_dirs == ("/from/env",)  # env beats file
    assert cfg.num_io_threads == 4  # file alone
    assert load_config(path, [], env).num_partitions == 3


def test_env_var_names():
    assert env_var_name("log.dirs") == "ODRADEK_LOG_DIRS"
    assert env_var_name("advertised.listeners") == "ODRADEK_ADVERTISED_LISTENERS"
    cfg = load_config(None, [], {"ODRADEK_METRICS_PORT": "9404", "ODRADEK_LOG_FORMAT": "JSON"})
    assert cfg.metrics_port == 9404 and cfg.log_format == "json"


def test_empty_value_unsets_an_optional_key(tmp_path):
    path = write(tmp_path, "log.retention.ms=1000\n")
    assert load_config(path, ["log.retention.ms="], {}).log_retention_ms is None


def test_unknown_odradek_variable_refuses_naming_it_and_its_key():
    with pytest.raises(ConfigError) as info:
        load_config(None, [], {"ODRADEK_NUM_PARTITION": "3"})
    message = str(info.value)
    assert "ODRADEK_NUM_PARTITION" in message and "'num.partition'" in message
    assert "did you mean ODRADEK_NUM_PARTITIONS, for 'num.partitions'" in message
    assert info.value.key == "num.partition" and info.value.source == "environment variable ODRADEK_NUM_PARTITION"
    with pytest.raises(ConfigError, match="ODRADEK_BOOTSTRAP_SERVERS"):  # a non-config name misspelt
        load_config(None, [], {"ODRADEK_BOOTSTRAP_SERVER": "h:9092"})
    with pytest.raises(ConfigError, match="no environment form"):
        load_config(None, [], {"ODRADEK_LISTENER_NAME_CLIENT_SSL_KEYSTORE_LOCATION": "/ks"})
    # Names without the prefix, and the documented non-config names, are not the broker's business.
    assert load_config(None, [], {"KAFKA_NUM_PARTITION": "3", "ODRADEK_SIM_SEED": "7"}).num_partitions == 1


def test_non_config_names_are_listed_in_the_readme():
    import pathlib

    from odradek.broker.config import NON_CONFIG_ENV_VARS

    readme = (pathlib.Path(__file__).resolve().parents[2] / "README.md").read_text()
    assert [name for name in sorted(NON_CONFIG_ENV_VARS) if f"`{name}`" not in readme] == []


def test_default_env_is_os_environ(monkeypatch):
    monkeypatch.setenv("ODRADEK_NUM_PARTITIONS", "7")
    assert load_config().num_partitions == 7


# ---- refusals name the key


def test_unknown_key_refused_with_suggestion(tmp_path):
    path = write(tmp_path, "num.partitions=1\nnum.partition=3\n")
    with pytest.raises(ConfigError) as info:
        load_config(path, [], {})
    assert info.value.key == "num.partition"
    assert "unknown config 'num.partition'" in str(info.value)
    assert "did you mean 'num.partitions'" in str(info.value)
    assert "server.properties:2" in str(info.value)


def test_bad_value_message():
    with pytest.raises(ConfigError) as info:
        load_config(None, ["num.partitions=0"], {})
    assert "invalid value for 'num.partitions': must be >= 1 (got '0')" in str(info.value)
    assert info.value.key == "num.partitions"


def test_bad_value_from_env_names_the_variable():
    with pytest.raises(ConfigError, match="environment variable ODRADEK_NUM_IO_THREADS"):
        load_config(None, [], {"ODRADEK_NUM_IO_THREADS": "many"})


@pytest.mark.parametrize(
    "override, key, reason",
    [
        ("num.partitions=abc", "num.partitions", "must be an integer"),
        ("num.partitions=1.5", "num.partitions", "must be an integer"),
        ("message.max.bytes=3000000000", "message.max.bytes", "32-bit"),
        ("auto.create.topics.enable=yes", "auto.create.topics.enable", "must be true or false"),
        ("log.cleanup.policy=remove", "log.cleanup.policy", "compact"),
        ("log.message.timestamp.type=Now", "log.message.timestamp.type", "CreateTime"),
        ("compression.type=brotli", "compression.type", "zstd"),
        ("log.cleaner.min.cleanable.ratio=1.5", "log.cleaner.min.cleanable.ratio", "<= 1"),
        ("metrics.port=70000", "metrics.port", "0..65535"),
        ("log.format=xml", "log.format", "console"),
        ("log.level=loud", "log.level", "INFO"),
        ("process.roles=observer", "process.roles", "broker"),
        ("controller.quorum.voters=1@host", "controller.quorum.voters", "id@host:port"),
        ("controller.quorum.voters=1@a:1,1@b:2", "controller.quorum.voters", "twice"),
        ("controller.quorum.voters=2@a:9093", "controller.quorum.voters", "node.id"),
        ("broker.id=2", "broker.id", "node.id"),
        (
            "group.min.session.timeout.ms=2000000",
            "group.min.session.timeout.ms",
            "group.max.session.timeout.ms",
        ),
        ("compression.gzip.level=0", "compression.gzip.level", "-1 or 1..9"),
        ("log.segment.bytes=10", "log.segment.bytes", ">= 64"),
    ],
)
def test_bad_values_refused(override, key, reason):
    with pytest.raises(ConfigError) as info:
        load_config(None, [override], {})
    assert info.value.key == key
    assert f"'{key}'" in str(info.value)
    assert reason in str(info.value)


def test_malformed_override():
    with pytest.raises(ConfigError, match="key=value"):
        load_config(None, ["num.partitions"], {})


def test_broker_only_needs_voters():
    with pytest.raises(ConfigError, match="controller.quorum.voters"):
        load_config(None, ["process.roles=broker"], {})
    cfg = load_config(None, ["process.roles=broker", "controller.quorum.voters=2@c:9093"], {})
    assert cfg.voters()[0].host == "c"


# ---- listeners


def test_parse_listener_forms():
    assert parse_listener("PLAINTEXT://localhost:9092") == Listener("PLAINTEXT", "localhost", 9092)
    assert parse_listener("plaintext://:0") == Listener("PLAINTEXT", "", 0)
    assert parse_listener("EXTERNAL://[::1]:19092", {"EXTERNAL": "SSL"}) == Listener(
        "EXTERNAL", "::1", 19092, "SSL"
    )
    assert str(parse_listener("EXTERNAL://[::1]:19092", {"EXTERNAL": "SSL"})) == "EXTERNAL://[::1]:19092"


@pytest.mark.parametrize(
    "text",
    [
        "localhost:9092",
        "PLAINTEXT://localhost",
        "PLAINTEXT://localhost:99999",
        "PLAIN TEXT://h:1",
        "PLAINTEXT://h:x",
    ],
)
def test_parse_listener_refuses(text):
    with pytest.raises(ValueError):
        parse_listener(text)


def test_parse_listeners_refuses_duplicates():
    with pytest.raises(ValueError, match="twice"):
        parse_listeners("PLAINTEXT://:9092,PLAINTEXT://:9093")
    with pytest.raises(ValueError, match="9092"):
        parse_listeners("A://:9092,B://:9092")
    # Two ephemeral ports are fine.
    assert len(parse_listeners("A://:0,B://:0")) == 2


def test_listener_needs_a_security_protocol():
    with pytest.raises(ConfigError, match="listener.security.protocol.map"):
        load_config(None, ["listeners=EXTERNAL://localhost:9092"], {})
    cfg = load_config(
        None, ["listeners=EXTERNAL://localhost:9092", "listener.security.protocol.map=EXTERNAL:PLAINTEXT"], {}
    )
    assert cfg.listener_list()[0].security_protocol == "PLAINTEXT"


def test_meta_address_must_not_be_advertised():
    with pytest.raises(ConfigError) as info:
        load_config(None, ["listeners=PLAINTEXT://0.0.0.0:9092"], {})
    assert info.value.key == "listeners"
    cfg = load_config(
        None, ["listeners=PLAINTEXT://0.0.0.0:9092", "advertised.listeners=PLAINTEXT://broker1:9092"], {}
    )
    assert cfg.advertised_listener_list() == [Listener("PLAINTEXT", "broker1", 9092)]


def test_advertised_listener_must_exist():
    with pytest.raises(ConfigError, match="not in listeners"):
        load_config(None, ["advertised.listeners=SSL://h:9093"], {})


def test_advertised_controller_listener_is_for_the_quorum_not_clients():
    # Kafka 3.9+ (KIP-853) accepts the controller listener in advertised.listeners: it is the controller's
    # endpoint for the other nodes; clients' Metadata never carries it.
    cfg = load_config(None, [
        "listeners=PLAINTEXT://0.0.0.0:9092,CONTROLLER://0.0.0.0:9093",
        "advertised.listeners=PLAINTEXT://broker1:9092,CONTROLLER://broker1:9093",
        "controller.listener.names=CONTROLLER", "controller.quorum.voters=1@broker1:9093",
    ], {})
    assert cfg.advertised_listener_list() == [Listener("PLAINTEXT", "broker1", 9092)]
    assert cfg.advertised_controller_listener_list() == [Listener("CONTROLLER", "broker1", 9093)]
    # Not advertised: the controller listener as it is bound (0.0.0.0 as "this machine").
    cfg = load_config(None, [
        "listeners=PLAINTEXT://0.0.0.0:9092,CONTROLLER://0.0.0.0:9093",
        "advertised.listeners=PLAINTEXT://broker1:9092", "controller.listener.names=CONTROLLER",
    ], {})
    assert cfg.advertised_controller_listener_list() == [Listener("CONTROLLER", "", 9093)]
    with pytest.raises(ConfigError, match="meta-address '0.0.0.0' for the controller listener"):
        load_config(None, ["listeners=PLAINTEXT://h:9092,CONTROLLER://h:9093", "controller.listener.names=CONTROLLER",
                           "advertised.listeners=PLAINTEXT://h:9092,CONTROLLER://0.0.0.0:9093"], {})
    with pytest.raises(ConfigError, match="not a controller listener") as info:
        load_config(None, ["listeners=PLAINTEXT://h:9092,CONTROLLER://h:9093", "controller.listener.names=CONTROLLER",
                           "advertised.listeners=CONTROLLER://h:9093"], {})
    assert info.value.key == "advertised.listeners"


def test_metrics_host_defaults_to_the_first_listeners_host():
    def host(*overrides):
        return load_config(None, list(overrides), {}).metrics_host

    assert host("listeners=PLAINTEXT://127.0.0.1:9092") == "127.0.0.1"
    assert host() == "localhost"  # the default listener
    # A wildcard listener means every interface, as Kafka users expect; an empty host binds 0.0.0.0.
    assert host("listeners=PLAINTEXT://0.0.0.0:9092", "advertised.listeners=PLAINTEXT://h:9092") == "0.0.0.0"
    assert host("listeners=PLAINTEXT://:9092") == "0.0.0.0"
    # The first client listener, not a controller listener listed first.
    assert host("listeners=CONTROLLER://127.0.0.2:9093,PLAINTEXT://127.0.0.1:9092",
                "controller.listener.names=CONTROLLER") == "127.0.0.1"
    assert host("listeners=PLAINTEXT://0.0.0.0:9092", "advertised.listeners=PLAINTEXT://h:9092",
                "metrics.host=127.0.0.1") == "127.0.0.1"
    assert load_config(None, [], {"ODRADEK_METRICS_HOST": "10.0.0.1"}).metrics_host == "10.0.0.1"


def test_empty_host_is_advertised_as_hostname():
    import socket

    cfg = load_config(None, ["listeners=PLAINTEXT://:9092"], {})
    assert cfg.advertised_listener_list() == [Listener("PLAINTEXT", socket.gethostname(), 9092)]


# ---- rendering


def test_to_properties_round_trips():
    cfg = load_config(
        None, ["log.cleanup.policy=compact,delete", "num.partitions=3", "log.preallocate=TRUE"], {}
    )
    props = cfg.to_properties(include_defaults=False)
    assert props == {"log.cleanup.policy": "compact,delete", "num.partitions": "3", "log.preallocate": "true"}
    everything = {k: v for k, v in cfg.to_properties().items() if v is not None}
    again = BrokerConfig.from_properties(everything)
    assert again.to_properties() == cfg.to_properties()


def test_config_is_immutable():
    cfg = BrokerConfig()
    with pytest.raises(ValidationError, match="frozen"):
        cfg.num_partitions = 3  # type: ignore[misc]


def test_keyword_construction():
    cfg = BrokerConfig(num_partitions=3, **{"log.retention.ms": 10})
    assert cfg.num_partitions == 3 and cfg.log_retention_ms_effective == 10
    assert cfg.explicit_keys == {"num.partitions", "log.retention.ms"}


def test_from_properties_accepts_python_values(tmp_path):
    # What `Broker(log_dirs=tmp_path, num_partitions=3)` hands over.
    cfg = BrokerConfig.from_properties(
        {"log.dirs": tmp_path, "num.partitions": 3, "log.cleaner.enable": False}
    )
    assert cfg.data_dirs == (str(tmp_path),)
    assert cfg.num_partitions == 3 and cfg.log_cleaner_enable is False
    with pytest.raises(ConfigError, match="'num.partitions'"):
        BrokerConfig.from_properties({"num.partitions": True})
    with pytest.raises(ConfigError, match="unknown config 'log_dirs'"):
        BrokerConfig.from_properties({"log_dirs": "x"})
