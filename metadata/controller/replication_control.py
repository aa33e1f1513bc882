"""The controller's view of topics and partitions (Kafka's ReplicationControlManager).

It decides every record about a partition: the topic and partition records of CreateTopics and
CreatePartitions (where replicas go: replica_placement.py, Kafka's StripedReplicaPlacer; the first replica
leads, the ISR is the replicas that are active), RemoveTopicRecord, and every PartitionChangeRecord: an ISR
change a leader asks for (AlterPartition), a leader or ISR move because a broker was fenced, shut down or
lost a log directory, an election asked for (ElectLeaders) or due (unclean elections where the topic
allows them, preferred elections when auto.leader.rebalance.enable finds leaders off their first
replica), and reassignments. How one partition changes, given the target ISR, replicas and election, is
partition_change.py (Kafka's PartitionChangeBuilder); this module decides the targets.

It reads what it does not own through narrow interfaces: which brokers are registered and active
(`BrokerLiveness`, the registrations the cluster control manager decides) and the configs that steer
elections (`ElectionConfigs`, the configuration control manager). The cluster control manager in turn asks
it, through the methods of `BrokerPartitionEffects`, what a broker leaving or joining does to the
partitions (`remove_broker`, `elect_leaderless`, `leads_any`): Kafka's handleBrokerFenced/Unfenced.

The topic rules that need the controller's settings live here too: -1 partitions or replication factor
take num.partitions and default.replication.factor; the coordinators' internal topics are created only by
the broker (`internal`) and never deleted; delete.topic.enable=false refuses every deletion.

The only state kept is the time of the next leader-balance check; everything else is in the image each
call is given.
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Mapping, Sequence
from enum import IntEnum
from typing import Protocol

from odradek.protocol.errors import ErrorCode
from odradek.protocol.messages import (
    AlterPartitionReassignmentsResponse,
    AlterPartitionResponse,
    ElectLeadersResponse,
    ListPartitionReassignmentsResponse,
)
from odradek.metadata.image import (
    ELR_VERSION_FEATURE,
    MAX_PARTITIONS_PER_REQUEST,
    METADATA_TOPIC,
    NO_LEADER,
    NO_LEADER_CHANGE,
    MetadataError,
    MetadataImage,
    PartitionImage,
    random_uuid,
    validate_topic_name,
)
from odradek.metadata.partition_change import (
    Election,
    Elr,
    LeaderRecoveryState,
    ReassignmentReplicas,
    build_partition_change,
    is_reassigning,
    revert_reassignment,
)
from odradek.metadata.records import PartitionChangeRecord, PartitionRecord, RemoveTopicRecord, TopicRecord
from odradek.metadata.replica_placement import place_replicas

from .partition_changes import PartitionChanges, partitions_in_order
from .requests import INTERNAL_TOPICS, CreatedTopic, NewTopic, TopicToDelete
from .settings import ControllerSettings


class ElectionType(IntEnum):
    """ElectLeadersRequest.election_type."""

    PREFERRED = 0
    UNCLEAN = 1


LOST_DIRECTORY_ID = uuid.UUID(int=2)
"""Kafka's DirectoryId.LOST: a replica in a log directory that is offline."""

# Kafka's default messages of these errors (an ApiError without its own message answers with them).
_ELECTION_MESSAGES = {
    ErrorCode.ELECTION_NOT_NEEDED: "Leader election not needed for topic partition.",
    ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE: "The preferred leader was not available.",
    ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE: "Eligible topic partition leaders are not available.",
}


class BrokerLiveness(Protocol):
    """What replication asks about brokers (brokers.py's RegisteredBrokers)."""

    def is_registered(self, image: MetadataImage, broker_id: int) -> bool: ...

    def usable_brokers(self, image: MetadataImage) -> list[int]: ...

    def placement_candidates(self, image: MetadataImage) -> list[tuple[int, str | None]]: ...

    def check_broker_epoch(self, image: MetadataImage, broker_id: int, broker_epoch: int) -> object: ...


class TopicConfigs(Protocol):
    """What replication asks about configs (configuration_control.py)."""

    def unclean_leader_election_enabled(self, image: MetadataImage, topic: str) -> bool: ...

    def auto_leader_rebalance_enabled(self, image: MetadataImage) -> bool: ...

    def min_insync_replicas(self, image: MetadataImage, topic: str) -> int: ...

    def validate_topic_configs(self, configs: Mapping[str, str | None]) -> None: ...

    def topic_config_records(self, name: str, configs: Mapping[str, str | None]) -> list: ...


