"""Arrow conversion: fetched records to record batches in the fixed read schema, and written batches back
to records.

Spark checks a `pyarrow.RecordBatch` from `read()` against its own Arrow rendering of the read schema
with `Schema.equals`, so the types here are exactly Spark's: binary (not large_binary), int32 partition,
int64 offset, timestamp[us, UTC], and headers as list<element: struct<key: string, value: binary>>.
A record without headers gets a null headers cell, as Spark's Kafka source gives.

On the write side Spark hands the sink its rows as Arrow batches in the input DataFrame's own types;
key and value may be string or binary (strings are written as UTF-8), partition any integer type.
"""

from __future__ import annotations

from typing import Any, Iterable, Iterator, Sequence

import pyarrow as pa
import pyarrow.compute as pc

from .schema import HEADERS_DDL, READ_SCHEMA_DDL, read_schema_ddl

__all__ = [
    "HEADERS_DDL", "HEADERS_TYPE", "READ_SCHEMA_DDL", "WRITE_COLUMNS", "read_schema", "read_schema_ddl",
    "records_to_batch", "rows_from_batch", "check_write_schema",
]

HEADER_STRUCT = pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())])
HEADERS_TYPE = pa.list_(pa.field("element", HEADER_STRUCT))

_BASE_FIELDS = [
    pa.field("key", pa.binary()),
    pa.field("value", pa.binary()),
    pa.field("topic", pa.string()),
    pa.field("partition", pa.int32()),
    pa.field("offset", pa.int64()),
    pa.field("timestamp", pa.timestamp("us", tz="UTC")),
    pa.field("timestampType", pa.int32()),
]
_SCHEMA = pa.schema(_BASE_FIELDS)
_SCHEMA_WITH_HEADERS = pa.schema(_BASE_FIELDS + [pa.field("headers", HEADERS_TYPE)])



def read_schema(include_headers: bool) -> pa.Schema:
    return _SCHEMA_WITH_HEADERS if include_headers else _SCHEMA


def records_to_batch(topic: str, partition: int, records: Sequence[Any], *, include_headers: bool,
                     timestamp_type: int = 0) -> pa.RecordBatch:
    """Records of one topic-partition -> one RecordBatch.

    `records` are `client.consumer.ConsumerRecord`s or `protocol.records.Record`s: anything with offset,
    timestamp (ms), key, value and headers; `timestamp_type` is used for records that lack the attribute
    (a protocol Record takes it from its batch).
    """
    n = len(records)
    keys = [r.key for r in records]
    values = [r.value for r in records]
    offsets = [r.offset for r in records]
    timestamps_ms = pa.array([r.timestamp for r in records], pa.int64())
    types = [getattr(r, "timestamp_type", timestamp_type) for r in records]
    columns = [
        pa.array(keys, pa.binary()),
        pa.array(values, pa.binary()),
        pa.array([topic] * n, pa.string()) if n else pa.array([], pa.string()),
        pa.array([partition] * n, pa.int32()),
        pa.array(offsets, pa.int64()),
        pc.multiply(timestamps_ms, 1000).cast(pa.timestamp("us", tz="UTC")),
        pa.array(types, pa.int32()),
    ]
    if include_headers:
        columns.append(_headers_array([r.headers for r in records]))
    return pa.RecordBatch.from_arrays(columns, schema=read_schema(include_headers))


def _headers_array(all_headers: Iterable[Sequence[tuple[str, bytes | None]] | None]) -> pa.Array:
    list_offsets = [0]
    mask = []
    header_keys: list[str] = []
    header_values: list[bytes | None] = []
    for headers in all_headers:
        if headers:
            for k, v in headers:
                header_keys.append(k if isinstance(k, str) else bytes(k).decode("utf-8", "replace"))
                header_values.append(v)
            mask.append(False)
        else:
            mask.append(True)
        list_offsets.append(len(header_keys))
    structs = pa.StructArray.from_arrays(
        [pa.array(header_keys, pa.string()), pa.array(header_values, pa.binary())], fields=list(HEADER_STRUCT))
    return pa.ListArray.from_arrays(pa.array(list_offsets, pa.int32()), structs, type=HEADERS_TYPE,
                                    mask=pa.array(mask, pa.bool_()))


# ---------------------------------------------------------------------------------------- write side

# column -> what it may be; `value` is the only required column (`topic` unless the option is set)
WRITE_COLUMNS = {
    "key": "string or binary",
    "value": "string or binary",
    "topic": "string",
    "partition": "int",
    "headers": "array<struct<key: string, value: binary>>",
}


def check_write_schema(columns: dict[str, str], *, topic_option: str | None) -> None:
    """Validate the DataFrame being written. `columns` maps names to Spark type names
    (`StructField.dataType.simpleString()`); raises ValueError naming the problem, as Spark's Kafka
    sink raises AnalysisException."""
    lowered = {name.lower(): kind for name, kind in columns.items()}
    if "value" not in lowered:
        raise ValueError("the DataFrame to write needs a 'value' column (string or binary)")
    if topic_option is None and "topic" not in lowered:
        raise ValueError("no topic: set the 'topic' option or give the DataFrame a 'topic' column")
    for name in ("key", "value"):
        if name in lowered and lowered[name] not in ("string", "binary"):
            raise ValueError(f"column {name!r} must be string or binary, not {lowered[name]}")
    if "topic" in lowered and lowered["topic"] != "string" and topic_option is None:
        raise ValueError(f"column 'topic' must be a string, not {lowered['topic']}")
    if "partition" in lowered and lowered["partition"] not in ("int", "tinyint", "smallint", "bigint"):
        raise ValueError(f"column 'partition' must be an integer, not {lowered['partition']}")
    if "headers" in lowered:
        kind = lowered["headers"].replace(" ", "")
        if kind not in ("array<struct<key:string,value:binary>>", "array<struct<key:string,value:string>>"):
            raise ValueError(f"column 'headers' must be array<struct<key: string, value: binary>>, "
                             f"not {lowered['headers']}")


Row = tuple  # (topic, partition or None, key, value, headers list)


def _column(batch: pa.RecordBatch, name: str) -> list | None:
    index = batch.schema.get_field_index(name)
    if index < 0:
        for i, field in enumerate(batch.schema):
            if field.name.lower() == name:
                index = i
                break
        else:
            return None
    return batch.column(index).to_pylist()


def _as_bytes(value: Any) -> bytes | None:
    if value is None or isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode("utf-8")
    return bytes(value)


def rows_from_batch(batch: pa.RecordBatch, *, topic_option: str | None) -> Iterator[Row]:
    """(topic, partition, key, value, headers) for each row; the topic option overrides the column."""
    n = batch.num_rows
    keys = _column(batch, "key") or [None] * n
    values = _column(batch, "value")
    if values is None:
        raise ValueError("the DataFrame to write needs a 'value' column")
    topics = [topic_option] * n if topic_option is not None else _column(batch, "topic")
    if topics is None:
        raise ValueError("no topic: set the 'topic' option or give the DataFrame a 'topic' column")
    partitions = _column(batch, "partition") or [None] * n
    headers_column = _column(batch, "headers") or [None] * n
    for topic, partition, key, value, headers in zip(topics, partitions, keys, values, headers_column):
        if topic is None:
            raise ValueError("a row has a null topic (set the 'topic' option or fill the topic column)")
        hdrs = [(h["key"], _as_bytes(h["value"])) for h in headers] if headers else []
        yield topic, partition, _as_bytes(key), _as_bytes(value), hdrs
