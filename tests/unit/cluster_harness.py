"""A controller and the image its committed records make, for the cluster-control tests (manual clock).

Records "commit" by replaying them on the image and moving the log end offset on by their count, as the
local controller channel appends them in one batch.
"""

from __future__ import annotations

import random
import uuid

from odradek.protocol.errors import ErrorCode
from odradek.protocol.messages import (
    AlterPartitionReassignmentsRequest,
    AlterPartitionRequest,
    BrokerHeartbeatRequest,
    BrokerRegistrationRequest,
    ElectLeadersRequest,
    ListPartitionReassignmentsRequest,
    UnregisterBrokerRequest,
)
from odradek.metadata.controller import Controller
from odradek.metadata.image import (
    ELR_VERSION,
    ELR_VERSION_FEATURE,
    METADATA_VERSION,
    METADATA_VERSION_FEATURE,
    MetadataError,
    MetadataImage,
    replay_all,
)
from odradek.metadata.records import ClusterIdRecord, ConfigRecord, ConfigResourceType, FeatureLevelRecord

CLUSTER_ID = "MkU3OEVBNTcwNTJENDM2Qk"

AP = AlterPartitionRequest
APR = AlterPartitionReassignmentsRequest


def error_of(op) -> ErrorCode:
    try:
        op()
    except MetadataError as e:
        return e.error_code
    raise AssertionError("no MetadataError")


