"""Records of the cluster metadata log (`__cluster_metadata`), as Kafka's KRaft defines them.

Each metadata record is the VALUE of one Kafka record (key null) in an ordinary record batch. The value is
framed as Kafka's MetadataRecordSerde frames it:

    frame_version   unsigned varint  = 1
    record_type     unsigned varint  MetadataRecordType (Kafka's "apiKey" of the metadata schemas)
    record_version  unsigned varint
    body            the record's fields, encoded like a message body of that version

The record types, their numbers, field names, defaults, tags and versions follow Kafka's
`metadata/src/main/resources/common/metadata/*.json`; every metadata record is flexible from version 0.
Only the types Odradek writes are defined; a log holding any other type is refused on load rather than
replayed without it (skipping a record would leave a wrong image).

Records are written at `WRITE_VERSION`, the lowest version that holds every field Odradek sets, so that
the log stays readable by Kafka's own tools (PartitionRecord stays at 0: log directories (v1) are not
tracked). The partition records are the one exception, chosen per record: a PartitionRecord or
PartitionChangeRecord that carries KIP-966's EligibleLeaderReplicas or LastKnownElr is written at version 2,
the first that holds them (`record_version`); every other one stays at 0. Any valid version is read.
"""

from __future__ import annotations

import uuid
from enum import IntEnum
from typing import Any

from odradek.protocol.codec import data_class, decode_from
from odradek.protocol.errors import RemoteProtocolError
from odradek.protocol.schema import F
from odradek.protocol.varint import read_uvarint, write_uvarint

__all__ = [
    "FRAME_VERSION",
    "RECORD_CLASSES",
    "BrokerRegistrationChangeRecord",
    "ClusterIdRecord",
    "ConfigRecord",
    "ConfigResourceType",
    "FeatureLevelRecord",
    "MetadataRecordType",
    "NoOpRecord",
    "PartitionChangeRecord",
    "PartitionRecord",
    "ProducerIdsRecord",
    "RegisterBrokerRecord",
    "RemoveTopicRecord",
    "TopicRecord",
    "UserScramCredentialRecord",
    "RemoveUserScramCredentialRecord",
    "UnregisterBrokerRecord",
    "decode_metadata_record",
    "encode_metadata_record",
    "AccessControlEntryRecord",
    "RemoveAccessControlEntryRecord",
    "ClientQuotaRecord",
]

FRAME_VERSION = 1


class MetadataRecordType(IntEnum):
    REGISTER_BROKER = 0
    UNREGISTER_BROKER = 1
    TOPIC = 2
    PARTITION = 3
    CONFIG = 4
    PARTITION_CHANGE = 5
    REMOVE_TOPIC = 9
    USER_SCRAM_CREDENTIAL = 11
    FEATURE_LEVEL = 12
    PRODUCER_IDS = 15
    BROKER_REGISTRATION_CHANGE = 17
    NO_OP = 20
    REMOVE_USER_SCRAM_CREDENTIAL = 22
    # Stock Kafka keeps the cluster id in meta.properties; Odradek keeps it in the log, with the record
    # type Kafka's metadata schema directory defines for it, so that it is replicated with the rest.
    CLUSTER_ID = 29
    # Authorization and quotas (the security issue)
    CLIENT_QUOTA = 14
    ACCESS_CONTROL_ENTRY = 18
    REMOVE_ACCESS_CONTROL_ENTRY = 19


# (type[Any]: classes built from the schemas at import, whose fields a type checker cannot see)
RECORD_CLASSES: dict[MetadataRecordType, type[Any]] = {}


def _record(record_type: MetadataRecordType, name: str, fields: list[F], *, valid: str,
            write_version: int) -> type[Any]:
    cls: type[Any] = data_class(name, fields, valid=valid, flexible="0+")
    cls.RECORD_TYPE = record_type
    cls.WRITE_VERSION = write_version
    RECORD_CLASSES[record_type] = cls
    return cls


RegisterBrokerRecord = _record(
    MetadataRecordType.REGISTER_BROKER,
    "RegisterBrokerRecord",
    [
        F("broker_id", "int32"),
        F("is_migrating_zk_broker", "bool", "2+", default=False),
        F("incarnation_id", "uuid"),
        F("broker_epoch", "int64"),
        F("end_points", "[]BrokerEndpoint", fields=[
            F("name", "string"),
            F("host", "string"),
            F("port", "uint16"),
            F("security_protocol", "int16"),
        ]),
        F("features", "[]BrokerFeature", fields=[
            F("name", "string"),
            F("min_supported_version", "int16"),
            F("max_supported_version", "int16"),
        ]),
        F("rack", "string", nullable="0+", default=None),
        F("fenced", "bool", default=True),
        F("in_controlled_shutdown", "bool", "1+", default=False),
        F("log_dirs", "[]uuid", "3+", tag=0),
    ],
    valid="0-3",
    write_version=1,
)

