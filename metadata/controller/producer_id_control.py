"""The controller's view of producer ids (Kafka's ProducerIdControlManager).

Brokers hand out producer ids (InitProducerId) from blocks the controller allocates: a ProducerIdsRecord
moves the cluster's next free id past the block, and names the broker and its broker epoch. The image keeps
only that next id, so a block is never handed out twice once its record is committed, across restarts and
controller changes. A broker uses a block only after the record is committed.
"""

from __future__ import annotations

from odradek.protocol.errors import ErrorCode
from odradek.metadata.image import MetadataError, MetadataImage, ProducerIdsBlock
from odradek.metadata.records import ProducerIdsRecord

from .brokers import RegisteredBrokers

DEFAULT_PRODUCER_ID_BLOCK_SIZE = 1000
_INT64_MAX = (1 << 63) - 1


class ProducerIdControlManager:
    """See the module doc. `brokers` answers whether the asking broker is registered, and its epoch."""

    def __init__(self, brokers: RegisteredBrokers) -> None:
        self._brokers = brokers

    def allocate_producer_ids(
        self, image: MetadataImage, broker_id: int, block_size: int = DEFAULT_PRODUCER_ID_BLOCK_SIZE
    ) -> tuple[list, ProducerIdsBlock]:
        """A ProducerIdsRecord handing the next block of `block_size` ids to `broker_id`, and the block.
        Use the block only after the record is appended: then no restart can hand it out again."""
        broker = self._brokers.registration(image, broker_id)
        if block_size < 1:
            raise MetadataError(ErrorCode.INVALID_REQUEST, f"Invalid producer id block size {block_size}")
        first = image.next_producer_id
        if first > _INT64_MAX - block_size:
            raise MetadataError(
                ErrorCode.UNKNOWN_SERVER_ERROR,
                "Exhausted all producerIds as the next block's end producerId has exceeded the int64 type limit",
            )
        block = ProducerIdsBlock(broker_id, first, block_size)
        record = ProducerIdsRecord(
            broker_id=broker_id, broker_epoch=broker.broker_epoch, next_producer_id=block.next_block_first_id
        )
        return [record], block
