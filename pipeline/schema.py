"""The read schema in Spark's DDL, without pyarrow: `DataSource.schema()` runs in a planning worker that
has no other use for pyarrow or the client. arrow.py holds the same schema as Arrow types (a unit test
checks that the two agree)."""

from __future__ import annotations

__all__ = ["HEADERS_DDL", "READ_SCHEMA_DDL", "read_schema_ddl"]

READ_SCHEMA_DDL = ("key binary, value binary, topic string, partition int, offset long, timestamp timestamp, "
                   "timestampType int")
HEADERS_DDL = "headers array<struct<key: string, value: binary>>"


def read_schema_ddl(include_headers: bool) -> str:
    return f"{READ_SCHEMA_DDL}, {HEADERS_DDL}" if include_headers else READ_SCHEMA_DDL
