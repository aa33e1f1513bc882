"""Transaction APIs, handed to the transaction coordinator (`services.transactions`,
coordinator/transaction/coordinator.py): AddPartitionsToTxn (24), AddOffsetsToTxn (25), EndTxn (26),
DescribeTransactions (65), ListTransactions (66); and TxnOffsetCommit (28), which the group coordinator
serves (pending offsets made visible by the commit marker). InitProducerId is in producer_ids.py and
WriteTxnMarkers, the partitions' side, in its own module.

EndTxn stops at v4: v5 is Transaction Version 2 (KIP-890 part 2, an epoch bump per transaction), which
clients use only when the broker finalizes the `transaction.version` feature at 2; this broker does not,
and none of the clients tested here (librdkafka, aiokafka, kafka-python) sends v5.
"""

from __future__ import annotations

from .groups import respond
from . import handles


@handles(24, (0, 5))
def handle_add_partitions_to_txn(services, ctx, request):
    return respond(services, services.transactions.add_partitions_to_txn(request, ctx.api_version, services.now_ms()))


@handles(25, (0, 4))
def handle_add_offsets_to_txn(services, ctx, request):
    return respond(services, services.transactions.add_offsets_to_txn(request, ctx.api_version, services.now_ms()))


@handles(26, (0, 4))
def handle_end_txn(services, ctx, request):
    return respond(services, services.transactions.end_txn(request, ctx.api_version, services.now_ms()))


@handles(28, (0, 5))
def handle_txn_offset_commit(services, ctx, request):
    return respond(services, services.groups.txn_offset_commit(request, ctx.api_version, services.now_ms()))


@handles(65, (0, 0))
def handle_describe_transactions(services, ctx, request):
    return services.transactions.describe_transactions(request, ctx.api_version, services.now_ms())


@handles(66, (0, 2))
def handle_list_transactions(services, ctx, request):
    return services.transactions.list_transactions(request, ctx.api_version, services.now_ms())