class ReplicationControlManager:
    """See the module doc. `rng` draws topic ids and replica placement."""

    def __init__(
        self, settings: ControllerSettings, rng: random.Random, brokers: BrokerLiveness, configs: TopicConfigs
    ) -> None:
        self._settings = settings
        self._rng = rng
        self._brokers = brokers
        self._configs = configs
        self._next_balance_ms: int | None = None  # None: check at the next tick

    @property
    def next_balance_ms(self) -> int | None:
        """When the next leader-balance check is due (None: at the next tick, or rebalancing is off)."""
        return self._next_balance_ms

    # -- topics: CreateTopics, DeleteTopics, CreatePartitions

    def create_new_topic(
        self, image: MetadataImage, t: NewTopic, *, validate_only: bool, internal: bool
    ) -> tuple[list, CreatedTopic]:
        """One topic of a CreateTopics: the internal-topic rule, the defaults for -1, the config values
        checked, then `create_topic`. Answers what CreateTopics reports of it (no topic id with
        `validate_only`: the id drawn is not the one a real creation would get)."""
        if t.name in INTERNAL_TOPICS and not internal:
            raise MetadataError(ErrorCode.INVALID_REQUEST, f"Topic {t.name} is internal and is created by the broker.")
        num_partitions, replication_factor = t.num_partitions, t.replication_factor
        if t.assignments is None:
            if num_partitions == -1:
                num_partitions = self._settings.num_partitions
            if replication_factor == -1:
                replication_factor = self._settings.default_replication_factor
        self._configs.validate_topic_configs(t.configs)
        records = self.create_topic(
            image, t.name, num_partitions, replication_factor, t.configs, assignments=t.assignments
        )
        topic_record, partition_records = records[0], [r for r in records if isinstance(r, PartitionRecord)]
        created = CreatedTopic(
            name=t.name,
            topic_id=None if validate_only else topic_record.topic_id,
            num_partitions=len(partition_records),
            replication_factor=len(partition_records[0].replicas) if partition_records else -1,
            configs={k: v for k, v in t.configs.items() if v is not None},
        )
        return records, created

    def create_topic(
        self,
        image: MetadataImage,
        name: str,
        num_partitions: int,
        replication_factor: int,
        configs: Mapping[str, str | None] | None = None,
        *,
        assignments: Mapping[int, Sequence[int]] | None = None,
    ) -> list:
        """TopicRecord (a new random id, never zero), ConfigRecords, then one PartitionRecord per partition.

        Replicas are spread over the active brokers by the placer; the first replica leads. With
        `assignments` (partition index -> broker ids, Kafka's manual assignment), `num_partitions` and
        `replication_factor` must be -1 (`create_new_topic` resolves -1 to the defaults when there are no
        assignments)."""
        validate_topic_name(name)
        if name == METADATA_TOPIC:
            raise MetadataError(ErrorCode.INVALID_REQUEST, f"Creation of internal topic {name} is prohibited.")
        if name in image.topics_by_name:
            raise MetadataError(ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{name}' already exists.")
        # '.' and '_' collide in metric names, so Kafka refuses names that differ only by them.
        normalized = name.replace(".", "_")
        for existing in image.topics_by_name:
            if existing.replace(".", "_") == normalized:
                raise MetadataError(
                    ErrorCode.INVALID_TOPIC_EXCEPTION,
                    f"Topic '{name}' collides with existing topic: {existing}",
                )
        config_records = self._configs.topic_config_records(name, configs or {})
        if assignments is not None:
            if num_partitions != -1 or replication_factor != -1:
                raise MetadataError(
                    ErrorCode.INVALID_REQUEST,
                    "Both numPartitions or replicationFactor and replicasAssignments were set. "
                    "Both cannot be used at the same time.",
                )
            if not assignments or sorted(assignments) != list(range(len(assignments))):
                raise MetadataError(
                    ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                    "Partitions should be a consecutive 0-based integer sequence",
                )
            _check_partition_count(len(assignments))
            placement = self._checked_assignments(image, [assignments[i] for i in range(len(assignments))], None)
        else:
            if num_partitions < 1:
                raise MetadataError(
                    ErrorCode.INVALID_PARTITIONS,
                    "Number of partitions was set to an invalid non-positive value.",
                )
            if replication_factor < 1:
                raise MetadataError(
                    ErrorCode.INVALID_REPLICATION_FACTOR,
                    "Replication factor must be larger than 0, or -1 to use the default value.",
                )
            _check_partition_count(num_partitions)
            placement = self._place(image, num_partitions, replication_factor)
        topic_id = random_uuid(self._rng)
        while topic_id in image.topics_by_id:
            topic_id = random_uuid(self._rng)
        records: list = [TopicRecord(name=name, topic_id=topic_id)]
        records.extend(config_records)
        records.extend(self._partition_records(image, topic_id, 0, placement))
        return records

    def delete_topic_request(self, image: MetadataImage, t: TopicToDelete) -> tuple[list, str | None]:
        """One topic of a DeleteTopics: refused when delete.topic.enable is false or the topic is internal
        (TOPIC_AUTHORIZATION_FAILED, as Kafka answers), else `delete_topic`. Answers the topic's name."""
        if not self._settings.delete_topic_enable:
            raise MetadataError(ErrorCode.TOPIC_DELETION_DISABLED, "Topic deletion is disabled.")
        if t.name:
            topic = image.topics_by_name.get(t.name)
        else:
            topic = image.topics_by_id.get(t.topic_id) if t.topic_id is not None else None
        name = topic.name if topic is not None else t.name
        if name in INTERNAL_TOPICS:
            raise MetadataError(ErrorCode.TOPIC_AUTHORIZATION_FAILED, f"Internal topic {name} cannot be deleted.")
        return self.delete_topic(image, t.name, topic_id=t.topic_id), name

    def delete_topic(self, image: MetadataImage, name: str | None = None, *, topic_id: uuid.UUID | None = None) -> list:
        """A RemoveTopicRecord for the topic named by `name` or by `topic_id` (DeleteTopics v6 names either)."""
        if topic_id is not None and topic_id.int != 0:
            topic = image.topics_by_id.get(topic_id)
            if topic is None or (name is not None and topic.name != name):
                raise MetadataError(ErrorCode.UNKNOWN_TOPIC_ID, f"Unknown topic id {topic_id}")
        else:
            topic = image.topics_by_name.get(name) if name is not None else None
            if topic is None:
                raise MetadataError(
                    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "This server does not host this topic-partition."
                )
        return [RemoveTopicRecord(topic_id=topic.topic_id)]

    def create_partitions(
        self, image: MetadataImage, name: str, count: int, assignments: Sequence[Sequence[int]] | None = None
    ) -> list:
        """PartitionRecords raising the topic's partition count to `count` (a new total, as in
        CreatePartitions). New partitions get the replication factor of partition 0, or `assignments`
        (one broker list per new partition)."""
        topic = image.topics_by_name.get(name)
        if topic is None:
            raise MetadataError(
                ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "This server does not host this topic-partition."
            )
        current = len(topic.partitions)
        if count < current:
            raise MetadataError(
                ErrorCode.INVALID_PARTITIONS,
                f"The topic {name} currently has {current} partition(s); {count} would not be an increase.",
            )
        if count == current:
            raise MetadataError(ErrorCode.INVALID_PARTITIONS, f"Topic already has {current} partition(s).")
        _check_partition_count(count - current)
        if assignments is not None:
            if len(assignments) != count - current:
                raise MetadataError(
                    ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                    f"Attempted to add {count - current} additional partition(s), but only "
                    f"{len(assignments)} assignment(s) were specified.",
                )
            placement = self._checked_assignments(image, assignments, current)
        else:
            replication_factor = len(topic.partitions[0].replicas) if 0 in topic.partitions else 1
            placement = self._place(image, count - current, replication_factor)
        return self._partition_records(image, topic.topic_id, current, placement)

    # -- a broker leaving or joining (BrokerPartitionEffects, for the cluster control manager)

    def remove_broker(self, changes: PartitionChanges, broker_id: int, *, unregistered: bool = False) -> None:
        """The broker leaves every ISR it is in and every leadership: Kafka's generateLeaderAndIsrUpdates
        with brokerToRemove, under each topic's unclean election setting. Without ELR the last member
        stays in the ISR; with ELR it moves to the ELR, where it waits to lead again (partition_change.py).
        `unregistered`: the broker is gone for good, so it leaves the ELRs too."""
        changes.set_active(broker_id, False)
        for topic_id, partition_id, partition in list(changes.partitions()):
            in_elr = unregistered and broker_id in partition.elr
            if broker_id not in partition.isr and partition.leader != broker_id and not in_elr:
                continue
            self._update(
                changes, topic_id, partition_id, partition, [b for b in partition.isr if b != broker_id],
                unclean_shutdown=(broker_id,) if unregistered else (),
            )

    def remove_unclean_broker(self, changes: PartitionChanges, broker_id: int) -> bool:
        """A broker registered again after an unclean shutdown (KIP-966, Kafka's
        handleBrokerUncleanShutdown): it may have lost records it had acknowledged but not flushed, so it
        leaves every ISR, ELR and leadership at once, and may lead again only after it has caught up and
        rejoined an ISR. Without ELR (the feature not finalized) this is `remove_broker`, Kafka's rule
        before KIP-966. Answers whether ELR rules applied."""
        if not self.elr_enabled(changes.image):
            self.remove_broker(changes, broker_id)
            return False
        changes.set_active(broker_id, False)
        for topic_id, partition_id, partition in list(changes.partitions()):
            if broker_id not in partition.isr and broker_id not in partition.elr and partition.leader != broker_id:
                continue
            self._update(
                changes, topic_id, partition_id, partition, [b for b in partition.isr if b != broker_id],
                unclean_shutdown=(broker_id,),
            )
        return True

    def clear_elr(self, image: MetadataImage, topic_name: str | None) -> list:
        """Records clearing the ELR and LastKnownElr of the topic's partitions (None: every topic's), as
        Kafka does when min.insync.replicas changes (its ClearElrRecord, written here as partition changes):
        who is eligible depends on the min ISR the high watermark was held to, so replicas kept under the
        old value are not known to qualify under the new one."""
        if not self.elr_enabled(image):
            return []
        records = []
        for topic, partition_id, partition in partitions_in_order(image):
            if topic_name is not None and topic.name != topic_name:
                continue
            if partition.elr or partition.last_known_elr:
                record = PartitionChangeRecord(topic_id=topic.topic_id, partition_id=partition_id)
                if partition.elr:
                    record.eligible_leader_replicas = []
                if partition.last_known_elr:
                    record.last_known_elr = []
                records.append(record)
        return records

    @staticmethod
    def elr_enabled(image: MetadataImage) -> bool:
        """Whether the cluster keeps eligible leader replicas: eligible.leader.replicas.version >= 1."""
        return image.features.get(ELR_VERSION_FEATURE, 0) >= 1

    def elr_policy(
        self, image: MetadataImage, topic_name: str, partition: PartitionImage, unclean_shutdown: tuple[int, ...] = ()
    ) -> Elr | None:
        """The ELR rules for one partition's change (None: ELR is off): the topic's effective min ISR,
        min.insync.replicas bounded by the replication factor, as Kafka's getTopicEffectiveMinIsr."""
        if not self.elr_enabled(image):
            return None
        min_isr = min(self._configs.min_insync_replicas(image, topic_name), max(len(partition.replicas), 1))
        return Elr(min_isr=min_isr, unclean_shutdown=unclean_shutdown)

    def elect_leaderless(self, changes: PartitionChanges) -> None:
        """Every partition without a leader elects one if it can (after a broker became active)."""
        for topic_id, partition_id, partition in list(changes.partitions()):
            if partition.leader == NO_LEADER:
                self._update(changes, topic_id, partition_id, partition, None)

    def leads_any(self, image: MetadataImage, broker_id: int) -> bool:
        return any(p.leader == broker_id for _, _, p in partitions_in_order(image))

    # -- ISR changes and elections: AlterPartition, AssignReplicasToDirs, ElectLeaders, periodic elections

    def alter_partition(self, image: MetadataImage, request, version: int = 3) -> tuple[list, object]:
        """AlterPartition v2+ (topic ids) from a partition leader: (records, AlterPartitionResponse) with an
        error per partition (UNKNOWN_TOPIC_ID, UNKNOWN_TOPIC_OR_PARTITION, NOT_CONTROLLER for epochs newer
        than ours, FENCED_LEADER_EPOCH, INVALID_REQUEST (not the leader, an ISR outside the replicas or
        without the leader, a bad recovery state), INVALID_UPDATE_VERSION (an older partition epoch),
        INELIGIBLE_REPLICA (a member fenced, shutting down, unregistered or of another broker epoch)) or the
        partition as it will be. Raises MetadataError(STALE_BROKER_EPOCH) for the sender's broker epoch.

        A new ISR that completes a reassignment completes it; if that moves the leader, the answer is
        NEW_LEADER_ELECTED (and the records are written all the same), as in Kafka."""
        self._brokers.check_broker_epoch(image, request.broker_id, request.broker_epoch)
        changes = PartitionChanges(image)
        response = AlterPartitionResponse(error_code=0, topics=[])
        for topic_data in request.topics:
            topic = image.topics_by_id.get(topic_data.topic_id)
            out = AlterPartitionResponse.TopicData(topic_id=topic_data.topic_id, partitions=[])
            response.topics.append(out)
            for p in topic_data.partitions:
                if topic is None:
                    error = ErrorCode.UNKNOWN_TOPIC_ID
                else:
                    if version >= 3:
                        new_isr = [(b.broker_id, b.broker_epoch) for b in p.new_isr_with_epochs]
                    else:
                        new_isr = [(b, -1) for b in p.new_isr]
                    partition = changes.partition(topic.topic_id, p.partition_index)
                    error = _validate_alter_partition(image, request.broker_id, partition, p, new_isr, version)
                if error != ErrorCode.NONE:
                    out.partitions.append(
                        AlterPartitionResponse.TopicData.PartitionData(
                            partition_index=p.partition_index, error_code=error
                        )
                    )
                    continue
                assert topic is not None and partition is not None  # else the error above is not NONE
                record = build_partition_change(
                    partition,
                    topic.topic_id,
                    p.partition_index,
                    changes.active,
                    election=self._election_for(image, topic.name),
                    target_isr=[b for b, _ in new_isr],
                    target_leader_recovery_state=p.leader_recovery_state,
                    elr=self.elr_policy(image, topic.name, partition),
                )
                if record is not None:
                    changes.add_records([record])
                    partition = changes.partition(topic.topic_id, p.partition_index)
                    if record.leader not in (request.broker_id, NO_LEADER_CHANGE):
                        error = ErrorCode.NEW_LEADER_ELECTED if version > 1 else ErrorCode.FENCED_LEADER_EPOCH
                        out.partitions.append(
                            AlterPartitionResponse.TopicData.PartitionData(
                                partition_index=p.partition_index, error_code=error
                            )
                        )
                        continue
                assert partition is not None  # validated above; a change to it leaves it in place
                out.partitions.append(
                    AlterPartitionResponse.TopicData.PartitionData(
                        partition_index=p.partition_index,
                        error_code=0,
                        leader_id=partition.leader,
                        leader_epoch=partition.leader_epoch,
                        isr=list(partition.isr),
                        leader_recovery_state=partition.leader_recovery_state,
                        partition_epoch=partition.partition_epoch,
                    )
                )
        return changes.records, response

    def assign_replicas_to_dirs(self, image: MetadataImage, request) -> tuple[list, object]:
        """AssignReplicasToDirs from a broker: (records, AssignReplicasToDirsResponse). Directories are not
        tracked in the image (PartitionRecord v0); what is acted on is a replica assigned to a directory
        that is not online (DirectoryId.LOST): its log directory failed, so the broker leaves that
        partition's ISR and leadership, as Kafka's handleAssignReplicasToDirs does for an offline
        directory. Raises MetadataError(STALE_BROKER_EPOCH) for the sender's broker epoch."""
        from odradek.protocol.messages import AssignReplicasToDirsResponse as R

        broker_id = request.broker_id
        self._brokers.check_broker_epoch(image, broker_id, request.broker_epoch)
        changes = PartitionChanges(image)
        response = R(throttle_time_ms=0, error_code=0, directories=[])

        def acceptable(candidate: int) -> bool:
            return candidate != broker_id and changes.active(candidate)

        for directory in request.directories:
            out_dir = R.DirectoryData(id=directory.id, topics=[])
            response.directories.append(out_dir)
            for topic_data in directory.topics:
                topic = image.topics_by_id.get(topic_data.topic_id)
                out_topic = R.DirectoryData.TopicData(topic_id=topic_data.topic_id, partitions=[])
                out_dir.topics.append(out_topic)
                for p in topic_data.partitions:
                    partition = changes.partition(topic.topic_id, p.partition_index) if topic is not None else None
                    if topic is None:
                        error = ErrorCode.UNKNOWN_TOPIC_ID
                    elif partition is None:
                        error = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                    elif broker_id not in partition.replicas:
                        error = ErrorCode.NOT_LEADER_OR_FOLLOWER
                    else:
                        error = ErrorCode.NONE
                        if directory.id == LOST_DIRECTORY_ID and (broker_id in partition.isr or partition.leader == broker_id):
                            record = build_partition_change(
                                partition, topic.topic_id, p.partition_index, acceptable,
                                election=self._election_for(image, topic.name),
                                target_isr=[b for b in partition.isr if b != broker_id],
                                elr=self.elr_policy(image, topic.name, partition),
                            )
                            if record is not None:
                                changes.add_records([record])
                    out_topic.partitions.append(
                        R.DirectoryData.TopicData.PartitionData(partition_index=p.partition_index, error_code=int(error))
                    )
        return changes.records, response

    def elect_leaders(self, image: MetadataImage, request) -> tuple[list, object]:
        """ElectLeaders: (records, ElectLeadersResponse), a result per partition: NONE (elected),
        ELECTION_NOT_NEEDED (PREFERRED: the preferred replica leads; UNCLEAN: there is a leader),
        PREFERRED_LEADER_NOT_AVAILABLE, ELIGIBLE_LEADERS_NOT_AVAILABLE, UNKNOWN_TOPIC_OR_PARTITION. Null
        topic_partitions means every partition, and then ELECTION_NOT_NEEDED ones are left out. Raises
        MetadataError(INVALID_REQUEST) for an unknown election type."""
        try:
            election_type = ElectionType(request.election_type)
        except ValueError:
            raise MetadataError(ErrorCode.INVALID_REQUEST, f"Unknown election type {request.election_type}") from None
        changes = PartitionChanges(image)
        response = ElectLeadersResponse(error_code=0, replica_election_results=[])
        Result = ElectLeadersResponse.ReplicaElectionResult
        if request.topic_partitions is None:
            for name in sorted(image.topics_by_name):
                topic = image.topics_by_name[name]
                out = Result(topic=name, partition_result=[])
                response.replica_election_results.append(out)
                for partition_id in sorted(topic.partitions):
                    error, message = self._elect_leader(changes, name, partition_id, election_type)
                    if error != ErrorCode.ELECTION_NOT_NEEDED:
                        out.partition_result.append(
                            Result.PartitionResult(partition_id=partition_id, error_code=error, error_message=message)
                        )
        else:
            for t in request.topic_partitions:
                out = Result(topic=t.topic, partition_result=[])
                response.replica_election_results.append(out)
                for partition_id in t.partitions:
                    error, message = self._elect_leader(changes, t.topic, partition_id, election_type)
                    out.partition_result.append(
                        Result.PartitionResult(partition_id=partition_id, error_code=error, error_message=message)
                    )
        return changes.records, response

    def maybe_balance_partition_leaders(self, image: MetadataImage, now_ms: int) -> list:
        """auto.leader.rebalance.enable: every leader.imbalance.check.interval (the first call checks at once),
        a preferred-leader election for each partition led by another replica than its first, where the
        first can lead (in the ISR, active); at most max_elections_per_imbalance records."""
        if not self._configs.auto_leader_rebalance_enabled(image):
            self._next_balance_ms = None
            return []
        if self._next_balance_ms is not None and now_ms < self._next_balance_ms:
            return []
        self._next_balance_ms = now_ms + self._settings.leader_imbalance_check_interval_ms
        changes = PartitionChanges(image)
        for topic, partition_id, partition in partitions_in_order(image):
            if len(changes.records) >= self._settings.max_elections_per_imbalance:
                break
            if partition.leader == NO_LEADER or not partition.replicas or partition.leader == partition.replicas[0]:
                continue
            record = build_partition_change(
                partition, topic.topic_id, partition_id, changes.active, election=Election.PREFERRED,
                elr=self.elr_policy(image, topic.name, partition),
            )
            if record is not None:
                changes.add_records([record])
        return changes.records

    def maybe_elect_unclean_leaders(self, image: MetadataImage) -> list:
        """For each leaderless partition of a topic with unclean.leader.election.enable, an unclean
        election (as Kafka's periodic task: unclean election may have been enabled since it went offline)."""
        changes = PartitionChanges(image)
        for topic, partition_id, partition in partitions_in_order(image):
            if len(changes.records) >= self._settings.max_elections_per_imbalance:
                break
            if partition.leader != NO_LEADER or not self._configs.unclean_leader_election_enabled(image, topic.name):
                continue
            record = build_partition_change(
                partition, topic.topic_id, partition_id, changes.active, election=Election.UNCLEAN,
                elr=self.elr_policy(image, topic.name, partition),
            )
            if record is not None:
                changes.add_records([record])
        return changes.records

    # -- reassignments: AlterPartitionReassignments, ListPartitionReassignments

    def alter_partition_reassignments(self, image: MetadataImage, request) -> tuple[list, object]:
        """AlterPartitionReassignments: (records, AlterPartitionReassignmentsResponse), an error per
        partition (UNKNOWN_TOPIC_OR_PARTITION, INVALID_REPLICA_ASSIGNMENT, INVALID_REPLICATION_FACTOR when
        v1's allow_replication_factor_change is false, NO_REASSIGNMENT_IN_PROGRESS for a cancel).

        Replicas start a reassignment (or replace the one in progress): the partition's replicas become the
        target followed by the replicas to remove, adding/removing say which; it completes (replicas =
        target, the removed ones out of ISR and replicas, the leader moved if it was removed) in the same
        record when the ISR already holds the target, else when an ISR change (AlterPartition) brings the
        last target replica in. Null replicas cancel: the added replicas go, the removed ones stay."""
        changes = PartitionChanges(image)
        response = AlterPartitionReassignmentsResponse(
            error_code=0, error_message=None, responses=[],
            allow_replication_factor_change=request.allow_replication_factor_change,
        )
        Topic = AlterPartitionReassignmentsResponse.ReassignableTopicResponse
        for t in request.topics:
            out = Topic(name=t.name, partitions=[])
            response.responses.append(out)
            for p in t.partitions:
                error: int
                try:
                    self._alter_reassignment(changes, t.name, p, request.allow_replication_factor_change)
                    error, message = ErrorCode.NONE, None
                except MetadataError as e:
                    error, message = e.error_code, e.message
                out.partitions.append(
                    Topic.ReassignablePartitionResponse(
                        partition_index=p.partition_index, error_code=error, error_message=message
                    )
                )
        return changes.records, response

    def list_partition_reassignments(self, image: MetadataImage, request) -> object:
        """ListPartitionReassignments: the response (no records). Null topics lists every reassignment in
        progress; unknown topics and partitions not being reassigned are left out, as in Kafka."""
        response = ListPartitionReassignmentsResponse(error_code=0, error_message=None, topics=[])
        Ongoing = ListPartitionReassignmentsResponse.OngoingTopicReassignment
        if request.topics is None:
            wanted = [(name, sorted(image.topics_by_name[name].partitions)) for name in sorted(image.topics_by_name)]
        else:
            wanted = [(t.name, list(t.partition_indexes)) for t in request.topics]
        for name, partition_ids in wanted:
            topic = image.topics_by_name.get(name)
            if topic is None:
                continue
            ongoing = []
            for partition_id in partition_ids:
                partition = topic.partitions.get(partition_id)
                if partition is not None and is_reassigning(partition):
                    ongoing.append(
                        Ongoing.OngoingPartitionReassignment(
                            partition_index=partition_id,
                            replicas=list(partition.replicas),
                            adding_replicas=list(partition.adding_replicas),
                            removing_replicas=list(partition.removing_replicas),
                        )
                    )
            if ongoing:
                response.topics.append(Ongoing(name=name, partitions=ongoing))
        return response

    # -- helpers

    def _election_for(self, image: MetadataImage, topic: str) -> Election:
        return Election.UNCLEAN if self._configs.unclean_leader_election_enabled(image, topic) else Election.ONLINE

    def _update(
        self, changes: PartitionChanges, topic_id: uuid.UUID, partition_id: int, partition: PartitionImage, target_isr,
        *, unclean_shutdown: tuple[int, ...] = (),
    ) -> None:
        topic = changes.image.topics_by_id[topic_id]

        def acceptable(broker_id: int) -> bool:
            return broker_id not in unclean_shutdown and changes.active(broker_id)

        record = build_partition_change(
            partition, topic_id, partition_id, acceptable,
            election=self._election_for(changes.image, topic.name), target_isr=target_isr,
            elr=self.elr_policy(changes.image, topic.name, partition, unclean_shutdown),
        )
        if record is not None:
            changes.add_records([record])

    def _elect_leader(
        self, changes: PartitionChanges, topic_name: str, partition_id: int, election_type: ElectionType
    ) -> tuple[ErrorCode, str | None]:
        topic = changes.image.topics_by_name.get(topic_name)
        if topic is None:
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"No such topic as {topic_name}"
        partition = changes.partition(topic.topic_id, partition_id)
        if partition is None:
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"No such partition as {topic_name}-{partition_id}"
        has_preferred = bool(partition.replicas) and partition.leader == partition.replicas[0]
        if (election_type == ElectionType.PREFERRED and has_preferred) or (
            election_type == ElectionType.UNCLEAN and partition.leader != NO_LEADER
        ):
            return ErrorCode.ELECTION_NOT_NEEDED, _ELECTION_MESSAGES[ErrorCode.ELECTION_NOT_NEEDED]
        election = Election.PREFERRED if election_type == ElectionType.PREFERRED else Election.UNCLEAN
        record = build_partition_change(
            partition, topic.topic_id, partition_id, changes.active, election=election,
            elr=self.elr_policy(changes.image, topic_name, partition),
        )
        if record is None:
            if election_type == ElectionType.PREFERRED:
                error = ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE
            else:
                error = ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE
            return error, _ELECTION_MESSAGES[error]
        changes.add_records([record])
        return ErrorCode.NONE, None

    def _alter_reassignment(
        self, changes: PartitionChanges, topic_name: str, p, allow_replication_factor_change: bool
    ) -> None:
        image = changes.image
        topic = image.topics_by_name.get(topic_name)
        if topic is None:
            raise MetadataError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Unable to find a topic named {topic_name}.")
        partition = changes.partition(topic.topic_id, p.partition_index)
        if partition is None:
            raise MetadataError(
                ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Unable to find partition {topic_name}:{p.partition_index}."
            )
        if p.replicas is None:
            if not is_reassigning(partition):
                raise MetadataError(
                    ErrorCode.NO_REASSIGNMENT_IN_PROGRESS,
                    "No partition reassignment is in progress for this topic-partition.",
                )
            replicas, isr, unclean = revert_reassignment(partition)
            if unclean and not self._configs.unclean_leader_election_enabled(image, topic_name):
                raise MetadataError(
                    ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                    f"Unable to revert partition assignment for {topic_name}:{p.partition_index} because it would "
                    "require an unclean leader election.",
                )
            record = build_partition_change(
                partition, topic.topic_id, p.partition_index, changes.active,
                election=self._election_for(image, topic_name),
                target_isr=isr, target_replicas=replicas, target_removing=(), target_adding=(),
                elr=self.elr_policy(image, topic_name, partition),
            )
        else:
            self._checked_assignments(image, [p.replicas], p.partition_index)
            original = ReassignmentReplicas(
                partition.replicas, partition.adding_replicas, partition.removing_replicas
            ).original()
            if not allow_replication_factor_change and len(p.replicas) != len(original):
                raise MetadataError(
                    ErrorCode.INVALID_REPLICATION_FACTOR,
                    f"The replication factor is changed from {len(original)} to {len(p.replicas)} but "
                    "allowReplicationFactorChange is false",
                )
            target = ReassignmentReplicas.of(partition.replicas, p.replicas)
            record = build_partition_change(
                partition, topic.topic_id, p.partition_index, changes.active,
                target_replicas=target.replicas, target_removing=target.removing, target_adding=target.adding,
                elr=self.elr_policy(image, topic_name, partition),
            )
        if record is not None:
            changes.add_records([record])

    def _place(self, image: MetadataImage, count: int, replication_factor: int) -> list[list[int]]:
        return place_replicas(self._brokers.placement_candidates(image), count, replication_factor, self._rng)

    def _checked_assignments(
        self, image: MetadataImage, assignments: Sequence[Sequence[int]], first_partition: int | None
    ) -> list[list[int]]:
        """Manual assignments validated as Kafka does; `first_partition` None means a new topic, whose
        partitions must all have the same replica count."""
        usable = set(self._brokers.usable_brokers(image))
        placement = []
        size = None
        for index, replicas in enumerate(assignments):
            partition = index + (first_partition or 0)
            replicas = list(replicas)
            if not replicas:
                raise MetadataError(
                    ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                    "The manual partition assignment includes an empty replica list.",
                )
            if len(set(replicas)) != len(replicas):
                raise MetadataError(
                    ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                    f"The manual partition assignment includes the broker {_first_duplicate(replicas)} more than once.",
                )
            for broker_id in replicas:
                if not self._brokers.is_registered(image, broker_id):
                    raise MetadataError(
                        ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                        f"The manual partition assignment includes broker {broker_id}, "
                        "but no such broker is registered.",
                    )
            if not usable.intersection(replicas):
                raise MetadataError(
                    ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                    f"All brokers specified in the manual partition assignment for partition {partition} are fenced "
                    "or in controlled shutdown.",
                )
            if first_partition is None and size is not None and len(replicas) != size:
                raise MetadataError(
                    ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                    f"The manual partition assignment includes a partition with {len(replicas)} replica(s), but this "
                    f"is not consistent with previous partitions, which have {size} replica(s).",
                )
            size = len(replicas)
            placement.append(replicas)
        return placement

    def _partition_records(
        self, image: MetadataImage, topic_id: uuid.UUID, first_partition: int, placement: list[list[int]]
    ) -> list:
        usable = set(self._brokers.usable_brokers(image))
        records = []
        for index, replicas in enumerate(placement):
            isr = [b for b in replicas if b in usable]
            records.append(
                PartitionRecord(
                    partition_id=first_partition + index,
                    topic_id=topic_id,
                    replicas=replicas,
                    isr=isr,
                    leader=isr[0],
                    leader_epoch=0,
                    partition_epoch=0,
                )
            )
        return records


def _validate_alter_partition(
    image: MetadataImage, broker_id: int, partition: PartitionImage | None, p, new_isr: list[tuple[int, int]],
    version: int,
) -> ErrorCode:
    """Kafka's validateAlterPartitionData, in its order."""
    if partition is None:
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    # Newer epochs than ours: this controller is behind, the leader should find the active one.
    if p.leader_epoch > partition.leader_epoch or p.partition_epoch > partition.partition_epoch:
        return ErrorCode.NOT_CONTROLLER
    if p.leader_epoch < partition.leader_epoch:
        return ErrorCode.FENCED_LEADER_EPOCH
    if broker_id != partition.leader:
        return ErrorCode.INVALID_REQUEST
    if p.partition_epoch < partition.partition_epoch:
        return ErrorCode.INVALID_UPDATE_VERSION
    members = [b for b, _ in new_isr]
    if len(set(members)) != len(members) or not set(members) <= set(partition.replicas):
        return ErrorCode.INVALID_REQUEST
    if partition.leader not in members:
        return ErrorCode.INVALID_REQUEST
    if p.leader_recovery_state not in (LeaderRecoveryState.RECOVERED, LeaderRecoveryState.RECOVERING):
        return ErrorCode.INVALID_REQUEST
    if p.leader_recovery_state == LeaderRecoveryState.RECOVERING and len(members) > 1:
        return ErrorCode.INVALID_REQUEST
    if (
        partition.leader_recovery_state == LeaderRecoveryState.RECOVERED
        and p.leader_recovery_state == LeaderRecoveryState.RECOVERING
    ):
        return ErrorCode.INVALID_REQUEST
    for member, member_epoch in new_isr:
        broker = image.brokers.get(member)
        if (
            broker is None
            or broker.in_controlled_shutdown
            or broker.fenced
            or (member_epoch != -1 and member_epoch != broker.broker_epoch)
        ):
            return ErrorCode.INELIGIBLE_REPLICA if version > 1 else ErrorCode.OPERATION_NOT_ATTEMPTED
    return ErrorCode.NONE


def _check_partition_count(count: int) -> None:
    if count > MAX_PARTITIONS_PER_REQUEST:
        raise MetadataError(ErrorCode.INVALID_PARTITIONS, "Excessively large number of partitions per request.")


def _first_duplicate(values: Sequence[int]) -> int:
    seen = set()
    for v in values:
        if v in seen:
            return v
        seen.add(v)
    raise ValueError("no duplicate")
