"""`odradek txn list|describe|describe-producers|find-hanging|abort`, as kafka-transactions.sh."""

from __future__ import annotations

import argparse
import time
from typing import Any, Callable

from odradek.protocol.errors import ErrorCode

from ..admin import Admin
from ..cluster import TopicPartition
from ..errors import KafkaError
from .common import EXIT_OK, Output, SubParsers, UsageError, non_negative, print_warning
from .properties import admin_for


def register(sub: SubParsers) -> None:
    """`txn ...`."""
    xsub = SubParsers(sub.add("txn", help="transactions: list, describe, abort a hanging one (kafka-transactions.sh)"),
                       "action")
    p = xsub.add("list", handler=txn_list, help="transactional ids every coordinator knows, with their state")
    p.add_argument("--state", action="append", default=[], metavar="STATE", help="only these states (Ongoing, ...)")
    p.add_argument("--producer-id", action="append", type=int, default=[], metavar="ID")
    p.add_argument("--duration-filter", type=non_negative, default=None, metavar="MS",
                   help="only transactions running longer than MS")
    p.add_argument("--transactional-id-pattern", default=None, metavar="REGEX",
                   help="only transactional ids this regular expression matches whole (ListTransactions v2)")
    p = xsub.add("describe", handler=txn_describe, help="one transactional id: producer, epoch, state, timeout, partitions")
    p.add_argument("transactional_id", nargs="?", metavar="TRANSACTIONAL_ID")
    p.add_argument("--transactional-id", dest="transactional_id_option", default=None, metavar="TRANSACTIONAL_ID")
    p = xsub.add("describe-producers", handler=txn_describe_producers, help="the active producers of a partition (id, epoch, open transaction)")
    p.add_argument("--topic", "-t", required=True)
    p.add_argument("--partition", type=non_negative, required=True)
    p.add_argument("--broker-id", type=int, default=None, help="ask this replica instead of the leader")
    p = xsub.add("find-hanging", handler=txn_find_hanging, help="open transactions on partitions that no coordinator will close")
    p.add_argument("--topic", "-t", default=None, help="only this topic (or --broker-id)")
    p.add_argument("--partition", type=non_negative, default=None, help="with --topic: only this partition")
    p.add_argument("--broker-id", type=int, default=None, help="only the partitions this broker has a replica of")
    p.add_argument("--max-transaction-timeout", type=non_negative, default=15, metavar="MINUTES",
                   help="only transactions whose producer wrote nothing for longer than this (default 15)")
    p = xsub.add("abort", handler=txn_abort, help="abort a hanging transaction on a partition (writes its ABORT marker)")
    p.add_argument("--topic", "-t", required=True)
    p.add_argument("--partition", type=non_negative, required=True)
    who = p.add_mutually_exclusive_group(required=True)
    who.add_argument("--start-offset", type=non_negative, default=None,
                     help="the first offset of the open transaction (as DescribeProducers shows it)")
    who.add_argument("--producer-id", type=int, default=None, help="with --producer-epoch and --coordinator-epoch")
    p.add_argument("--producer-epoch", type=int, default=None)
    p.add_argument("--coordinator-epoch", type=int, default=None)


async def _txn_send_all(admin: Admin, build: Callable[[int], Any], api_key: int, what: str) -> list[tuple[int, Any]]:
    """One request per broker (each answers for the transactional ids it coordinates): (broker, response)."""
    await admin.client.refresh_metadata()
    responses = []
    for node in sorted(admin.client.cluster.brokers):
        async def attempt(node: int = node) -> Any:
            response = await admin.client.send(node, build, api_key=api_key)
            if response.error_code:
                raise KafkaError(response.error_code, context=f"{what} on broker {node}")
            return response

        responses.append((node, await admin.client.call(attempt, what=what)))
    return responses


