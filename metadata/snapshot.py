"""A metadata image as records, for snapshots of `__cluster_metadata` (KIP-630).

A snapshot of the metadata log at offset N is the image after the records below N, written as the
records that rebuild it from nothing: replaying `image_records(image)` on the empty image gives `image`
back, exactly. A node that starts from a snapshot, or a lagging one that fetched it, loads it this way
and goes on from offset N in the log, so a restart never replays the log from offset 0.

The order is the one replay needs: features and the cluster id, then brokers, topics (each followed by its
partitions and its configs), other configs, the producer-id high mark, then ACLs and client quotas. `encode_snapshot` frames the
records as record batches (the snapshot file's content, and what FetchSnapshot carries); `decode_snapshot`
reads them back, refusing anything that is not whole.
"""

from __future__ import annotations

from collections.abc import Iterator

from odradek.protocol.records import build_batch, iter_batches, iter_records

from odradek.metadata.image import METADATA_MAX_BATCH_BYTES, MetadataImage, MetadataReplayError, replay_all
from odradek.metadata.records import (
    AccessControlEntryRecord,
    ClientQuotaRecord,
    ClusterIdRecord,
    ConfigRecord,
    ConfigResourceType,
    FeatureLevelRecord,
    PartitionRecord,
    ProducerIdsRecord,
    RegisterBrokerRecord,
    TopicRecord,
    UserScramCredentialRecord,
    decode_metadata_record,
    encode_metadata_record,
)

_RECORDS_PER_BATCH = 1000


def image_records(image: MetadataImage) -> Iterator:
    for name, level in sorted(image.features.items()):
        yield FeatureLevelRecord(name=name, feature_level=level)
    if image.cluster_id is not None:
        yield ClusterIdRecord(cluster_id=image.cluster_id)
    for broker_id in sorted(image.brokers):
        b = image.brokers[broker_id]
        yield RegisterBrokerRecord(
            broker_id=b.broker_id, incarnation_id=b.incarnation_id, broker_epoch=b.broker_epoch,
            end_points=[
                RegisterBrokerRecord.BrokerEndpoint(name=e.name, host=e.host, port=e.port, security_protocol=e.security_protocol)
                for e in b.endpoints
            ],
            rack=b.rack, fenced=b.fenced, in_controlled_shutdown=b.in_controlled_shutdown,
        )
    topic_resources: set[tuple[int, str]] = set()
    for name in sorted(image.topics_by_name):
        topic = image.topics_by_name[name]
        yield TopicRecord(name=name, topic_id=topic.topic_id)
        for index in sorted(topic.partitions):
            p = topic.partitions[index]
            yield PartitionRecord(
                partition_id=index, topic_id=topic.topic_id, replicas=list(p.replicas), isr=list(p.isr),
                removing_replicas=list(p.removing_replicas), adding_replicas=list(p.adding_replicas),
                leader=p.leader, leader_recovery_state=p.leader_recovery_state, leader_epoch=p.leader_epoch,
                partition_epoch=p.partition_epoch,
                eligible_leader_replicas=list(p.elr) if p.elr or p.last_known_elr else None,
                last_known_elr=list(p.last_known_elr) if p.elr or p.last_known_elr else None,
            )
        resource: tuple[int, str] = (ConfigResourceType.TOPIC, name)
        topic_resources.add(resource)
        yield from _configs(resource, image.configs.get(resource, {}))
    for resource in sorted(image.configs):
        if resource not in topic_resources:
            yield from _configs(resource, image.configs[resource])
    if image.next_producer_id > 0:
        yield ProducerIdsRecord(broker_id=-1, broker_epoch=-1, next_producer_id=image.next_producer_id)
    for (name, mechanism), c in sorted(image.scram_credentials.items()):
        yield UserScramCredentialRecord(name=name, mechanism=mechanism, salt=c.salt, stored_key=c.stored_key,
                                        server_key=c.server_key, iterations=c.iterations)
    for acl_id in sorted(image.acls):
        acl = image.acls[acl_id]
        yield AccessControlEntryRecord(
            id=acl_id, resource_type=acl.resource_type, resource_name=acl.resource_name, pattern_type=acl.pattern_type,
            principal=acl.principal, host=acl.host, operation=acl.operation, permission_type=acl.permission_type,
        )
    for entity in sorted(image.client_quotas, key=repr):
        for key, value in sorted(image.client_quotas[entity].items()):
            yield ClientQuotaRecord(
                entity=[ClientQuotaRecord.EntityData(entity_type=t, entity_name=n) for t, n in entity],
                key=key, value=value, remove=False,
            )


def _configs(resource, configs) -> Iterator:
    for key in sorted(configs):
        yield ConfigRecord(resource_type=resource[0], resource_name=resource[1], name=key, value=configs[key])


def encode_snapshot(image: MetadataImage, now_ms: int) -> bytes:
    """The image's records as record batches (offsets from 0 within the snapshot)."""
    out = bytearray()
    batch: list = []
    offset = 0
    for record in image_records(image):
        batch.append((None, encode_metadata_record(record), None, now_ms))
        if len(batch) == _RECORDS_PER_BATCH:
            out += build_batch(batch, base_offset=offset)
            offset += len(batch)
            batch = []
    if batch:
        out += build_batch(batch, base_offset=offset)
    return bytes(out)


def decode_snapshot(data: bytes) -> MetadataImage:
    """The image a snapshot holds; MetadataReplayError (or RemoteProtocolError) when it is not whole."""
    records = []
    end = 0
    for pos, header in iter_batches(data):
        if header.is_control:
            end = pos + header.size
            continue
        for record in iter_records(memoryview(data)[pos : pos + header.size], max_uncompressed_bytes=METADATA_MAX_BATCH_BYTES):
            if record.value is None:
                raise MetadataReplayError(f"snapshot record at offset {record.offset} has no value")
            records.append(decode_metadata_record(record.value))
        end = pos + header.size
    if end != len(data):
        raise MetadataReplayError(f"the snapshot ends with {len(data) - end} bytes that are not a whole batch")
    return replay_all(records)
