"""Per-topic traffic counters (replication/topic_stats.py, Kafka's BrokerTopicMetrics) on a real in-process
broker: what producers append and consumers read is counted per topic, at batch level, and the console
turns two scrapes into rates."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from odradek.broker.testing import running_broker
from odradek.client.consumer import Consumer
from odradek.client.producer import Producer
from odradek.console.sampler import Sampler, add_topic_rates, parse_scrape
from odradek.replication.topic_stats import BrokerTopicStats
from odradek.storage.names import TopicPartition


def values(text: str, name: str) -> dict[str, float]:
    return {s.labels.get("topic", ""): s.value
            for f in text_string_to_metric_families(text) for s in f.samples if s.name == name}


async def test_produce_and_fetch_are_counted_per_topic(tmp_path):
    async with running_broker(tmp_path, num_partitions=2) as kafka:
        producer = await Producer(bootstrap_servers=kafka.bootstrap, linger_ms=5).start()
        try:
            sent = [producer.send("traffic-a", f"a{i}".encode() * 10, partition=i % 2) for i in range(60)]
            for future in sent:
                await (await future)
            await producer.send_and_wait("traffic-b", b"just one")
        finally:
            await producer.close()
        node = kafka.broker.node
        text = node.metrics.render().decode()
        assert values(text, "odradek_topic_messages_in_total") == {"traffic-a": 60, "traffic-b": 1}
        bytes_in = values(text, "odradek_topic_bytes_in_total")
        assert set(bytes_in) == {"traffic-a", "traffic-b"} and bytes_in["traffic-a"] > 60 * 20
        # The bytes in are the batches as the log holds them (the log's size, with no index or other topic).
        on_disk = sum(p.log.size_bytes for tp, p in node.data.partitions.items() if tp.topic == "traffic-a")
        assert bytes_in["traffic-a"] == on_disk
        assert values(text, "odradek_topic_bytes_out_total") == {"traffic-a": 0, "traffic-b": 0}

        consumer = await Consumer(bootstrap_servers=kafka.bootstrap, auto_offset_reset="earliest").start()
        try:
            consumer.assign([TopicPartition("traffic-a", 0), TopicPartition("traffic-a", 1)])
            seen = 0
            while seen < 60:
                batches = await consumer.getmany(timeout_ms=2000)
                seen += sum(len(records) for records in batches.values())
        finally:
            await consumer.close(autocommit=False)
        text = node.metrics.render().decode()
        # Each batch was read once, whole: a consumer that read the topic once read exactly what came in.
        assert values(text, "odradek_topic_bytes_out_total")["traffic-a"] == bytes_in["traffic-a"]
        assert values(text, "odradek_topic_bytes_out_total")["traffic-b"] == 0
        assert values(text, "odradek_replication_bytes_out_total") == {"": 0}  # a lone node has no follower


def test_the_console_derives_per_topic_rates_from_two_scrapes():
    first = parse_scrape('odradek_topic_bytes_in_total{topic="t"} 1000\nodradek_topic_bytes_out_total{topic="t"} 0\n'
                         'odradek_topic_messages_in_total{topic="t"} 10\n', 100.0)
    second = parse_scrape('odradek_topic_bytes_in_total{topic="t"} 6000\nodradek_topic_bytes_out_total{topic="t"} 2500\n'
                          'odradek_topic_messages_in_total{topic="t"} 60\n'
                          'odradek_topic_bytes_in_total{topic="new"} 50\n', 105.0)
    assert first.topics == {"t": {"bytes_in": 1000.0, "bytes_out": 0.0, "messages_in": 10.0}}
    rates: dict = {}
    add_topic_rates(rates, first, second, 5.0)
    assert rates["t"] == {"bytes_in": 1000.0, "bytes_out": 500.0, "messages_in": 10.0}
    assert rates["new"]["bytes_in"] == 10.0  # first seen: counted from 0
    # Another broker's share of the same topic adds up; a counter that went back restarted from 0.
    restarted = parse_scrape('odradek_topic_bytes_in_total{topic="t"} 100\n', 110.0)
    add_topic_rates(rates, second, restarted, 5.0)
    assert rates["t"]["bytes_in"] == 1000.0 + 20.0

    sampler = Sampler(None, [], interval_s=5.0)
    sampler._record_topics(105.0, {"t": {"bytes_in": 1.0, "bytes_out": 2.0, "messages_in": 3.0}})
    sampler._record_topics(110.0, {"t": {"bytes_in": 4.0, "bytes_out": 5.0, "messages_in": 6.0}})
    assert sampler.topic_series_of("t") == {"t": [105.0, 110.0], "bytes_in": [1.0, 4.0], "bytes_out": [2.0, 5.0],
                                            "messages_in": [3.0, 6.0]}
    sampler._record_topics(115.0, {})  # no broker reports it any more: its history goes
    assert sampler.topic_series_of("t")["t"] == [] and sampler.topic_rates == {}


def test_counts_are_kept_per_topic():
    stats = BrokerTopicStats()
    stats.appended("a", 100, 3)
    stats.appended("a", 50, 1)
    stats.sent("a", 70)
    stats.sent("b", 5)
    stats.replicated(40)
    assert sorted(stats.snapshot()) == [("a", 150, 4, 70), ("b", 0, 0, 5)]
    assert stats.replication_bytes_out == 40