UnregisterBrokerRecord = _record(
    MetadataRecordType.UNREGISTER_BROKER,
    "UnregisterBrokerRecord",
    [F("broker_id", "int32"), F("broker_epoch", "int64")],
    valid="0",
    write_version=0,
)

TopicRecord = _record(
    MetadataRecordType.TOPIC,
    "TopicRecord",
    [F("name", "string"), F("topic_id", "uuid")],
    valid="0",
    write_version=0,
)

PartitionRecord = _record(
    MetadataRecordType.PARTITION,
    "PartitionRecord",
    [
        F("partition_id", "int32", default=-1),
        F("topic_id", "uuid"),
        F("replicas", "[]int32"),
        F("isr", "[]int32"),
        F("removing_replicas", "[]int32"),
        F("adding_replicas", "[]int32"),
        F("leader", "int32", default=-1),
        F("leader_recovery_state", "int8", default=0, tag=0),
        F("leader_epoch", "int32", default=-1),
        F("partition_epoch", "int32", default=-1),
        F("directories", "[]uuid", "1+"),
        F("eligible_leader_replicas", "[]int32", "2+", nullable="2+", default=None, tag=1),
        F("last_known_elr", "[]int32", "2+", nullable="2+", default=None, tag=2),
    ],
    valid="0-2",
    write_version=0,
)

ConfigRecord = _record(
    MetadataRecordType.CONFIG,
    "ConfigRecord",
    [
        F("resource_type", "int8"),
        F("resource_name", "string"),
        F("name", "string"),
        F("value", "string", nullable="0+"),  # null deletes the key
    ],
    valid="0",
    write_version=0,
)

# Leader -2 means "unchanged", -1 "no leader"; a null list means "unchanged".
PartitionChangeRecord = _record(
    MetadataRecordType.PARTITION_CHANGE,
    "PartitionChangeRecord",
    [
        F("partition_id", "int32", default=-1),
        F("topic_id", "uuid"),
        F("isr", "[]int32", nullable="0+", default=None, tag=0),
        F("leader", "int32", default=-2, tag=1),
        F("replicas", "[]int32", nullable="0+", default=None, tag=2),
        F("removing_replicas", "[]int32", nullable="0+", default=None, tag=3),
        F("adding_replicas", "[]int32", nullable="0+", default=None, tag=4),
        F("leader_recovery_state", "int8", default=-1, tag=5),
        F("directories", "[]uuid", "1+", nullable="1+", default=None, tag=8),
        F("eligible_leader_replicas", "[]int32", "2+", nullable="2+", default=None, tag=6),
        F("last_known_elr", "[]int32", "2+", nullable="2+", default=None, tag=7),
    ],
    valid="0-2",
    write_version=0,
)

RemoveTopicRecord = _record(
    MetadataRecordType.REMOVE_TOPIC,
    "RemoveTopicRecord",
    [F("topic_id", "uuid")],
    valid="0",
    write_version=0,
)

FeatureLevelRecord = _record(
    MetadataRecordType.FEATURE_LEVEL,
    "FeatureLevelRecord",
    [F("name", "string"), F("feature_level", "int16")],  # level 0: the feature is not enabled
    valid="0",
    write_version=0,
)

ProducerIdsRecord = _record(
    MetadataRecordType.PRODUCER_IDS,
    "ProducerIdsRecord",
    [
        F("broker_id", "int32"),
        F("broker_epoch", "int64", default=-1),
        F("next_producer_id", "int64"),  # the first producer id of the next block handed out
    ],
    valid="0",
    write_version=0,
)

# Fenced: -1 unfenced, 0 unchanged, 1 fenced. InControlledShutdown: 0 unchanged, 1 in controlled shutdown.
BrokerRegistrationChangeRecord = _record(
    MetadataRecordType.BROKER_REGISTRATION_CHANGE,
    "BrokerRegistrationChangeRecord",
    [
        F("broker_id", "int32"),
        F("broker_epoch", "int64"),
        F("fenced", "int8", tag=0),
        F("in_controlled_shutdown", "int8", "1+", tag=1),
        F("log_dirs", "[]uuid", "2+", tag=2),
    ],
    valid="0-2",
    write_version=1,
)

NoOpRecord = _record(MetadataRecordType.NO_OP, "NoOpRecord", [], valid="0", write_version=0)

ClusterIdRecord = _record(
    MetadataRecordType.CLUSTER_ID,
    "ClusterIdRecord",
    [F("cluster_id", "string")],
    valid="0",
    write_version=0,
)

# ---- authorization and quotas

