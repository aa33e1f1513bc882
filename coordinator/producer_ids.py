"""Producer ids for InitProducerId, handed out from blocks the controller allocates to this broker.

The controller records each block (a ProducerIdsRecord in the metadata log) before the broker uses it,
so no id is handed out twice, even across a `kill -9` or by two brokers. This manager asks for a block
through `request_block` (injected: the local controller in a cluster of one, AllocateProducerIds to the
active controller in a cluster) when its block runs out, and hands out the ids in order.

While no block is available (the request is on its way), `next_producer_id()` returns None and the
caller answers COORDINATOR_LOAD_IN_PROGRESS, which clients retry, as Kafka's RPCProducerIdManager does.
A local controller completes the request at once, so a cluster of one never sees that answer. Used by
the idempotent producers' InitProducerId today and by the transaction coordinator later.
"""

from __future__ import annotations

from collections.abc import Callable

from odradek.metadata.image import ProducerIdsBlock

from odradek.purgatory.deferred import Deferred


class ProducerIdManager:
    def __init__(self, request_block: Callable[[], Deferred[ProducerIdsBlock]]) -> None:
        self._request_block = request_block
        self._next_id = 0
        self._end_id = 0
        self._requesting: Deferred[ProducerIdsBlock] | None = None
        self.last_error: BaseException | None = None

    def next_producer_id(self) -> int | None:
        """The next unused producer id, or None while a new block is being allocated."""
        if self._next_id >= self._end_id:
            self._maybe_request_block()
            if self._next_id >= self._end_id:
                return None
        pid = self._next_id
        self._next_id += 1
        return pid

    def _maybe_request_block(self) -> None:
        if self._requesting is not None:
            return
        requesting = self._request_block()
        self._requesting = requesting
        requesting.add_callback(self._on_block)

    def _on_block(self, deferred: Deferred[ProducerIdsBlock]) -> None:
        self._requesting = None
        error = deferred.failed_with
        if error is not None:
            self.last_error = error  # the next call asks again
            return
        block = deferred.result()
        self._next_id, self._end_id = block.first_producer_id, block.next_block_first_id
