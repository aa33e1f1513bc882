"""Wire the group coordinator to this broker: `__consumer_offsets` logs, the metadata image, the timer.

The coordinator (coordinator/) knows nothing of storage or sockets; it asks for a `PartitionWriter`
(append records to partition p of `__consumer_offsets`, read them all back for loading) and a view of
the topics. On one broker every `__consumer_offsets` partition is led here, so each is loaded ("elected")
at start; with replication, election follows leadership.
"""

from __future__ import annotations

import os
from collections.abc import Iterable

from odradek.coordinator.group.config import GroupCoordinatorConfig
from odradek.coordinator.group.group_coordinator import GroupCoordinator
from odradek.coordinator.topics import TopicMetadata
from odradek.protocol.records import build_batch, iter_batches, iter_records
from odradek.storage.names import TopicPartition

OFFSETS_TOPIC = "__consumer_offsets"
_READ_CHUNK = 1 << 20
_MAX_BATCH = 64 << 20


class OffsetsTopicWriter:
    def __init__(self, broker):
        self.broker = broker

    def _partition(self, index: int):
        partition = self.broker.data.get_partition(TopicPartition(OFFSETS_TOPIC, index))
        if partition is None:
            raise RuntimeError(f"{OFFSETS_TOPIC}-{index} is not hosted here")
        return partition

    def append(self, partition: int, records: list[tuple[bytes | None, bytes | None]], now_ms: int) -> int | None:
        if not records:
            return None
        tp = TopicPartition(OFFSETS_TOPIC, partition)
        batch = bytearray(build_batch([(k, v, None, now_ms) for k, v in records]))
        info = self.broker.data.append_internal(tp, batch, now_ms=now_ms)
        end_offset = info.last_offset + 1
        # None tells the runtime the records are committed already (one replica: the high watermark moved
        # with the append); otherwise it holds the response until on_committed reports this offset.
        return None if self._partition(partition).high_watermark >= end_offset else end_offset

    def read_all(self, partition: int) -> Iterable[tuple[bytes | None, bytes | None]]:
        log = self._partition(partition).log
        offset = log.log_start_offset
        while offset < log.log_end_offset:
            info = log.read(offset, _READ_CHUNK, max_offset=log.log_end_offset, min_one_message=True)
            if not info.regions:
                break
            data = b"".join(_pread_fully(r.fd, r.length, r.position) for r in info.regions)
            advanced = False
            for pos, header in iter_batches(data):
                if header.next_offset <= offset:
                    continue
                if not header.is_control:
                    for record in iter_records(memoryview(data)[pos : pos + header.size], max_uncompressed_bytes=_MAX_BATCH):
                        if record.offset >= offset:
                            yield record.key, record.value
                offset = header.next_offset
                advanced = True
            if not advanced:
                break


def _pread_fully(fd: int, length: int, position: int) -> bytes:
    out = bytearray()
    while len(out) < length:
        chunk = os.pread(fd, length - len(out), position + len(out))
        if not chunk:
            break
        out += chunk
    return bytes(out)


class MetadataTopicsView:
    def __init__(self, broker):
        self.broker = broker

    @staticmethod
    def _view(topic) -> TopicMetadata | None:
        return None if topic is None else TopicMetadata(topic.topic_id, topic.name, len(topic.partitions))

    def topic_by_name(self, name: str) -> TopicMetadata | None:
        return self._view(self.broker.metadata.image.topics_by_name.get(name))

    def topic_by_id(self, topic_id) -> TopicMetadata | None:
        return self._view(self.broker.metadata.image.topics_by_id.get(topic_id))

    def topic_names(self) -> Iterable[str]:
        return self.broker.metadata.image.topics_by_name.keys()


def start_group_coordinator(broker) -> GroupCoordinator:
    cfg = broker.config
    num_partitions = cfg.offsets_topic_num_partitions
    if broker.metadata.image.topics_by_name.get(OFFSETS_TOPIC) is None:
        broker.topics.create(
            OFFSETS_TOPIC, num_partitions, cfg.offsets_topic_replication_factor,
            {"cleanup.policy": "compact", "segment.bytes": str(cfg.offsets_topic_segment_bytes)},
            internal=True,
        )
    else:
        num_partitions = len(broker.metadata.image.topics_by_name[OFFSETS_TOPIC].partitions)
    config = GroupCoordinatorConfig.from_broker_config(cfg, offsets_topic_num_partitions=num_partitions)
    groups = GroupCoordinator(OffsetsTopicWriter(broker), broker.timer, config, MetadataTopicsView(broker))
    now = broker.now_ms()
    for index in range(num_partitions):
        groups.on_elected(index, now)
    return groups