class Cluster:
    """`elr`: the cluster finalizes eligible.leader.replicas.version 1 and the cluster-wide
    min.insync.replicas `min_isr` (a new cluster's bootstrap); without, the log of a cluster before ELR."""

    def __init__(self, seed: int = 1, *, elr: bool = False, min_isr: int = 1, **controller_options) -> None:
        self.controller = Controller(rng=random.Random(seed), **controller_options)
        self.rng = random.Random(seed + 1)
        self.log_end_offset = 0
        self.incarnations: dict[int, uuid.UUID] = {}
        self.epochs: dict[int, int] = {}
        self.written: list = []
        self.commit([
            FeatureLevelRecord(name=METADATA_VERSION_FEATURE, feature_level=METADATA_VERSION),
            ClusterIdRecord(cluster_id=CLUSTER_ID),
        ])
        if elr:
            self.commit([
                FeatureLevelRecord(name=ELR_VERSION_FEATURE, feature_level=ELR_VERSION),
                ConfigRecord(resource_type=ConfigResourceType.BROKER, resource_name="", name="min.insync.replicas",
                             value=str(min_isr)),
            ])

    @property
    def image(self) -> MetadataImage:
        return self.controller.image

    def commit(self, records: list) -> list:
        if records:
            image = replay_all(records, self.controller.image)
            self.log_end_offset += len(records)
            self.controller.advance(image, self.log_end_offset)
            self.written.extend(records)
        return records

    # -- brokers

    def registration(self, broker_id: int, *, rack: str | None = None, incarnation: uuid.UUID | None = None,
                     cluster_id: str = CLUSTER_ID, port: int | None = None, features=(),
                     previous_broker_epoch: int = -1):
        incarnation = incarnation or self.incarnations.get(broker_id) or uuid.UUID(int=self.rng.getrandbits(128))
        return BrokerRegistrationRequest(
            previous_broker_epoch=previous_broker_epoch,
            broker_id=broker_id,
            cluster_id=cluster_id,
            incarnation_id=incarnation,
            listeners=[BrokerRegistrationRequest.Listener(
                name="PLAINTEXT", host=f"b{broker_id}", port=port or 9000 + broker_id, security_protocol=0
            )],
            features=list(features),
            rack=rack,
        )

    def register(self, broker_id: int, now_ms: int, **options) -> int:
        request = self.registration(broker_id, **options)
        records, response = self.controller.register(request, now_ms)
        self.commit(records)
        self.incarnations[broker_id] = request.incarnation_id
        self.epochs[broker_id] = response.broker_epoch
        return response.broker_epoch

    def heartbeat(self, broker_id: int, now_ms: int, *, offset: int | None = None, want_fence: bool = False,
                  want_shut_down: bool = False, epoch: int | None = None):
        request = BrokerHeartbeatRequest(
            broker_id=broker_id,
            broker_epoch=self.epochs.get(broker_id, -1) if epoch is None else epoch,
            current_metadata_offset=self.log_end_offset - 1 if offset is None else offset,
            want_fence=want_fence,
            want_shut_down=want_shut_down,
        )
        records, response = self.controller.heartbeat(request, now_ms)
        self.commit(records)
        return response

    def start(self, broker_id: int, now_ms: int = 0, rack: str | None = None) -> None:
        """Register and heartbeat until unfenced."""
        self.register(broker_id, now_ms, rack=rack)
        response = self.heartbeat(broker_id, now_ms)
        assert not response.is_fenced and response.is_caught_up

    def unregister(self, broker_id: int):
        records, response = self.controller.unregister(UnregisterBrokerRequest(broker_id=broker_id))
        self.commit(records)
        return response

    # -- topics and partitions

    def create_topic(self, name: str, partitions: int, replication_factor: int, configs=None, assignments=None):
        if assignments is not None:
            self.commit(self.controller.create_topic(name, -1, -1, configs, assignments=assignments))
        else:
            self.commit(self.controller.create_topic(name, partitions, replication_factor, configs))
        return self.image.topics_by_name[name]

    def partition(self, name: str, partition_id: int = 0):
        return self.image.topics_by_name[name].partitions[partition_id]

    def alter_partition(self, name: str, partition_id: int, new_isr, *, broker_id: int | None = None,
                        leader_epoch: int | None = None, partition_epoch: int | None = None, version: int = 3,
                        member_epochs: dict | None = None, leader_recovery_state: int = 0,
                        broker_epoch: int | None = None):
        p = self.partition(name, partition_id)
        broker_id = p.leader if broker_id is None else broker_id
        data = AP.TopicData.PartitionData(
            partition_index=partition_id,
            leader_epoch=p.leader_epoch if leader_epoch is None else leader_epoch,
            partition_epoch=p.partition_epoch if partition_epoch is None else partition_epoch,
            leader_recovery_state=leader_recovery_state,
        )
        if version >= 3:
            data.new_isr_with_epochs = [
                AP.TopicData.PartitionData.BrokerState(
                    broker_id=b, broker_epoch=(member_epochs or {}).get(b, self.epochs.get(b, -1))
                )
                for b in new_isr
            ]
        else:
            data.new_isr = list(new_isr)
        request = AP(
            broker_id=broker_id,
            broker_epoch=self.epochs.get(broker_id, -1) if broker_epoch is None else broker_epoch,
            topics=[AP.TopicData(topic_id=self.image.topics_by_name[name].topic_id, partitions=[data])],
        )
        records, response = self.controller.alter_partition(request, version)
        self.commit(records)
        (topic,) = response.topics
        (result,) = topic.partitions
        return result

    def elect(self, election_type: int, partitions: dict | None):
        request = ElectLeadersRequest(
            election_type=election_type,
            topic_partitions=None if partitions is None else [
                ElectLeadersRequest.TopicPartitions(topic=t, partitions=list(ps)) for t, ps in partitions.items()
            ],
        )
        records, response = self.controller.elect_leaders(request)
        self.commit(records)
        return {
            (r.topic, p.partition_id): ErrorCode(p.error_code)
            for r in response.replica_election_results for p in r.partition_result
        }

    def reassign(self, targets: dict, *, allow_replication_factor_change: bool = True):
        """targets: (topic, partition) -> replicas or None (cancel). Returns (topic, partition) -> error."""
        by_topic: dict[str, list] = {}
        for (name, partition_id), replicas in targets.items():
            by_topic.setdefault(name, []).append(
                APR.ReassignableTopic.ReassignablePartition(partition_index=partition_id, replicas=replicas)
            )
        request = APR(
            topics=[APR.ReassignableTopic(name=n, partitions=ps) for n, ps in by_topic.items()],
            allow_replication_factor_change=allow_replication_factor_change,
        )
        records, response = self.controller.alter_partition_reassignments(request)
        self.commit(records)
        return {(t.name, p.partition_index): ErrorCode(p.error_code) for t in response.responses for p in t.partitions}

    def list_reassignments(self, topics: dict | None = None):
        request = ListPartitionReassignmentsRequest(
            topics=None if topics is None else [
                ListPartitionReassignmentsRequest.ListPartitionReassignmentsTopics(name=n, partition_indexes=list(ps))
                for n, ps in topics.items()
            ]
        )
        response = self.controller.list_partition_reassignments(request)
        return {
            (t.name, p.partition_index): (p.replicas, p.adding_replicas, p.removing_replicas)
            for t in response.topics for p in t.partitions
        }