async def txn_list(args: argparse.Namespace, out: Output) -> int:
    from odradek.protocol.messages import REQUESTS

    cls = REQUESTS[66]

    def build(version: int) -> Any:
        if args.transactional_id_pattern is not None and version < 2:
            raise UsageError("--transactional-id-pattern needs ListTransactions v2 (Kafka 4.1): this broker has "
                             f"v{version}")
        return cls(state_filters=list(args.state), producer_id_filters=list(args.producer_id),
                   duration_filter=-1 if args.duration_filter is None else args.duration_filter,
                   transactional_id_pattern=args.transactional_id_pattern)

    async with admin_for(args) as admin:
        responses = await _txn_send_all(admin, build, 66, "ListTransactions")
    listed = sorted({(t.transactional_id, node, t.producer_id, t.transaction_state)
                     for node, r in responses for t in r.transaction_states})
    unknown = sorted({s for _, r in responses for s in r.unknown_state_filters})
    for state in unknown:
        print_warning(f"unknown state {state!r}")
    if out.json:
        out.emit_json([{"transactional_id": t, "coordinator": c, "producer_id": p, "state": s} for t, c, p, s in listed])
    else:
        out.table(["TRANSACTIONAL ID", "COORDINATOR", "PRODUCER ID", "STATE"], [list(row) for row in listed])
    return EXIT_OK


async def txn_describe(args: argparse.Namespace, out: Output) -> int:
    from odradek.protocol.messages import REQUESTS

    from ..cluster import COORDINATOR_TRANSACTION

    txn_id = args.transactional_id or args.transactional_id_option
    if not txn_id:
        raise UsageError("no transactional id given: add TRANSACTIONAL_ID or --transactional-id")
    cls = REQUESTS[65]
    async with admin_for(args) as admin:
        async def attempt() -> Any:
            node = await admin.client.coordinator(txn_id, COORDINATOR_TRANSACTION)
            response = await admin.client.send(node, cls(transactional_ids=[txn_id]))
            state = response.transaction_states[0]
            code = ErrorCode.for_code(state.error_code)
            if code in (ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE):
                admin.client.invalidate_coordinator(txn_id, COORDINATOR_TRANSACTION)
            if code is not ErrorCode.NONE:
                raise KafkaError(code, context=f"transactional id {txn_id!r}")
            return node, state

        node, state = await admin.client.call(attempt, what="DescribeTransactions")
    partitions = [f"{t.topic}-{p}" for t in state.topics for p in t.partitions]
    started = state.transaction_start_time_ms
    duration_ms = int(time.time() * 1000) - started if started >= 0 else None  # kafka-transactions.sh's column
    record = {"transactional_id": txn_id, "coordinator": node, "producer_id": state.producer_id,
              "producer_epoch": state.producer_epoch, "state": state.transaction_state,
              "timeout_ms": state.transaction_timeout_ms, "start_time_ms": started, "duration_ms": duration_ms,
              "partitions": partitions}
    if out.json:
        out.emit_json(record)
    else:
        out.table(["COORDINATOR", "TRANSACTIONAL ID", "PRODUCER ID", "EPOCH", "STATE", "TIMEOUT MS", "STARTED",
                   "DURATION MS", "PARTITIONS"],
                  [[node, txn_id, state.producer_id, state.producer_epoch, state.transaction_state,
                    state.transaction_timeout_ms, started if started >= 0 else "None",
                    "None" if duration_ms is None else duration_ms, ",".join(partitions) or "-"]])
    return EXIT_OK


async def _describe_producers(admin: Admin, partitions: list[TopicPartition], broker_id: int | None) -> dict:
    """{partition: its active producers} from DescribeProducers, asked of each partition's leader (or of
    `broker_id`); a partition answering an error raises it."""
    from odradek.protocol.messages import REQUESTS

    cls = REQUESTS[61]
    by_node: dict[int, list[TopicPartition]] = {}
    for tp in partitions:
        node = broker_id if broker_id is not None else await admin.client.leader_for(tp)
        by_node.setdefault(node, []).append(tp)
    found: dict[TopicPartition, list[Any]] = {}
    for node, tps in sorted(by_node.items()):
        by_topic: dict[str, list[int]] = {}
        for tp in tps:
            by_topic.setdefault(tp.topic, []).append(tp.partition)
        response = await admin.client.send(node, cls(topics=[cls.TopicRequest(name=t, partition_indexes=ps)
                                                             for t, ps in by_topic.items()]))
        for topic in response.topics:
            for part in topic.partitions:
                tp = TopicPartition(topic.name, part.partition_index)
                if part.error_code:
                    where = f"broker {broker_id}" if broker_id is not None else "its leader"
                    raise KafkaError(part.error_code, part.error_message, context=f"{tp} on {where}")
                found[tp] = list(part.active_producers)
    return found


