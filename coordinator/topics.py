"""What coordinators need to know of topics: names, ids and partition counts.

The broker passes an object with these three methods (its metadata image); `TopicsImage` is a plain
in-memory one, for tests and for a broker without a metadata image yet. The group coordinator's consumer
protocol (KIP-848) needs it to assign partitions; OffsetCommit uses it to refuse offsets for partitions
that do not exist.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Protocol

__all__ = ["ImageTopics", "TopicMetadata", "TopicsImage", "TopicsView"]


@dataclass(frozen=True, slots=True)
class TopicMetadata:
    topic_id: uuid.UUID
    name: str
    num_partitions: int


class TopicsView(Protocol):
    def topic_by_name(self, name: str) -> TopicMetadata | None: ...

    def topic_by_id(self, topic_id: uuid.UUID) -> TopicMetadata | None: ...

    def topic_names(self) -> Iterable[str]: ...


class TopicsImage:
    def __init__(self, topics: Iterable[TopicMetadata] = ()) -> None:
        self._by_name: dict[str, TopicMetadata] = {}
        self._by_id: dict[uuid.UUID, TopicMetadata] = {}
        for topic in topics:
            self.put(topic)

    def put(self, topic: TopicMetadata) -> None:
        self.remove(topic.name)
        self._by_name[topic.name] = topic
        self._by_id[topic.topic_id] = topic

    def add(self, name: str, num_partitions: int, topic_id: uuid.UUID | None = None) -> TopicMetadata:
        existing = self._by_name.get(name)
        topic = TopicMetadata(topic_id or (existing.topic_id if existing else uuid.uuid4()), name, num_partitions)
        self.put(topic)
        return topic

    def remove(self, name: str) -> None:
        topic = self._by_name.pop(name, None)
        if topic is not None:
            self._by_id.pop(topic.topic_id, None)

    def topic_by_name(self, name: str) -> TopicMetadata | None:
        return self._by_name.get(name)

    def topic_by_id(self, topic_id: uuid.UUID) -> TopicMetadata | None:
        return self._by_id.get(topic_id)

    def topic_names(self) -> list[str]:
        return list(self._by_name)


class ImageTopics:
    """A TopicsView over the broker's metadata image: `image()` returns the current one.

    The image is read duck-typed: `topics_by_name` and `topics_by_id` mappings of topics that have
    `name`, `topic_id` and a `partitions` mapping (metadata.image.MetadataImage).
    """

    def __init__(self, image: Callable[[], Any]) -> None:
        self._image = image

    @staticmethod
    def _metadata(topic) -> TopicMetadata | None:
        return None if topic is None else TopicMetadata(topic.topic_id, topic.name, len(topic.partitions))

    def topic_by_name(self, name: str) -> TopicMetadata | None:
        return self._metadata(self._image().topics_by_name.get(name))

    def topic_by_id(self, topic_id: uuid.UUID) -> TopicMetadata | None:
        return self._metadata(self._image().topics_by_id.get(topic_id))

    def topic_names(self) -> list[str]:
        return list(self._image().topics_by_name)
