"""One publisher of committed metadata, followed by everything on the node that depends on it.

Theory of operation
-------------------
Whatever reacts to metadata (the replica manager becoming leader or follower of partitions and opening
or dropping their logs, log configs, the group coordinator loading and unloading its `__consumer_offsets`
partitions, later the transaction coordinator, the authorizer's ACLs, quotas) registers here as a
`MetadataListener` and is told of every committed change as a `MetadataUpdate`: the image before, the
image after, and which topics changed or went away. Nothing reads the metadata log itself, and nothing
applies a change on its own: a topic created by a request and a topic found in the log at start-up
reach the listeners the same way, so start-up and a live change take one road.

Listeners are called in the order they registered, synchronously, on the caller's thread: the core is
sans-I/O, and broker/ decides when to publish (after the local append today; after the quorum's high
watermark passes the records with the controller quorum). A listener registered after images were
published first hears the current image as one update from the empty image, as Kafka's metadata loader
hands a late publisher a full snapshot.

A listener that raises does not keep the others from hearing the update; the first error is raised to
the publisher's caller once everyone has been told, since a node that could not apply committed
metadata must not go on as if it had.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from odradek.metadata.image import MetadataDelta, MetadataImage, TopicImage

EMPTY_IMAGE = MetadataImage()


@dataclass(frozen=True, slots=True)
class MetadataUpdate:
    previous: MetadataImage
    image: MetadataImage
    changed_topic_ids: frozenset[uuid.UUID]
    removed_topics: Mapping[uuid.UUID, TopicImage] = field(default_factory=dict)
    offset: int = -1  # the metadata log end offset this image reflects (-1: unknown)
    # For a changed topic whose records named only some partitions: those partition ids (Kafka's
    # TopicDelta). A changed topic without an entry (or every topic, when None) changed as a whole.
    changed_partitions: Mapping[uuid.UUID, frozenset[int]] | None = None

    def partitions_changed(self, topic: TopicImage) -> Iterable[int]:
        """The partition ids of changed `topic` that this update may have moved, in ascending order."""
        if self.changed_partitions is not None:
            ids = self.changed_partitions.get(topic.topic_id)
            if ids is not None:
                return sorted(i for i in ids if i in topic.partitions)
        return sorted(topic.partitions)

    @property
    def is_snapshot(self) -> bool:
        """True for a whole image published from nothing (start-up, or a listener that joined late)."""
        return self.previous is EMPTY_IMAGE

    @classmethod
    def from_delta(cls, delta: MetadataDelta, image: MetadataImage, offset: int = -1) -> MetadataUpdate:
        return cls(delta.image, image, frozenset(delta.changed_topic_ids), dict(delta.removed_topics), offset,
                   delta.changed_partitions())

    @classmethod
    def snapshot(cls, image: MetadataImage, offset: int = -1) -> MetadataUpdate:
        return cls(EMPTY_IMAGE, image, frozenset(image.topics_by_id), {}, offset)


class MetadataListener(Protocol):
    def on_metadata_update(self, update: MetadataUpdate) -> None: ...


class MetadataPublisher:
    def __init__(self) -> None:
        self.image: MetadataImage = EMPTY_IMAGE
        self.offset = -1
        self._listeners: list[MetadataListener] = []

    def register(self, listener: MetadataListener) -> None:
        if listener in self._listeners:
            raise ValueError(f"{listener!r} is registered already")
        self._listeners.append(listener)
        if self.image is not EMPTY_IMAGE:
            listener.on_metadata_update(MetadataUpdate.snapshot(self.image, self.offset))

    def unregister(self, listener: MetadataListener) -> None:
        self._listeners.remove(listener)

    def publish(self, update: MetadataUpdate) -> None:
        """Make `update.image` the current image and tell every listener, in registration order."""
        self.image = update.image
        self.offset = update.offset
        first_error: BaseException | None = None
        for listener in list(self._listeners):
            try:
                listener.on_metadata_update(update)
            except Exception as e:  # noqa: BLE001 - everyone hears the update; the first failure is raised
                if first_error is None:
                    first_error = e
        if first_error is not None:
            raise first_error
