"""The null source and null sink of `bench.spark_bench`: Spark's own cost of moving Arrow batches through a
Python data source, measured in the same run as the `odradek` source and sink.

* `null` source (`spark.read.format("odradek_null")`): the same schema, number of input partitions and
  batch size as an `odradek` read of the bench topic, yielding one prebuilt `pyarrow.RecordBatch` of the
  same shape (key, 100-byte value, ...) over and over. It reads nothing, so its rows/s is the ceiling of
  any Python source on this machine, at this moment.
* `null` sink (`write.format("odradek_null")`): a `DataSourceArrowWriter` that counts the rows of each
  Arrow batch Spark hands it and sends nothing: the ceiling of any Python sink.

The bench reports each `odradek` figure beside its null twin and the ratio, so that a loaded machine (eight
engineers share two cores here) shows as both figures dropping, not as a regression.

The null source and sink stay Spark's plain cost: unlike the `odradek` source and sink they do not
`gc.freeze()` the worker's heap (pipeline/datasource.py explains why that one does), so each of their
tasks still pays the daemon's full `gc.collect()`, and a ratio above what decoding alone would allow
partly reflects that.

These classes are pickled by value (`cloudpickle.register_pickle_by_value`), so Spark's Python workers need
not be able to import `bench`.
"""

from __future__ import annotations

from typing import Any, Iterator

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceArrowWriter, DataSourceReader, InputPartition, WriterCommitMessage

NAME = "odradek_null"


def _template(rows: int, value_size: int, first_offset: int) -> pa.RecordBatch:
    from odradek.pipeline.arrow import read_schema

    keys = pa.array([b"%d" % (first_offset + i) for i in range(rows)], pa.binary())
    values = pa.array([b"x" * value_size] * rows, pa.binary())
    n = rows
    columns = [
        keys, values, pa.array(["bench"] * n, pa.string()), pa.array([0] * n, pa.int32()),
        pa.array(range(first_offset, first_offset + n), pa.int64()),
        pa.array([1_700_000_000_000_000] * n, pa.int64()).cast(pa.timestamp("us", tz="UTC")),
        pa.array([0] * n, pa.int32()),
    ]
    return pa.RecordBatch.from_arrays(columns, schema=read_schema(False))


class _Slice(InputPartition):
    def __init__(self, rows: int):
        super().__init__(rows)
        self.rows = rows


class NullReader(DataSourceReader):
    def __init__(self, options: dict):
        self.rows = int(options["rows"])
        self.partitions_ = int(options.get("partitions", "4"))
        self.batch_rows = int(options.get("batchrows", "9000"))
        self.value_size = int(options.get("valuesize", "100"))

    def partitions(self) -> list[InputPartition]:
        per, extra = divmod(self.rows, self.partitions_)
        return [_Slice(per + (1 if i < extra else 0)) for i in range(self.partitions_)]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        assert isinstance(partition, _Slice)
        template = _template(self.batch_rows, self.value_size, 0)
        left = partition.rows
        while left > 0:
            take = min(left, self.batch_rows)
            yield template if take == self.batch_rows else template.slice(0, take)
            left -= take


class Counted(WriterCommitMessage):
    def __init__(self, rows: int):
        self.rows = rows


class NullWriter(DataSourceArrowWriter):
    def write(self, iterator: Iterator[Any]) -> WriterCommitMessage:
        rows = 0
        for batch in iterator:
            rows += batch.num_rows
        return Counted(rows)

    def commit(self, messages: list) -> None:
        pass

    def abort(self, messages: list) -> None:
        pass


class NullDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> str:
        from odradek.pipeline.arrow import read_schema_ddl

        return read_schema_ddl(False)

    def reader(self, schema: Any) -> NullReader:
        return NullReader(dict(self.options))

    def writer(self, schema: Any, overwrite: bool) -> NullWriter:
        return NullWriter()


def register(spark: Any) -> None:
    import sys

    from pyspark import cloudpickle

    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    spark.dataSource.register(NullDataSource)
