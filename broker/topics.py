"""Topic life cycle on this broker: metadata records first, then the partition logs follow the image.

Every change (create, delete, add partitions, alter configs) is a write to the metadata log; once it is
durable the resulting delta is applied here: new partitions get a log and become led by this broker,
removed topics lose theirs, changed configs reach the open logs. On start the same `apply_image` path
opens the logs of every topic in the replayed image, so a restart and a live change take one road.
"""

from __future__ import annotations

import structlog

from odradek.protocol.errors import ErrorCode
from odradek.replication.metadata import MetadataError, validate_topic_name
from odradek.storage.config import LogConfig
from odradek.storage.names import TopicPartition

from .config import ConfigError
from .topic_config import effective_topic_configs, to_log_config_kwargs, validate_topic_configs

log = structlog.get_logger("odradek.topics")

INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state"})


class TopicError(Exception):
    def __init__(self, error_code: int, message: str):
        super().__init__(message)
        self.error_code = int(error_code)
        self.message = message


class TopicManager:
    def __init__(self, broker):
        self.broker = broker

    # -- names --

    @staticmethod
    def is_valid_name(name: str) -> bool:
        try:
            validate_topic_name(name)
        except MetadataError:
            return False
        return True

    @staticmethod
    def is_internal(name: str) -> bool:
        return name in INTERNAL_TOPICS

    # -- changes --

    def auto_create(self, name: str) -> int | None:
        """Create `name` with the broker's defaults when auto.create.topics.enable allows it."""
        cfg = self.broker.config
        if not cfg.auto_create_topics_enable:
            return int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        if not self.is_valid_name(name):
            return int(ErrorCode.INVALID_TOPIC_EXCEPTION)
        if name in INTERNAL_TOPICS:
            return int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        try:
            self.create(name, cfg.num_partitions, cfg.default_replication_factor, {})
        except TopicError as e:
            if e.error_code != ErrorCode.TOPIC_ALREADY_EXISTS:
                return e.error_code
        return None

    def create(
        self, name: str, num_partitions: int, replication_factor: int, configs: dict[str, str | None],
        *, assignments: dict[int, list[int]] | None = None, validate_only: bool = False, internal: bool = False,
    ) -> None:
        cfg = self.broker.config
        if name in INTERNAL_TOPICS and not internal:
            raise TopicError(ErrorCode.INVALID_REQUEST, f"Topic {name} is internal and is created by the broker.")
        if assignments is None:
            num_partitions = cfg.num_partitions if num_partitions == -1 else num_partitions
            replication_factor = cfg.default_replication_factor if replication_factor == -1 else replication_factor
        try:
            validate_topic_configs(configs)
        except ConfigError as e:
            raise TopicError(ErrorCode.INVALID_CONFIG, str(e)) from e
        metadata = self.broker.metadata
        try:
            records = metadata.create_topic(name, num_partitions, replication_factor, configs, assignments=assignments)
        except MetadataError as e:
            raise TopicError(e.error_code, e.message) from e
        if not validate_only:
            self._write(records)

    def delete(self, name: str | None, topic_id=None) -> str:
        if not self.broker.config.delete_topic_enable:
            raise TopicError(ErrorCode.TOPIC_DELETION_DISABLED, "Topic deletion is disabled.")
        image = self.broker.metadata.image
        topic = image.topics_by_name.get(name) if name else image.topics_by_id.get(topic_id)
        if (topic.name if topic else name) in INTERNAL_TOPICS:
            internal = topic.name if topic else name
            raise TopicError(ErrorCode.TOPIC_AUTHORIZATION_FAILED, f"Internal topic {internal} cannot be deleted.")
        try:
            records = self.broker.metadata.delete_topic(name, topic_id=topic_id)
        except MetadataError as e:
            raise TopicError(e.error_code, e.message) from e
        self._write(records)
        return topic.name if topic else name

    def create_partitions(self, name: str, count: int, assignments=None, *, validate_only: bool = False) -> None:
        try:
            records = self.broker.metadata.create_partitions(name, count, assignments)
        except MetadataError as e:
            raise TopicError(e.error_code, e.message) from e
        if not validate_only:
            self._write(records)

    def alter_topic_configs(self, name: str, configs: dict[str, str | None], *, validate_only: bool = False) -> None:
        if name not in self.broker.metadata.image.topics_by_name:
            raise TopicError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Topic {name} does not exist.")
        try:
            validate_topic_configs({k: v for k, v in configs.items() if v is not None})
        except ConfigError as e:
            raise TopicError(ErrorCode.INVALID_CONFIG, str(e)) from e
        try:
            records = self.broker.metadata.alter_configs(2, name, configs)
        except MetadataError as e:
            raise TopicError(e.error_code, e.message) from e
        if not validate_only:
            self._write(records)

    def _write(self, records: list) -> None:
        delta = self.broker.metadata.append(records, self.broker.now_ms())
        self.apply_image(changed=delta.changed_topic_ids, removed=list(delta.removed_topics.values()))

    # -- the logs follow the image --

    def log_config(self, name: str) -> LogConfig:
        overrides = dict(self.broker.metadata.image.topic_configs(name))
        effective = effective_topic_configs(overrides, self.broker.config)
        return LogConfig(**to_log_config_kwargs(effective, fields=LogConfig.__dataclass_fields__))

    def apply_image(self, changed=None, removed=None) -> None:
        """Open logs for partitions this broker leads and is missing; drop logs of removed topics.

        With no arguments every topic of the image is visited (start-up); `removed` lists the names (or
        images) of topics that went away.
        """
        broker = self.broker
        image = broker.metadata.image
        now_ms = broker.now_ms()
        data = broker.data
        for item in removed or ():
            topic_name = item if isinstance(item, str) else getattr(item, "name", None)
            for tp in [tp for tp in data.partitions if tp.topic == topic_name]:
                data.remove_partition(tp)
                broker.log_manager.delete_log(tp)
            if broker._groups is not None and hasattr(broker._groups, "on_topic_deleted"):
                broker._groups.on_topic_deleted(topic_name)
        topics = image.topics_by_name.values() if changed is None else [
            image.topics_by_id[t] for t in changed if t in image.topics_by_id
        ]
        for topic in topics:
            broker.log_manager.update_topic_config(topic.name, self.log_config(topic.name))
            effective = effective_topic_configs(dict(image.topic_configs(topic.name)), broker.config)
            min_isr = int(effective.get("min.insync.replicas", 1))
            for index, p in topic.partitions.items():
                tp = TopicPartition(topic.name, index)
                partition = data.get_partition(tp)
                if partition is not None:
                    partition.min_insync_replicas = min_isr  # a config change reaches the hosted partitions
                    continue
                if p.leader != broker.node_id:
                    continue  # followers arrive with replication
                plog = broker.log_manager.get_or_create_log(tp, topic_id=topic.topic_id.bytes, now_ms=now_ms)
                data.add_leader_partition(
                    tp, topic_id=topic.topic_id, log=plog, leader_epoch=p.leader_epoch, replicas=p.replicas,
                    isr=p.isr, min_insync_replicas=min_isr, now_ms=now_ms,
                )
