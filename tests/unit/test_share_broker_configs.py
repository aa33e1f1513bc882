"""group.share.* and share.coordinator.* broker configs against Kafka 4.4's ShareGroupConfig and
ShareCoordinatorConfig (names, defaults and ranges read from the 4.4 jars): the ones this slice checked."""

from __future__ import annotations

import pytest

from odradek.broker.config import BrokerConfig, ConfigError


def test_defaults_are_kafkas():
    c = BrokerConfig()
    assert (c.share_group_min_delivery_count_limit, c.share_group_max_delivery_count_limit) == (2, 10)
    assert (c.share_group_min_partition_max_record_locks, c.share_group_max_partition_max_record_locks) == (100, 4000)
    assert c.share_coordinator_snapshot_update_records_per_snapshot == 500
    assert (c.share_coordinator_cold_partition_snapshot_interval_ms,
            c.share_coordinator_state_topic_prune_interval_ms) == (300000, 300000)


@pytest.mark.parametrize("props,key,words", [
    ({"group.share.min.delivery.count.limit": "6"}, "group.share.min.delivery.count.limit", "<= 5"),
    ({"group.share.max.delivery.count.limit": "4"}, "group.share.max.delivery.count.limit", ">= 5"),
    ({"group.share.max.delivery.count.limit": "26"}, "group.share.max.delivery.count.limit", "<= 25"),
    ({"group.share.min.partition.max.record.locks": "2001"}, "group.share.min.partition.max.record.locks", "<= 2000"),
    ({"group.share.max.partition.max.record.locks": "1999"}, "group.share.max.partition.max.record.locks", ">= 2000"),
    ({"group.share.partition.max.record.locks": "5000"}, "group.share.partition.max.record.locks",
     "group.share.max.partition.max.record.locks (4000)"),
    ({"group.share.max.share.sessions": "100"}, "group.share.max.share.sessions", "group.share.max.size (200)"),
    ({"share.coordinator.snapshot.update.records.per.snapshot": "501"},
     "share.coordinator.snapshot.update.records.per.snapshot", "<= 500"),
    ({"share.coordinator.state.topic.prune.interval.ms": "0"},
     "share.coordinator.state.topic.prune.interval.ms", ">= 1"),
])
def test_values_kafka_refuses_are_refused_naming_the_rule(props, key, words):
    with pytest.raises(ConfigError) as e:
        BrokerConfig.from_properties(props)
    assert key in str(e.value) and words in str(e.value), str(e.value)


def test_moving_a_bound_moves_what_a_value_may_be():
    c = BrokerConfig.from_properties({"group.share.max.delivery.count.limit": "20",
                                      "group.share.delivery.count.limit": "10",
                                      "group.share.max.partition.max.record.locks": "8000",
                                      "group.share.partition.max.record.locks": "6000"})
    assert (c.share_group_delivery_count_limit, c.share_group_partition_max_record_locks) == (10, 6000)
