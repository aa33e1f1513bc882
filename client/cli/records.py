"""`odradek produce` and `odradek consume`: lines to records and records to lines, with the properties of
Kafka's console producer (LineMessageReader) and console consumer (DefaultMessageFormatter)."""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import signal
import sys
import time
from datetime import datetime, timezone
from typing import Any

from ..cluster import TopicPartition
from ..config import ConsumerConfig, ProducerConfig
from ..errors import KafkaConnectionError, KafkaError, KafkaTimeoutError
from .common import (
    EXIT_FAILED,
    EXIT_OK,
    EXIT_TERMINATED,
    EXIT_UNREACHABLE,
    Output,
    SubParsers,
    UsageError,
    key_value,
    non_negative,
    positive,
    print_error,
    print_warning,
    seconds,
    timestamp,
    topic_argument,
)
from .properties import client_config


def register(sub: SubParsers) -> None:
    """`produce` and `consume`."""
    # produce
    p = sub.add("produce", handler=produce, help="send lines from stdin or a file as records")
    topic_argument(p)
    p.add_argument("--file", "-f", default="-", help="read lines from this file (default stdin)")
    p.add_argument("--key-separator", "-K", default=None, help="split each line into KEY<sep>VALUE")
    p.add_argument("--key", "-k", default=None, help="the same key for every record")
    p.add_argument("--property", dest="reader_properties", type=key_value, action="append", default=[],
                   metavar="KEY=VALUE",
                   help="Kafka's console producer properties: parse.key, key.separator, null.marker")
    p.add_argument("--header", "-H", type=key_value, action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--partition", "-p", type=non_negative, default=None)
    p.add_argument("--compression", "--compression-codec", "-z", choices=["none", "gzip", "snappy", "lz4", "zstd"],
                   default=None)
    p.add_argument("--acks", "--request-required-acks", choices=["0", "1", "-1", "all"], default=None)
    p.add_argument("--linger-ms", type=non_negative, default=None)
    p.add_argument("--null-empty", "--tombstone", "-Z", action="store_true",
                   help="send an empty value as null (a tombstone)")

    # consume
    p = sub.add("consume", handler=consume, help="print records")
    topic_argument(p)
    p.add_argument("--group", "-g", default=None, help="consume as a member of this group (commits offsets)")
    start = p.add_mutually_exclusive_group()
    start.add_argument("--from-beginning", action="store_true")
    start.add_argument("--from-end", action="store_true")
    start.add_argument("--offset", type=_offset, default=None, metavar="OFFSET|earliest|latest",
                       help="start at this offset (a number needs --partition)")
    start.add_argument("--timestamp", type=timestamp, default=None, metavar="MS|ISO-8601",
                       help="start at the first record at or after this time")
    p.add_argument("--partition", "--partitions", "-p", type=non_negative, action="append", default=None)
    p.add_argument("--count", "--max-messages", "--num", "-n", "-c", type=positive, default=None,
                   help="exit after this many records")
    idle = p.add_mutually_exclusive_group()
    idle.add_argument("--idle-timeout", type=seconds, default=None,
                      help="exit when no record arrives for this many seconds")
    idle.add_argument("--timeout-ms", dest="idle_timeout", type=_milliseconds, default=None,
                      help="the same in milliseconds (Kafka's console consumer)")
    p.add_argument("--format", "-F", "-f", default=None,
                   help="template: {topic} {partition} {offset} {timestamp} {key} {value} {headers} "
                        "{delivery_count} (with --share)")
    p.add_argument("--print-key", action="store_true", help="print KEY<tab>VALUE")
    p.add_argument("--property", dest="formatter_properties", type=key_value, action="append", default=[],
                   metavar="KEY=VALUE",
                   help="Kafka's console consumer properties: print.key, print.timestamp, print.partition, "
                        "print.offset, print.headers, print.value, key.separator, line.separator, "
                        "headers.separator, null.literal")
    p.add_argument("--isolation-level", choices=["read_uncommitted", "read_committed"], default=None)
    p.add_argument("--no-commit", action="store_true", help="with --group: do not commit offsets")
    p.add_argument("--share", default=None, metavar="GROUP",
                   help="consume as a member of this share group (KIP-932): records are acquired from the "
                        "group, and those printed are accepted (the group's share.auto.offset.reset says where "
                        "it starts)")
    disposition = p.add_mutually_exclusive_group()
    disposition.add_argument("--reject", action="store_true",
                             help="with --share: reject the printed records instead (never delivered again)")
    disposition.add_argument("--release", action="store_true",
                             help="with --share: release the printed records instead (delivered again)")


def _offset(text: str) -> int | str:
    """A start offset: a number, or Kafka's console consumer words earliest / latest."""
    if text in ("earliest", "latest", "beginning", "end"):
        return {"beginning": "earliest", "end": "latest"}.get(text, text)
    return non_negative(text)


def _milliseconds(text: str) -> float:
    return positive(text) / 1000


# Kafka's console producer (LineMessageReader) and console consumer (DefaultMessageFormatter) properties.
_READER_PROPERTIES = {"parse.key": "false", "key.separator": "\t", "null.marker": None}
_FORMATTER_PROPERTIES = {"print.timestamp": "false", "print.key": "false", "print.value": "true",
                         "print.partition": "false", "print.offset": "false", "print.headers": "false",
                         "key.separator": "\t", "line.separator": "\n", "headers.separator": ",",
                         "null.literal": "null"}


def _known_properties(given: list[tuple[str, str]], known: dict[str, str | None], option: str) -> dict[str, str]:
    props = {k: v for k, v in known.items() if v is not None}
    for key, value in given:
        if key not in known:
            raise UsageError(f"unknown {option} {key!r} (known: {', '.join(known)})")
        props[key] = value.strip().lower() if key.startswith(("print.", "parse.")) else value
    return props


def _reader_properties(args: argparse.Namespace) -> dict[str, str]:
    """--property (Kafka's spelling) and --key-separator (kcat's -K) as one reader configuration."""
    props = _known_properties(args.reader_properties, _READER_PROPERTIES, "--property")
    if args.key_separator is not None:
        props.update({"parse.key": "true", "key.separator": args.key_separator})
    if props["parse.key"] == "true" and args.key is not None:
        raise UsageError("--key and a key separator both give the key: pick one")
    return props


async def produce(args: argparse.Namespace, out: Output) -> int:
    from ..producer import Producer

    config = client_config(ProducerConfig, args, acks=args.acks, compression_type=args.compression,
                     linger_ms=args.linger_ms, max_block_ms=int(args.timeout * 1000),
                     # --timeout bounds each record's delivery too: a partition refusing writes
                     # (NOT_ENOUGH_REPLICAS) is retried until then, not for the client's default 2 min.
                     delivery_timeout_ms=int(args.timeout * 1000), request_timeout_ms=int(args.timeout * 1000))
    reader = _reader_properties(args)
    headers = [(k, v.encode()) for k, v in args.header]
    sep = reader["key.separator"].encode() if reader.get("parse.key") == "true" else None
    null_marker = reader["null.marker"].encode() if "null.marker" in reader else None
    fixed_key = args.key.encode() if args.key is not None else None
    stream = sys.stdin.buffer if args.file == "-" else open(args.file, "rb")
    sent = 0
    failures: list[BaseException] = []
    partitions: dict[int, int] = {}
    try:
        async with Producer(config) as producer:
            await producer.partitions_for(args.topic)

            def delivered(md: Any, error: BaseException | None) -> None:
                if error is not None:
                    failures.append(error)
                else:
                    partitions[md.partition] = partitions.get(md.partition, 0) + 1

            for raw in stream:
                line = raw.rstrip(b"\r\n") if raw.endswith(b"\n") else raw
                key = fixed_key
                value: bytes | None = line
                if sep is not None:
                    if sep not in line:
                        raise UsageError(f"line {sent + 1} has no key separator {sep.decode()!r}")
                    key, value = line.split(sep, 1)
                if null_marker is not None:
                    key = None if key == null_marker else key
                    value = None if value == null_marker else value
                if args.null_empty and not value:
                    value = None
                await producer.send(args.topic, value, key, partition=args.partition, headers=headers,
                                    on_delivery=delivered)
                sent += 1
            await producer.flush()
    finally:
        if stream is not sys.stdin.buffer:
            stream.close()
    if failures:
        print_error(f"{len(failures)} of {sent} record(s) failed: {failures[0]}")
        code = EXIT_UNREACHABLE if isinstance(failures[0], (KafkaConnectionError, KafkaTimeoutError)) else EXIT_FAILED
        return code
    if out.json:
        out.emit_json({"topic": args.topic, "records": sent, "partitions": {str(k): v for k, v in sorted(partitions.items())}})
    else:
        sys.stderr.write(f"produced {sent} record(s) to {args.topic}\n")
    return EXIT_OK


def _text(value: bytes | None) -> str:
    if value is None:
        return "null"
    return value.decode("utf-8", "backslashreplace")


def _record_json(record: Any) -> dict[str, Any]:
    return {
        "topic": record.topic, "partition": record.partition, "offset": record.offset,
        "timestamp": record.timestamp, "timestamp_type": "LogAppendTime" if record.timestamp_type else "CreateTime",
        "key": None if record.key is None else _text(record.key),
        "value": None if record.value is None else _text(record.value),
        "headers": {k: (None if v is None else _text(v)) for k, v in record.headers},
        **({"delivery_count": record.delivery_count} if hasattr(record, "delivery_count") else {}),
    }


class _Template:
    FIELDS = {"topic", "partition", "offset", "timestamp", "key", "value", "headers", "timestamp_type", "iso_time",
              "delivery_count"}  # delivery_count: share groups (--share); "-" otherwise

    def __init__(self, template: str):
        template = template.encode().decode("unicode_escape")
        for name in re.findall(r"{([^{}:!]*)", template):
            if name not in self.FIELDS:
                raise UsageError(f"unknown field {{{name}}} in --format (known: {', '.join(sorted(self.FIELDS))})")
        self.template = template

    def render(self, record: Any) -> str:
        fields = _record_json(record)
        fields["key"] = _text(record.key)
        fields["value"] = _text(record.value)
        fields["headers"] = ",".join(f"{k}={_text(v)}" for k, v in record.headers)
        fields.setdefault("delivery_count", "-")
        fields["iso_time"] = datetime.fromtimestamp(record.timestamp / 1000, timezone.utc).isoformat(timespec="milliseconds")
        return self.template.format(**fields)


class _KafkaFormatter:
    """kafka-console-consumer.sh's DefaultMessageFormatter: `--property print.key=true` and friends.

    The layout is Kafka's: [CreateTime:TS] [Partition:P] [Offset:O] [HEADERS|NO_HEADERS] [KEY] [VALUE], the
    columns joined by key.separator, each record ended by line.separator, null keys and values as
    null.literal. `--print-key` is print.key=true.
    """

    def __init__(self, args: argparse.Namespace):
        props = _known_properties(args.formatter_properties, _FORMATTER_PROPERTIES, "--property")
        if args.print_key:
            props["print.key"] = "true"
        self.columns = [name for name in ("timestamp", "partition", "offset", "headers", "key", "value")
                        if props[f"print.{name}"] == "true"]
        self.column_separator = props["key.separator"]
        self.line_separator = props["line.separator"]
        self.headers_separator = props["headers.separator"]
        self.null_literal = props["null.literal"]

    def _bytes(self, value: bytes | None) -> str:
        return self.null_literal if value is None else value.decode("utf-8", "backslashreplace")

    def render(self, record: Any) -> str:
        cells = []
        for column in self.columns:
            if column == "timestamp":
                kind = "LogAppendTime" if record.timestamp_type else "CreateTime"
                cells.append(f"{kind}:{record.timestamp}")
            elif column == "partition":
                cells.append(f"Partition:{record.partition}")
            elif column == "offset":
                cells.append(f"Offset:{record.offset}")
            elif column == "headers":
                cells.append(self.headers_separator.join(f"{k}:{self._bytes(v)}" for k, v in record.headers)
                             or "NO_HEADERS")
            else:
                cells.append(self._bytes(record.key if column == "key" else record.value))
        # After the last column Kafka writes the line separator instead of the column separator.
        return self.column_separator.join(cells) + self.line_separator if cells else ""


def _render(record: Any, out: Output, template: _Template | None, formatter: _KafkaFormatter | None) -> str:
    """One record as `consume` prints it (JSON, --format, Kafka's formatter properties, or the value)."""
    if out.json:
        return json.dumps(_record_json(record)) + "\n"
    if template is not None:
        return template.render(record) + "\n"
    if formatter is not None:
        return formatter.render(record)
    return _text(record.value) + "\n"


async def consume(args: argparse.Namespace, out: Output) -> int:
    from ..consumer import Consumer

    if args.share is not None:
        return await _consume_share(args, out)
    if args.reject or args.release:
        raise UsageError("--reject and --release acknowledge records of a share group: they need --share GROUP")
    if args.offset in ("earliest", "latest"):  # Kafka's console consumer spells the two ends as offsets
        args.from_beginning, args.from_end, args.offset = args.offset == "earliest", args.offset == "latest", None
    if args.offset is not None and not args.partition:
        raise UsageError("--offset needs --partition")
    template = _Template(args.format) if args.format else None
    formatter = _KafkaFormatter(args) if args.formatter_properties or args.print_key else None
    reset = "earliest" if args.from_beginning else "latest"
    config = client_config(ConsumerConfig, args, group_id=args.group, auto_offset_reset=reset,
                     enable_auto_commit=bool(args.group) and not args.no_commit,
                     isolation_level=args.isolation_level, allow_auto_create_topics=False)
    count = 0
    async with Consumer(config=config) as consumer:
        parts = await consumer.client.partitions_for(args.topic, must_exist=True)
        chosen = parts
        if args.partition:
            missing = [p for p in args.partition if p not in parts]
            if missing:
                raise KafkaError(3, f"{args.topic!r} has {len(parts)} partition(s)", context=f"partition {missing[0]}")
            chosen = args.partition
        tps = [TopicPartition(args.topic, p) for p in chosen]
        if args.group and not args.partition:
            consumer.subscribe([args.topic])
            if args.from_beginning or args.from_end or args.timestamp is not None:
                print_warning("with --group, the start position applies only to partitions without committed offsets")
        else:
            consumer.assign(tps)
            if args.from_beginning:
                consumer.seek_to_beginning(*tps)
            elif args.from_end:
                consumer.seek_to_end(*tps)
            elif args.offset is not None:
                for tp in tps:
                    consumer.seek(tp, args.offset)
            elif args.timestamp is not None:
                found = await consumer.offsets_for_times({tp: args.timestamp for tp in tps})
                for tp in tps:
                    if found.get(tp) is not None:
                        consumer.seek(tp, found[tp].offset)
                    else:
                        consumer.seek_to_end(tp)
        write = sys.stdout.write
        last = time.monotonic()
        # SIGTERM ends the loop as Ctrl-C does: the consumer commits and leaves its group on the way out,
        # rather than dying in place and holding its partitions until the session times out.
        terminated: list[int] = []
        loop = asyncio.get_running_loop()
        loop.add_signal_handler(signal.SIGTERM, terminated.append, signal.SIGTERM)
        while (args.count is None or count < args.count) and not terminated:
            wait_ms = 500
            batch = await consumer.getmany(timeout_ms=wait_ms,
                                           max_records=None if args.count is None else args.count - count)
            if not batch:
                if args.idle_timeout is not None and time.monotonic() - last >= args.idle_timeout:
                    break
                continue
            last = time.monotonic()
            records = sorted((r for rs in batch.values() for r in rs), key=lambda r: (r.partition, r.offset))
            for r in records:
                write(_render(r, out, template, formatter))
                count += 1
            sys.stdout.flush()
        loop.remove_signal_handler(signal.SIGTERM)
        if args.group and not args.no_commit:
            await consumer.commit()
    return EXIT_TERMINATED if terminated else EXIT_OK


# What --share cannot be combined with, and why (Kafka's kafka-console-share-consumer has none of them either).
_NOT_WITH_SHARE = {
    "group": "--group joins a consumer group; --share joins a share group",
    "from_beginning": "a share group starts where its share.auto.offset.reset says: "
                      "`odradek config set group GROUP share.auto.offset.reset=earliest`",
    "from_end": "a share group starts where its share.auto.offset.reset says (latest by default)",
    "offset": "a share group's start offset is the group's: `odradek group reset-offsets`",
    "timestamp": "a share group's start offset is the group's: `odradek group reset-offsets`",
    "partition": "the share group assigns the partitions",
    "isolation_level": "a share group's isolation level is the group's share.isolation.level config",
    "no_commit": "printed records are acknowledged; --release gives them back to the group instead",
}


async def _consume_share(args: argparse.Namespace, out: Output) -> int:
    """`consume TOPIC --share GROUP`: a member of a share group (client/share.py) that prints what it gets
    and accepts it (implicit acknowledgement), or with --reject / --release acknowledges each printed record
    that way (explicit). With --max-messages N it acquires no more than N records at a time (the record-limit
    acquire mode of KIP-1206), so records it would not print are not acquired (their delivery count would
    otherwise rise); whatever it holds unprinted at the end is released when it closes."""
    from ..share import AcknowledgeType, ShareConsumer, ShareConsumerConfig

    for name, why in _NOT_WITH_SHARE.items():
        if getattr(args, name):
            raise UsageError(f"--{name.replace('_', '-')} does not go with --share: {why}")
    kind = AcknowledgeType.REJECT if args.reject else AcknowledgeType.RELEASE if args.release else AcknowledgeType.ACCEPT
    limit = None if args.count is None else min(args.count, 500)
    config = client_config(ShareConsumerConfig, args, group_id=args.share,
                           share_acknowledgement_mode=None if kind == AcknowledgeType.ACCEPT else "explicit",
                           share_acquire_mode=None if limit is None else "record_limit", max_poll_records=limit)
    template = _Template(args.format) if args.format else None
    formatter = _KafkaFormatter(args) if args.formatter_properties or args.print_key else None
    count = 0
    terminated: list[int] = []
    failed: dict[TopicPartition, BaseException] = {}
    loop = asyncio.get_running_loop()
    async with ShareConsumer(config=config) as consumer:
        # The acknowledgements go out with the fetches and, for the last records, as close() ends the
        # share sessions (not in a commit() first, whose wait would let one more fetch acquire records only
        # to give them back); their failures come to this callback.
        consumer.set_acknowledgement_commit_callback(
            lambda offsets, error: error is not None and failed.update(dict.fromkeys(offsets, error)))
        await consumer.client.partitions_for(args.topic, must_exist=True)
        consumer.subscribe([args.topic])
        write = sys.stdout.write
        last = time.monotonic()
        loop.add_signal_handler(signal.SIGTERM, terminated.append, signal.SIGTERM)
        try:
            while (args.count is None or count < args.count) and not terminated:
                records = await consumer.poll(timeout_ms=500,
                                              max_records=None if args.count is None else args.count - count)
                if not records:
                    if args.idle_timeout is not None and time.monotonic() - last >= args.idle_timeout:
                        break
                    continue
                last = time.monotonic()
                for r in sorted(records, key=lambda r: (r.partition, r.offset)):
                    write(_render(r, out, template, formatter))
                    if config.explicit:
                        consumer.acknowledge(r, kind)
                    count += 1
                sys.stdout.flush()
        finally:
            loop.remove_signal_handler(signal.SIGTERM)
    for tp, error in sorted(failed.items()):
        print_warning(f"acknowledging the records of {tp} failed: {error}")
    if not out.json:
        done = {AcknowledgeType.ACCEPT: "accepted", AcknowledgeType.REJECT: "rejected"}.get(kind, "released")
        sys.stderr.write(f"{done} {count} record(s) of share group {args.share}\n")
    if failed:
        return EXIT_FAILED
    return EXIT_TERMINATED if terminated else EXIT_OK