AccessControlEntryRecord = _record(
    MetadataRecordType.ACCESS_CONTROL_ENTRY,
    "AccessControlEntryRecord",
    [
        F("id", "uuid"),
        F("resource_type", "int8"),
        F("resource_name", "string"),
        F("pattern_type", "int8"),
        F("principal", "string"),
        F("host", "string"),
        F("operation", "int8"),
        F("permission_type", "int8"),
    ],
    valid="0",
    write_version=0,
)

RemoveAccessControlEntryRecord = _record(
    MetadataRecordType.REMOVE_ACCESS_CONTROL_ENTRY, "RemoveAccessControlEntryRecord", [F("id", "uuid")],
    valid="0", write_version=0,
)

# Entity: (entity type, name or null for the default) pairs, e.g. [("user", "alice"), ("client-id", None)].
ClientQuotaRecord = _record(
    MetadataRecordType.CLIENT_QUOTA,
    "ClientQuotaRecord",
    [
        F("entity", "[]EntityData", fields=[
            F("entity_type", "string"),
            F("entity_name", "string", nullable="0+", default=None),
        ]),
        F("key", "string"),
        F("value", "float64"),
        F("remove", "bool"),
    ],
    valid="0",
    write_version=0,
)


# SCRAM credentials (KIP-554): the salted keys, never the password. mechanism is ScramMechanism's id.
UserScramCredentialRecord = _record(
    MetadataRecordType.USER_SCRAM_CREDENTIAL,
    "UserScramCredentialRecord",
    [F("name", "string"), F("mechanism", "int8"), F("salt", "bytes"), F("stored_key", "bytes"),
     F("server_key", "bytes"), F("iterations", "int32")],
    valid="0",
    write_version=0,
)

RemoveUserScramCredentialRecord = _record(
    MetadataRecordType.REMOVE_USER_SCRAM_CREDENTIAL,
    "RemoveUserScramCredentialRecord",
    [F("name", "string"), F("mechanism", "int8")],
    valid="0",
    write_version=0,
)

ELR_RECORD_VERSION = 2
"""The version of PartitionRecord and PartitionChangeRecord that holds KIP-966's ELR fields."""

UNASSIGNED_DIRECTORY = uuid.UUID(int=0)
"""Kafka's DirectoryId.UNASSIGNED: what a PartitionRecord of version 1+ names for a replica whose log
directory the controller does not track (Odradek tracks none)."""


def record_version(record) -> int:
    """The version `record` is written at: its type's WRITE_VERSION, but 2 for a partition record that
    carries ELR fields (see the module doc)."""
    cls = type(record)
    if cls.RECORD_TYPE in (MetadataRecordType.PARTITION, MetadataRecordType.PARTITION_CHANGE) and (
        record.eligible_leader_replicas is not None or record.last_known_elr is not None
    ):
        return ELR_RECORD_VERSION
    return int(cls.WRITE_VERSION)


def encode_metadata_record(record) -> bytes:
    """The framed value of one metadata record, at `record_version`."""
    cls = type(record)
    version = record_version(record)
    if version >= 1 and cls.RECORD_TYPE == MetadataRecordType.PARTITION and not record.directories:
        record.directories = [UNASSIGNED_DIRECTORY] * len(record.replicas)
    out = bytearray()
    write_uvarint(out, FRAME_VERSION)
    write_uvarint(out, cls.RECORD_TYPE)
    write_uvarint(out, version)
    out += record.encode(version)
    return bytes(out)


def decode_metadata_record(data):
    """The metadata record framed in `data` (a record value). Raises RemoteProtocolError if malformed,
    of an unknown type, or of a version this code cannot read."""
    buf = data if isinstance(data, memoryview) else memoryview(data)
    frame_version, pos = read_uvarint(buf, 0)
    if frame_version != FRAME_VERSION:
        raise RemoteProtocolError(f"metadata record frame version {frame_version}; only {FRAME_VERSION} is known")
    record_type, pos = read_uvarint(buf, pos)
    version, pos = read_uvarint(buf, pos)
    try:
        cls = RECORD_CLASSES[MetadataRecordType(record_type)]
    except (ValueError, KeyError):
        raise RemoteProtocolError(f"unknown metadata record type {record_type}") from None
    low, high = cls.VALID_VERSIONS
    if not low <= version <= high:
        raise RemoteProtocolError(f"{cls.__name__} version {version} is not readable (valid {low}-{high})")
    record, end = decode_from(cls, buf, version, pos)
    if end != len(buf):
        raise RemoteProtocolError(f"{cls.__name__} v{version}: {len(buf) - end} unexpected trailing bytes")
    return record


class ConfigResourceType(IntEnum):
    """ConfigRecord.resource_type: Kafka's ConfigResource.Type ids."""

    TOPIC = 2
    BROKER = 4
    BROKER_LOGGER = 8
    CLIENT_METRICS = 16
    GROUP = 32