def _producer_row(p: Any) -> dict:
    return {"producer_id": p.producer_id, "producer_epoch": p.producer_epoch,
            "coordinator_epoch": p.coordinator_epoch, "last_sequence": p.last_sequence,
            "last_timestamp": p.last_timestamp,
            "current_transaction_start_offset": p.current_txn_start_offset if p.current_txn_start_offset >= 0 else None}


async def txn_describe_producers(args: argparse.Namespace, out: Output) -> int:
    """kafka-transactions.sh describe-producers: the producer state the partition's leader (or a replica) keeps."""
    tp = TopicPartition(args.topic, args.partition)
    async with admin_for(args) as admin:
        producers = (await _describe_producers(admin, [tp], args.broker_id))[tp]
    rows = [_producer_row(p) for p in producers]
    if out.json:
        out.emit_json(rows)
    else:
        out.table(["PRODUCER ID", "EPOCH", "COORDINATOR EPOCH", "LAST SEQUENCE", "LAST TIMESTAMP",
                   "TRANSACTION START OFFSET"],
                  [[r["producer_id"], r["producer_epoch"], r["coordinator_epoch"], r["last_sequence"],
                    r["last_timestamp"], "None" if r["current_transaction_start_offset"] is None
                    else r["current_transaction_start_offset"]] for r in rows])
    return EXIT_OK


