"""Per-member and per-delivery-count share figures (broker/share/manager.py member_figures, broker/metrics.py
ShareMembersCollector) on a manual clock with a real log, and the console's reading of them."""

from __future__ import annotations

import uuid

from prometheus_client import CollectorRegistry, generate_latest

from odradek.broker.metrics import Metrics, ShareMembersCollector
from odradek.broker.share.manager import SharePartitionManager, ShareSettings
from odradek.broker.share.persister import InMemoryPersister
from odradek.console.sampler import parse_share_figures
from odradek.protocol.records import build_batch
from odradek.purgatory.timing_wheel import Timer
from odradek.replication.replica_manager import ReplicaManager
from odradek.storage.config import LogConfig
from odradek.storage.log import Log
from odradek.storage.names import TopicPartition

NOW = 1_000_000
TP = TopicPartition("work", 0)
TID = uuid.uuid4()
RELEASE = 2


async def test_acquired_records_per_member_and_records_by_delivery_count(tmp_path):
    data = ReplicaManager(node_id=1, timer=Timer(start_ms=NOW))
    log = Log.open(str(tmp_path / "work-0"), LogConfig(), now_ms=NOW)
    try:
        data.add_leader_partition(TP, topic_id=TID, log=log, leader_epoch=0, replicas=[1], isr=[1],
                                  min_insync_replicas=1, now_ms=NOW)
        manager = SharePartitionManager(data=data, persister=InMemoryPersister(), clock=lambda: NOW,
                                        settings=ShareSettings(auto_offset_reset="earliest"))
        for _ in range(2):
            data.append_internal(TP, bytearray(build_batch([(None, b"v", None, NOW)] * 4)), now_ms=NOW)

        async def fetch(member: str, n: int):
            return (await manager.fetch("g", member, [(TID, TP)], max_records=n, max_bytes=1 << 20, max_wait_ms=0))[TP]

        assert [(r.first_offset, r.last_offset) for r in (await fetch("a", 4)).acquired] == [(0, 3)]
        assert [(r.first_offset, r.last_offset) for r in (await fetch("b", 4)).acquired] == [(4, 7)]
        # a gives two back; c gets them, delivered for the second time
        await manager.acknowledge("g", "a", [(TID, TP, [(0, 1, [RELEASE, RELEASE])])])
        assert [(r.first_offset, r.delivery_count) for r in (await fetch("c", 4)).acquired] == [(0, 2)]

        figures = manager.member_figures()
        assert figures["per_member"] == [("g", "work", 0, "a", 2), ("g", "work", 0, "b", 4), ("g", "work", 0, "c", 2)]
        assert figures["delivery_counts"] == [("g", "work", 0, {"1": 6, "2": 2, "3": 0, "4+": 0})]
        assert figures["members_dropped"] == 0
        bounded = manager.member_figures(member_limit=2)
        assert len(bounded["per_member"]) == 2 and bounded["members_dropped"] == 1
        assert manager.member_figures(limit=0) == {"per_member": [], "delivery_counts": [], "members_dropped": 0}

        registry = CollectorRegistry()
        registry.register(ShareMembersCollector(manager.member_figures, Metrics(node_id=1)))
        text = generate_latest(registry).decode()
        assert 'odradek_share_partition_member_records_acquired{group="g",member="b",partition="0",topic="work"} 4.0' in text
        assert ('odradek_share_partition_records_by_delivery_count{delivery_count="2",group="g",partition="0",'
                'topic="work"} 2.0') in text

        # The console's share page reads them per member and per share-partition, summed over brokers; a DLQ
        # gauge (KIP-1191, another broker's) is read where present.
        console = parse_share_figures([text, 'odradek_share_partition_dlq_records{group="g",topic="work",partition="0"} 3\n'])
        assert console.by_member
        assert console.acquired_by_member("g") == {"a": {"work-0": 2.0}, "b": {"work-0": 4.0}, "c": {"work-0": 2.0}}
        assert console.delivery_of("g") == {"work-0": {"1": 6.0, "2": 2.0, "3": 0.0, "4+": 0.0}}
        assert console.partitions[("g", "work", 0)]["dlq_records"] == 3.0
        assert not parse_share_figures(["odradek_share_records_in_flight 1\n"]).by_member  # a broker without them
    finally:
        log.close()
