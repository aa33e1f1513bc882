"""InitProducerId (22) for idempotent producers.

Producer ids come from blocks recorded in the metadata log before use, so no id is handed out twice, even
across a `kill -9`. A producer that presents its current id and epoch (KIP-360, v3+) gets the same id
with the epoch bumped, or a fresh id when the epoch would overflow. Transactions are not served yet: a
transactional id is refused with TRANSACTIONAL_ID_AUTHORIZATION_FAILED, a clear, non-retriable error.
"""

from __future__ import annotations

from odradek.protocol.errors import ErrorCode
from odradek.protocol.messages import InitProducerIdResponse

from . import handles

MAX_EPOCH = 32767


class ProducerIdManager:
    def __init__(self, broker):
        self.broker = broker
        self.next_id = 0
        self.end_id = 0

    def next_producer_id(self) -> int:
        if self.next_id >= self.end_id:
            records, block = self.broker.metadata.allocate_producer_ids(self.broker.node_id)
            self.broker.metadata.append(records, self.broker.now_ms())
            self.next_id, self.end_id = block.first_producer_id, block.next_block_first_id
        pid = self.next_id
        self.next_id += 1
        return pid


def _manager(broker) -> ProducerIdManager:
    manager = getattr(broker, "producer_ids", None)
    if manager is None:
        manager = broker.producer_ids = ProducerIdManager(broker)
    return manager


@handles(22, (0, 5))
def handle_init_producer_id(broker, ctx, request):
    if request.transactional_id is not None:
        return InitProducerIdResponse(
            throttle_time_ms=0, error_code=int(ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED), producer_id=-1, producer_epoch=-1,
        )
    manager = _manager(broker)
    if ctx.api_version >= 3 and request.producer_id >= 0 and 0 <= request.producer_epoch < MAX_EPOCH - 1:
        return InitProducerIdResponse(
            throttle_time_ms=0, error_code=0, producer_id=request.producer_id, producer_epoch=request.producer_epoch + 1,
        )
    return InitProducerIdResponse(throttle_time_ms=0, error_code=0, producer_id=manager.next_producer_id(), producer_epoch=0)
