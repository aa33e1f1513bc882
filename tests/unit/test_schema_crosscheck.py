"""Cross-check Odradek's hand-written message definitions against Kafka's own message JSON.

kafka-python (a test dependency) ships Kafka's message schema JSON. Our definitions are written by hand in
our own notation; this test reads the JSON only to compare facts: every field's name, type, versions,
nullable versions, tag, tagged versions, ignorability and default. It catches typos that round-trip
tests cannot (a round trip of a wrong schema is still a round trip).
"""

from __future__ import annotations

import importlib.util
import json
import pathlib
import re

import pytest

from odradek.protocol.messages import ALL_APIS
from odradek.protocol.schema import F, VersionRange, snake


def _resources() -> pathlib.Path | None:
    spec = importlib.util.find_spec("kafka")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = pathlib.Path(list(spec.submodule_search_locations)[0]) / "protocol" / "schemas" / "resources"
    return path if path.is_dir() else None


RESOURCES = _resources()


def _load(name: str) -> dict | None:
    if RESOURCES is None:
        return None
    path = RESOURCES / f"{name}.json"
    if not path.exists():
        return None
    text = "\n".join(line for line in path.read_text().splitlines() if not line.strip().startswith("//"))
    text = re.sub(r",(\s*[\]}])", r"\1", text)
    return json.loads(text)


def _json_default(jf: dict, type_: str, nullable: VersionRange):
    d = jf.get("default")
    if d is None:
        return None if type_ == "records" else _type_default(type_)
    if not isinstance(d, str):  # a few files give bare JSON numbers or booleans
        d = str(d).lower()
    if d == "null":
        return None
    if type_ == "bool":
        return d == "true"
    if type_ in ("int8", "int16", "uint16", "int32", "uint32", "int64"):
        return int(d, 0)
    if type_ == "float64":
        return float(d)
    return d


def _type_default(type_: str):
    if type_.startswith("[]"):
        return []
    return {
        "bool": False, "int8": 0, "int16": 0, "uint16": 0, "int32": 0, "uint32": 0, "int64": 0,
        "float64": 0.0, "string": "", "bytes": b"", "uuid": "00000000-0000-0000-0000-000000000000",
    }.get(type_, "<struct>")


def _compare(ours: list[F], theirs: list[dict], common: dict[str, dict], where: str, problems: list[str]):
    their_names = [snake(t["name"]) for t in theirs]
    our_names = [f.name for f in ours]
    if their_names != our_names:
        problems.append(f"{where}: fields {our_names} != kafka {their_names}")
        return
    for f, t in zip(ours, theirs):
        at = f"{where}.{f.name}"
        ttype = t["type"]
        elem = ttype[2:] if ttype.startswith("[]") else ttype
        is_struct = elem[:1].isupper()
        if is_struct != (f.is_struct or f.is_struct_array):
            problems.append(f"{at}: struct-ness differs ({f.type} vs {ttype})")
            continue
        if not is_struct and f.type != ttype:
            problems.append(f"{at}: type {f.type} != {ttype}")
        if is_struct and ttype.startswith("[]") != f.is_array:
            problems.append(f"{at}: array-ness differs ({f.type} vs {ttype})")
        if VersionRange(t.get("versions")) != f.vrange:
            problems.append(f"{at}: versions {f.vrange} != {t.get('versions')}")
        if VersionRange(t.get("nullableVersions")) != f.nrange:
            problems.append(f"{at}: nullable {f.nrange} != {t.get('nullableVersions')}")
        if t.get("tag") != f.tag:
            problems.append(f"{at}: tag {f.tag} != {t.get('tag')}")
        if t.get("tag") is not None and VersionRange(t.get("taggedVersions")) != f.trange:
            problems.append(f"{at}: tagged {f.trange} != {t.get('taggedVersions')}")
        if bool(t.get("ignorable", False)) != f.ignorable:
            problems.append(f"{at}: ignorable {f.ignorable} != {t.get('ignorable', False)}")
        if not is_struct:
            from odradek.protocol.codec import field_default

            ours_d = field_default(f)
            theirs_d = _json_default(t, ttype, f.nrange)
            if ttype == "uuid" and ours_d is not None:
                ours_d = str(ours_d)
            if ours_d != theirs_d:
                problems.append(f"{at}: default {ours_d!r} != {theirs_d!r}")
        if is_struct:
            sub = t.get("fields")
            if sub is None:
                sub = common.get(elem, {}).get("fields")
            if sub is None:
                problems.append(f"{at}: kafka struct {elem} not found")
                continue
            _compare(f.fields, sub, common, at, problems)


# APIs whose JSON kafka-python does not ship (KIP-848, the quorum APIs) were checked by eye against
# apache/kafka's files when written; the rest are compared here on every run.
CASES = [
    (a, kind) for a in ALL_APIS for kind in ("request", "response") if _load(f"{a.name}{kind.title()}") is not None
]


def test_kafka_python_schemas_are_available():
    assert RESOURCES is not None, "kafka-python's schema JSON is missing: the cross-check would check nothing"
    assert len(CASES) > 80


@pytest.mark.parametrize("definition,kind", CASES, ids=[f"{a.name}{k.title()}" for a, k in CASES])
def test_matches_kafka_schema(definition, kind):
    data = _load(f"{definition.name}{kind.title()}")
    assert data["apiKey"] == definition.key
    assert VersionRange(data["validVersions"]) == definition.vrange, (definition.vrange, data["validVersions"])
    assert VersionRange(data["flexibleVersions"]) == definition.frange
    common = {c["name"]: c for c in data.get("commonStructs", [])}
    problems: list[str] = []
    _compare(getattr(definition, kind), data["fields"], common, definition.name + kind.title(), problems)
    assert not problems, "\n".join(problems)
