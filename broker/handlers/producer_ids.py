"""InitProducerId (22): idempotent producers here, transactional ones at the transaction coordinator.

Producer ids come from `services.producer_ids` (coordinator/producer_ids.py), which hands them out of
blocks the controller records in the metadata log before use, so no id is handed out twice, even across
a `kill -9`. While a new block is on its way the answer is COORDINATOR_LOAD_IN_PROGRESS, which clients
retry (a local controller allocates at once). A producer that presents its current id and epoch
(KIP-360, v3+) gets the same id with the epoch bumped, or a fresh id when the epoch would overflow.
A request with a transactional id goes to the transaction coordinator (coordinator/transaction/), which
keeps the id's producer id and epoch in `__transaction_state`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from odradek.protocol.errors import ErrorCode
from odradek.protocol.messages import InitProducerIdResponse

from ..authorizer import producer_id_refusal
from . import Answer, handles
from .groups import respond

if TYPE_CHECKING:
    from odradek.protocol.messages import InitProducerIdRequest
    from ..context import RequestContext
    from ..services import BrokerServices

MAX_EPOCH = 32767


def _failed(code: ErrorCode) -> InitProducerIdResponse:
    return InitProducerIdResponse(throttle_time_ms=0, error_code=int(code), producer_id=-1, producer_epoch=-1)


@handles(22, (0, 5))
def handle_init_producer_id(services: BrokerServices, ctx: RequestContext, request: InitProducerIdRequest) -> Answer:
    if (refused := producer_id_refusal(services, ctx, request.transactional_id)) is not None:
        return _failed(refused)
    if request.transactional_id is not None:
        return respond(services, services.transactions.init_producer_id(request, ctx.api_version, services.now_ms()))
    if ctx.api_version >= 3 and request.producer_id >= 0 and 0 <= request.producer_epoch < MAX_EPOCH - 1:
        return InitProducerIdResponse(
            throttle_time_ms=0, error_code=0, producer_id=request.producer_id, producer_epoch=request.producer_epoch + 1,
        )
    producer_id = services.producer_ids.next_producer_id()
    if producer_id is None:
        return _failed(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)
    return InitProducerIdResponse(throttle_time_ms=0, error_code=0, producer_id=producer_id, producer_epoch=0)
