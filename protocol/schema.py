"""Declarative message definitions: Odradek's own statement of the facts of Kafka's message schemas.

One definition per API (`api(...)`) holds the request and the response for every version. Each field
carries the versions it exists in, the versions it may be null in, its default, whether it is tagged
(KIP-482) and whether it is ignorable. `protocol.codec` turns a definition into slotted dataclasses and
into straight-line encoders/decoders per version, compiled once on first use.

Field types (strings, as in Kafka's schema language):
    bool int8 int16 uint16 int32 uint32 int64 float64 string bytes uuid records
    []int8 []int32 []int64 []string []uuid   arrays of primitives
    []StructName  /  StructName              array of structs / a single struct (give `fields=[...]`)

Version strings: "3+" (from 3), "0-12" (0 to 12 inclusive), "5" (only 5), "none" (never).
Field names are snake_case of Kafka's names (`snake("ThrottleTimeMs") == "throttle_time_ms"`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

_NO_DEFAULT = object()

PRIMITIVES = frozenset(
    {"bool", "int8", "int16", "uint16", "int32", "uint32", "int64", "float64", "string", "bytes", "uuid", "records"}
)


class VersionRange:
    """An inclusive version range; `none` is empty. Parsed once from "3+", "0-12", "5" or "none"."""

    __slots__ = ("low", "high")

    def __init__(self, spec: str | None):
        if spec is None or spec == "none":
            self.low, self.high = 1, 0
        elif spec.endswith("+"):
            self.low, self.high = int(spec[:-1]), 0x7FFF
        elif "-" in spec:
            lo, hi = spec.split("-")
            self.low, self.high = int(lo), int(hi)
        else:
            self.low = self.high = int(spec)

    def __contains__(self, version: int) -> bool:
        return self.low <= version <= self.high

    @property
    def empty(self) -> bool:
        return self.low > self.high

    def __repr__(self) -> str:
        if self.empty:
            return "none"
        if self.high == 0x7FFF:
            return f"{self.low}+"
        return f"{self.low}-{self.high}" if self.low != self.high else str(self.low)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, VersionRange):
            return NotImplemented
        return (self.empty and other.empty) or (self.low, self.high) == (other.low, other.high)

    def __hash__(self) -> int:
        return hash((self.low, self.high))


@dataclass
class F:
    """One field. `type` is a Kafka schema type string; `fields` is given for struct types."""

    name: str
    type: str
    versions: str = "0+"
    nullable: str = "none"
    default: Any = _NO_DEFAULT
    ignorable: bool = False
    tag: int | None = None
    tagged: str | None = None  # taggedVersions; defaults to `versions` when `tag` is set
    fields: list[F] | None = None
    # Filled in by finalize():
    vrange: VersionRange = field(init=False, repr=False)
    nrange: VersionRange = field(init=False, repr=False)
    trange: VersionRange = field(init=False, repr=False)
    # The generated class of a struct field, set by codec._make_class.
    _cls: Any = field(init=False, repr=False, compare=False)

    def finalize(self) -> None:
        self.vrange = VersionRange(self.versions)
        self.nrange = VersionRange(self.nullable)
        if self.tag is not None:
            self.trange = VersionRange(self.tagged if self.tagged is not None else self.versions)
        else:
            self.trange = VersionRange("none")
        if self.is_struct or self.is_struct_array:
            if not self.fields and self.fields != []:
                raise ValueError(f"field {self.name}: struct type {self.type} needs fields=[...]")
            for f in self.fields:
                f.finalize()
        elif self.fields is not None:
            raise ValueError(f"field {self.name}: primitive type {self.type} takes no fields")
        elif self.element_type not in PRIMITIVES:
            raise ValueError(f"field {self.name}: unknown type {self.type}")

    @property
    def is_array(self) -> bool:
        return self.type.startswith("[]")

    @property
    def element_type(self) -> str:
        return self.type[2:] if self.is_array else self.type

    @property
    def is_struct(self) -> bool:
        return not self.is_array and self.type not in PRIMITIVES

    @property
    def is_struct_array(self) -> bool:
        return self.is_array and self.element_type not in PRIMITIVES

    @property
    def struct_name(self) -> str:
        return self.element_type


@dataclass
class Api:
    """One API: its key, name, valid and flexible versions, and the request and response fields."""

    key: int
    name: str
    valid: str
    flexible: str
    request: list[F]
    response: list[F]
    # Versions that stay in the table for old clients but are refused at run time (Produce v0-2).
    comment: str = ""
    vrange: VersionRange = field(init=False, repr=False)
    frange: VersionRange = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.vrange = VersionRange(self.valid)
        self.frange = VersionRange(self.flexible)
        for f in self.request + self.response:
            f.finalize()


def api(key: int, name: str, *, valid: str, flexible: str, request: list[F], response: list[F]) -> Api:
    return Api(key=key, name=name, valid=valid, flexible=flexible, request=request, response=response)


_SNAKE_1 = re.compile(r"([A-Z]+)([A-Z][a-z])")
_SNAKE_2 = re.compile(r"([a-z0-9])([A-Z])")


def snake(name: str) -> str:
    """Kafka's CamelCase field name in snake_case: "ThrottleTimeMs" -> "throttle_time_ms"."""
    return _SNAKE_2.sub(r"\1_\2", _SNAKE_1.sub(r"\1_\2", name)).lower()
