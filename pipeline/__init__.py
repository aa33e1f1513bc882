"""The PySpark data source for Odradek topics and the reference pipelines.

    from odradek.pipeline import register
    register(spark)                                  # format("odradek") in this session
    spark.read.format("odradek").option("kafka.bootstrap.servers", ...).option("subscribe", "t").load()

Modules: `options` (Spark's Kafka option names, parsed on the driver), `offsets` (offset JSON, read
limits, range planning), `arrow` (records <-> Arrow), `_kafka` (blocking I/O on the bundled client),
`sink` (the exactly-once streaming sink protocol), `datasource` (the pyspark classes), `events` and
`jobs` (the reference pipeline), `__main__` (`python -m odradek.pipeline run ...`). See README.md here.

pyspark and pyarrow are optional (`pip install odradek[spark]`); importing this package does not
import them.
"""

from __future__ import annotations

from typing import Any

__all__ = ["FORMAT", "OdradekDataSource", "register"]

FORMAT = "odradek"


def __getattr__(name: str) -> Any:
    if name in ("OdradekDataSource", "register"):
        from . import datasource

        return getattr(datasource, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
