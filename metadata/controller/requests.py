"""The items of the controller's topic and config calls, and what a created topic reports.

One value per item of a CreateTopics, DeleteTopics, CreatePartitions or (Incremental)AlterConfigs, as the
broker's handlers build them from the request and the controller decides them, one at a time, each against
the image the items before it leave (controller/quorum_controller.py, `decide_each`).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state", "__share_group_state"})
"""Topics the broker creates itself (the coordinators' logs): clients may neither create nor delete them."""


@dataclass(frozen=True, slots=True)
class NewTopic:
    name: str
    num_partitions: int = -1  # -1: the controller's num.partitions
    replication_factor: int = -1  # -1: the controller's default.replication.factor
    configs: Mapping[str, str | None] = field(default_factory=dict)
    assignments: Mapping[int, Sequence[int]] | None = None  # partition index -> broker ids


@dataclass(frozen=True, slots=True)
class CreatedTopic:
    """What CreateTopics reports of a topic created (or that would be, with validate_only)."""

    name: str
    topic_id: uuid.UUID | None  # None with validate_only: no id is drawn
    num_partitions: int
    replication_factor: int
    configs: Mapping[str, str]  # the topic's overrides


@dataclass(frozen=True, slots=True)
class TopicToDelete:
    name: str | None = None
    topic_id: uuid.UUID | None = None


@dataclass(frozen=True, slots=True)
class NewPartitions:
    name: str
    count: int
    assignments: Sequence[Sequence[int]] | None = None


@dataclass(frozen=True, slots=True)
class ConfigChange:
    """Set (a value) or delete (None) the named configs of one resource."""

    resource_type: int
    resource_name: str
    changes: Mapping[str, str | None]