async def txn_find_hanging(args: argparse.Namespace, out: Output) -> int:
    """kafka-transactions.sh find-hanging. A partition's open transaction (DescribeProducers) whose producer
    wrote nothing for longer than --max-transaction-timeout is hanging when no coordinator will ever write its
    marker: no transactional id has its producer id (ListTransactions), the id is gone (DescribeTransactions),
    or the id's transaction does not hold the partition (a write the coordinator never heard of)."""
    from odradek.protocol.messages import REQUESTS

    from ..cluster import COORDINATOR_TRANSACTION

    if args.topic is None and args.broker_id is None:
        raise UsageError("find-hanging needs --topic or --broker-id to limit the search")
    if args.partition is not None and args.topic is None:
        raise UsageError("--partition needs --topic")
    max_idle_ms = args.max_transaction_timeout * 60_000
    async with admin_for(args) as admin:
        if args.topic is not None and args.partition is not None:
            partitions = [TopicPartition(args.topic, args.partition)]
        else:
            described = await admin.describe_topics([args.topic] if args.topic is not None else None)
            partitions = [TopicPartition(d.name, p.partition) for d in described for p in d.partitions
                          if args.broker_id is None or args.broker_id in p.replicas]
        producers = await _describe_producers(admin, partitions, args.broker_id) if partitions else {}
        now_ms = int(time.time() * 1000)
        candidates = [(tp, p) for tp, ps in sorted(producers.items()) for p in ps
                      if p.current_txn_start_offset >= 0 and now_ms - p.last_timestamp > max_idle_ms]
        transactional_ids: dict[int, str] = {}
        descriptions: dict[str, Any] = {}
        if candidates:
            list_cls = REQUESTS[66]
            pids = sorted({p.producer_id for _, p in candidates})
            for _, response in await _txn_send_all(
                    admin, lambda v: list_cls(state_filters=[], producer_id_filters=pids, duration_filter=-1),
                    66, "ListTransactions"):
                for t in response.transaction_states:
                    if t.producer_id in pids:
                        transactional_ids[t.producer_id] = t.transactional_id
            describe_cls = REQUESTS[65]
            for txn_id in sorted(set(transactional_ids.values())):
                async def attempt(txn_id: str = txn_id) -> Any:
                    node = await admin.client.coordinator(txn_id, COORDINATOR_TRANSACTION)
                    state = (await admin.client.send(node, describe_cls(transactional_ids=[txn_id]))).transaction_states[0]
                    code = ErrorCode.for_code(state.error_code)
                    if code in (ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE):
                        admin.client.invalidate_coordinator(txn_id, COORDINATOR_TRANSACTION)
                    if code is ErrorCode.TRANSACTIONAL_ID_NOT_FOUND:
                        return None
                    if code is not ErrorCode.NONE:
                        raise KafkaError(code, context=f"transactional id {txn_id!r}")
                    return state

                descriptions[txn_id] = await admin.client.call(attempt, what="DescribeTransactions")
    hanging = []
    for tp, p in candidates:
        txn_id = transactional_ids.get(p.producer_id)
        state = descriptions.get(txn_id) if txn_id is not None else None
        if state is not None and any(t.topic == tp.topic and tp.partition in t.partitions for t in state.topics):
            continue  # the coordinator holds the partition in the transaction: it will write the marker
        hanging.append({"topic": tp.topic, "partition": tp.partition, "producer_id": p.producer_id,
                        "producer_epoch": p.producer_epoch, "coordinator_epoch": p.coordinator_epoch,
                        "start_offset": p.current_txn_start_offset, "last_timestamp": p.last_timestamp,
                        "duration_min": (now_ms - p.last_timestamp) // 60_000})
    if out.json:
        out.emit_json(hanging)
    else:
        out.table(["TOPIC", "PARTITION", "PRODUCER ID", "EPOCH", "COORDINATOR EPOCH", "START OFFSET",
                   "LAST TIMESTAMP", "DURATION (MIN)"], [list(h.values()) for h in hanging])
    return EXIT_OK


async def txn_abort(args: argparse.Namespace, out: Output) -> int:
    """kafka-transactions.sh abort: find the partition's open transaction (DescribeProducers, by its start
    offset) or take the producer given, and ask the partition's leader to write its ABORT marker."""
    from odradek.protocol.messages import REQUESTS

    tp = TopicPartition(args.topic, args.partition)
    async with admin_for(args) as admin:
        leader = await admin.client.leader_for(tp)
        if args.start_offset is not None:
            describe = REQUESTS[61]
            response = await admin.client.send(leader, describe(topics=[describe.TopicRequest(
                name=tp.topic, partition_indexes=[tp.partition])]))
            (part,) = response.topics[0].partitions
            if part.error_code:
                raise KafkaError(part.error_code, part.error_message, context=str(tp))
            match = [p for p in part.active_producers if p.current_txn_start_offset == args.start_offset]
            if not match:
                raise UsageError(f"no open transaction starts at offset {args.start_offset} of {tp}")
            pid, epoch, coordinator_epoch = match[0].producer_id, match[0].producer_epoch, match[0].coordinator_epoch
        else:
            if args.producer_epoch is None or args.coordinator_epoch is None:
                raise UsageError("--producer-id needs --producer-epoch and --coordinator-epoch")
            pid, epoch, coordinator_epoch = args.producer_id, args.producer_epoch, args.coordinator_epoch
        # A producer whose transaction began before any marker was written has coordinator epoch -1 in
        # DescribeProducers: 0 is at or below any coordinator epoch there can be (kafka-transactions.sh too).
        coordinator_epoch = max(0, coordinator_epoch)
        markers = REQUESTS[27]
        Marker = markers.WritableTxnMarker
        response = await admin.client.send(leader, markers(markers=[Marker(
            producer_id=pid, producer_epoch=epoch, transaction_result=False, coordinator_epoch=coordinator_epoch,
            topics=[Marker.WritableTxnMarkerTopic(name=tp.topic, partition_indexes=[tp.partition])])]))
    code = next((p.error_code for m in response.markers for t in m.topics for p in t.partitions), 0)
    if code:
        raise KafkaError(code, context=f"abort of producer {pid} on {tp}")
    if out.json:
        out.emit_json({"topic": tp.topic, "partition": tp.partition, "producer_id": pid, "producer_epoch": epoch,
                       "aborted": True})
    else:
        out.line(f"aborted the transaction of producer {pid} (epoch {epoch}) on {tp}")
    return EXIT_OK
