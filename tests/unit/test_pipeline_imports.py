"""What Spark's planning workers load: `import pyspark_odradek` (the lookup worker) and a data source's
`schema()` (the create worker) must not import the client, pyarrow or the executor-side modules
(pipeline/datasource.py, "What a planning worker imports"). Checked in a fresh interpreter, since this
test process has imported everything already."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytest.importorskip("pyspark")

_PROBE = """
import json, sys
import pyspark_odradek
source = pyspark_odradek.DefaultSource({"subscribe": "t"})
schema = source.schema()
heavy = sorted(m for m in sys.modules if m == "pyarrow" or m.startswith(("odradek.client", "odradek.protocol"))
               or m in ("odradek.pipeline._kafka", "odradek.pipeline.columnar", "odradek.pipeline.sink",
                        "odradek.pipeline.options", "odradek.pipeline.arrow"))
print(json.dumps({"schema": schema, "heavy": heavy}))
"""


def test_the_lookup_and_create_steps_import_neither_the_client_nor_pyarrow():
    out = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True, check=True, timeout=120)
    found = json.loads(out.stdout.strip().splitlines()[-1])
    assert found["schema"].startswith("key binary, value binary, topic string")
    assert found["heavy"] == []


def _top_level_names(ddl: str) -> list[str]:
    names, depth, field = [], 0, ""
    for ch in ddl + ",":
        depth += (ch == "<") - (ch == ">")
        if ch == "," and depth == 0:
            names.append(field.strip().split(" ")[0])
            field = ""
        else:
            field += ch
    return names


def test_the_ddl_schema_and_the_arrow_schema_agree():
    from odradek.pipeline.arrow import read_schema
    from odradek.pipeline.schema import read_schema_ddl

    for headers in (False, True):
        assert _top_level_names(read_schema_ddl(headers)) == read_schema(headers).names
