"""Arrow conversion for the data source (pipeline/arrow.py): the read schema is Spark's exactly, records
from the protocol layer and from the client convert alike, and written batches become records."""

from __future__ import annotations

import datetime as dt

import pytest

pa = pytest.importorskip("pyarrow")

from odradek.client.consumer import ConsumerRecord  # noqa: E402
from odradek.pipeline.arrow import (  # noqa: E402
    check_write_schema,
    read_schema,
    read_schema_ddl,
    records_to_batch,
    rows_from_batch,
)
from odradek.protocol.records import build_batch, iter_records  # noqa: E402


def test_read_schema_is_what_spark_expects():
    types = pytest.importorskip("pyspark.sql.types")
    pandas_types = pytest.importorskip("pyspark.sql.pandas.types")
    T = types
    header = T.StructType([T.StructField("key", T.StringType()), T.StructField("value", T.BinaryType())])
    spark_schema = T.StructType([
        T.StructField("key", T.BinaryType()), T.StructField("value", T.BinaryType()),
        T.StructField("topic", T.StringType()), T.StructField("partition", T.IntegerType()),
        T.StructField("offset", T.LongType()), T.StructField("timestamp", T.TimestampType()),
        T.StructField("timestampType", T.IntegerType()), T.StructField("headers", T.ArrayType(header)),
    ])
    with_headers = pandas_types.to_arrow_schema(spark_schema, timezone="UTC")
    assert with_headers.equals(read_schema(True))
    without = pandas_types.to_arrow_schema(T.StructType(spark_schema.fields[:-1]), timezone="UTC")
    assert without.equals(read_schema(False))
    assert read_schema_ddl(True).endswith("headers array<struct<key: string, value: binary>>")


def test_protocol_records_convert():
    raw = build_batch([(b"k", b"v1", [("h", b"x"), ("n", None)], 1_700_000_000_123), (None, b"v2", None, 1_700_000_000_124)],
                      base_offset=40)
    records = list(iter_records(raw, max_uncompressed_bytes=1 << 20))
    batch = records_to_batch("t", 3, records, include_headers=True, timestamp_type=1)
    assert batch.schema.equals(read_schema(True))
    rows = batch.to_pylist()
    assert [r["offset"] for r in rows] == [40, 41]
    assert rows[0]["key"] == b"k" and rows[1]["key"] is None
    assert rows[0]["topic"] == "t" and rows[0]["partition"] == 3 and rows[0]["timestampType"] == 1
    assert rows[0]["timestamp"] == dt.datetime(2023, 11, 14, 22, 13, 20, 123000, tzinfo=dt.timezone.utc)
    assert rows[0]["headers"] == [{"key": "h", "value": b"x"}, {"key": "n", "value": None}]
    assert rows[1]["headers"] is None  # no headers: null, as Spark's Kafka source


def test_consumer_records_convert_without_headers_column():
    records = [ConsumerRecord("t", 0, i, 1000 + i, 0, None, b"v%d" % i, []) for i in range(5)]
    batch = records_to_batch("t", 0, records, include_headers=False)
    assert batch.schema.equals(read_schema(False)) and batch.num_rows == 5
    assert batch.column("value").to_pylist() == [b"v0", b"v1", b"v2", b"v3", b"v4"]


def test_empty_records_make_an_empty_batch():
    batch = records_to_batch("t", 0, [], include_headers=True)
    assert batch.num_rows == 0 and batch.schema.equals(read_schema(True))


def test_rows_from_batch_strings_binaries_and_topic_override():
    headers_type = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
    batch = pa.record_batch({
        "key": pa.array(["a", None], pa.string()),
        "value": pa.array([b"1", b"2"], pa.binary()),
        "topic": pa.array(["x", "y"], pa.string()),
        "partition": pa.array([None, 2], pa.int32()),
        "headers": pa.array([[{"key": "h", "value": b"v"}], None], headers_type),
    })
    assert list(rows_from_batch(batch, topic_option=None)) == [
        ("x", None, b"a", b"1", [("h", b"v")]), ("y", 2, None, b"2", [])]
    assert [r[0] for r in rows_from_batch(batch, topic_option="z")] == ["z", "z"]


def test_rows_from_batch_needs_a_topic():
    batch = pa.record_batch({"value": pa.array(["v"])})
    with pytest.raises(ValueError, match="topic"):
        list(rows_from_batch(batch, topic_option=None))
    assert list(rows_from_batch(batch, topic_option="t")) == [("t", None, None, b"v", [])]


def test_check_write_schema():
    check_write_schema({"key": "string", "value": "binary", "partition": "int"}, topic_option="t")
    check_write_schema({"value": "string", "topic": "string",
                        "headers": "array<struct<key:string,value:binary>>"}, topic_option=None)
    for columns, message in [({"key": "string"}, "value"), ({"value": "string"}, "topic"),
                             ({"value": "int"}, "string or binary"), ({"value": "string", "partition": "string"}, "integer"),
                             ({"value": "string", "headers": "map<string,string>"}, "headers")]:
        with pytest.raises(ValueError, match=message):
            check_write_schema(columns, topic_option=None if message == "topic" else "t")
