"""broker/health_metrics.py on a lone in-process broker: the quorum, controller, log directory, group lag and
transaction families as a scrape builds them, the bound on group-partition series, and a scrape that still
answers when the event loop cannot run its read in time."""

from __future__ import annotations

import asyncio
import threading

from prometheus_client.parser import text_string_to_metric_families

from odradek.broker.health_metrics import ClusterHealthCollector
from odradek.broker.metrics import Metrics
from odradek.broker.testing import running_broker
from odradek.client.consumer import Consumer
from odradek.client.producer import Producer
from odradek.storage.names import TopicPartition


def values(text: str, name: str) -> dict[tuple[tuple[str, str], ...], float]:
    return {tuple(sorted(s.labels.items())): s.value
            for f in text_string_to_metric_families(text) for s in f.samples if s.name == name}


async def test_a_lone_node_reports_its_quorum_dirs_group_lag_and_transactions(tmp_path):
    async with running_broker(tmp_path, num_partitions=1) as kafka:
        producer = await Producer(bootstrap_servers=kafka.bootstrap).start()
        try:
            for i in range(10):
                await producer.send_and_wait("lagging", f"r{i}".encode())
        finally:
            await producer.close()
        for group, offset in (("g-a", 3), ("g-b", 10), ("g-c", 0)):
            consumer = await Consumer(bootstrap_servers=kafka.bootstrap, group_id=group).start()
            try:
                await consumer.commit({TopicPartition("lagging", 0): offset})
            finally:
                await consumer.close(autocommit=False)
        txn = await Producer(bootstrap_servers=kafka.bootstrap, transactional_id="health-unit").start()
        try:
            await txn.init_transactions()
            txn.begin_transaction()
            await txn.send_and_wait("lagging", b"in a transaction")
            await txn.commit_transaction()
            txn.begin_transaction()
            await txn.send_and_wait("lagging", b"left open")

            node = kafka.broker.node
            text = node.metrics.render().decode()  # on the loop's thread: read directly
            one = ()
            assert values(text, "odradek_raft_current_leader") == {one: 1}
            assert values(text, "odradek_active_controller_count") == {one: 1}
            assert values(text, "odradek_raft_voter_lag_records") == {(("voter", "1"),): 0}
            assert values(text, "odradek_metadata_lag_records") == {one: 0}
            (online,) = values(text, "odradek_log_dir_online").values()
            (size,) = values(text, "odradek_log_dir_size_bytes").values()
            assert online == 1 and size > 0
            lag = {dict(k)["group"]: v for k, v in values(text, "odradek_consumer_group_lag").items()}
            # 10 records, a commit marker and the open transaction's record: the high watermark is 12.
            hw = values(text, "odradek_partition_high_watermark")[(("partition", "0"), ("topic", "lagging"))]
            assert lag == {"g-a": hw - 3, "g-b": hw - 10, "g-c": hw}
            assert values(text, "odradek_transactions_ongoing") == {one: 1}
            assert values(text, "odradek_transactions_completed_total")[(("result", "committed"),)] == 1
            # The bundled client speaks Transactions V1: no epoch bump per transaction.
            assert values(text, "odradek_transactions_epoch_bumps_total") == {(): 0}
            assert values(text, "odradek_transactions_producer_ids_rotated_total") == {(): 0}

            # The bound: two series, the third group's left out and counted.
            bounded = ClusterHealthCollector(node, node.metrics, max_group_partition_series=2)
            families = {f.name: f for f in bounded.read()}
            kept = [s.labels["group"] for s in families["odradek_consumer_group_lag"].samples]
            assert len(kept) == 2 and set(kept) < {"g-a", "g-b", "g-c"} and kept == sorted(kept)
            assert families["odradek_consumer_group_lag_series_dropped"].samples[0].value == 1
        finally:
            await txn.abort_transaction()
            await txn.close()


async def test_a_scrape_answers_with_the_default_when_the_loop_is_busy():
    metrics = Metrics(process_metrics=False, callback_timeout_s=0.2)
    metrics.bind_loop(asyncio.get_running_loop())
    release = threading.Event()
    result: list[object] = []

    def scrape() -> None:
        result.append(metrics.read_on_loop(lambda: "read", "default"))
        release.set()

    thread = threading.Thread(target=scrape)
    thread.start()
    release.wait(10)  # the loop is blocked here: the read cannot run, the scrape gives up after 0.2 s
    thread.join(10)
    assert result == ["default"]
    await asyncio.sleep(0)  # the cancelled read, run now, does nothing
