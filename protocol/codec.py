"""Message classes and their per-version codecs, produced from the declarative definitions in `schema`.

Theory of operation
-------------------
Every `Api` yields two slotted dataclasses, `<Name>Request` and `<Name>Response`, covering all versions;
nested structs become nested classes (`ProduceRequest.TopicProduceData`). Fields absent from a version
decode to their defaults; encoding a non-default value into a version that lacks the field raises
`LocalProtocolError` unless the field is ignorable.

For each (class, version) actually used, Python source for a decoder and an encoder is generated as
straight-line code and compiled once, on first use: runs of fixed-width fields become a single
`struct.unpack_from` / `pack` call, arrays of int32 are read with one unpack, and every variable-length
item is checked against the bytes remaining *before* anything is allocated. Array counts and tagged-field
counts also meet Kafka 4.4's caps (`limits`: 1,000,000 elements, 10,000 tagged fields), and an array's
count is multiplied by its element type's minimum wire size (worked out from the schema when the decoder
is generated, so the check costs one multiplication) before it is believed. Decoders raise only
`RemoteProtocolError`; `records` fields decode to a zero-copy `memoryview` of the frame.

`size()` is deliberately *not* generated: it walks the schema generically, so the property
`len(encode(m, v)) == size(m, v)` checks the generated encoder against an independent implementation.

Records values to encode may be bytes-like or a list of chunks (bytes-like or `FileRegion`); the
encoder then splits its output around the regions so that record data can go out by sendfile.
"""

from __future__ import annotations

import dataclasses
import struct
import uuid as _uuid
from collections.abc import Callable
from typing import Any, NamedTuple, cast

from .errors import LocalProtocolError, RemoteProtocolError
from .limits import MAX_ARRAY_ELEMENTS, check_tagged_field_count, refuse_array
from .schema import _NO_DEFAULT, Api, F
from .varint import read_uvarint as _uvarint
from .varint import uvarint_size as _uvarint_len
from .varint import write_uvarint as _put_uvarint

ZERO_UUID = _uuid.UUID(int=0)

_TYPE_DEFAULTS = {
    "bool": False, "int8": 0, "int16": 0, "uint16": 0, "int32": 0, "uint32": 0, "int64": 0,
    "float64": 0.0, "string": "", "bytes": b"", "uuid": ZERO_UUID, "records": None,
}
_FIXED_FORMATS = {
    "bool": "?", "int8": "b", "int16": "h", "uint16": "H", "int32": "i", "uint32": "I", "int64": "q",
    "float64": "d", "uuid": "16s",
}
_FIXED_SIZES = {k: struct.calcsize(">" + v) for k, v in _FIXED_FORMATS.items()}


class FileRegion(NamedTuple):
    """A span of an open file, sent with sendfile: `length` bytes of `fd` from `position`."""

    fd: int
    position: int
    length: int


def field_default(f: F):
    """The value a field takes when absent (Kafka's default, else the type's zero value)."""
    if f.default is not _NO_DEFAULT:
        return f.default
    if f.is_array:
        return []
    if f.is_struct:
        return None  # callers wanting a value use make_default(), which builds a fresh struct
    return _TYPE_DEFAULTS[f.type]


# ---------------------------------------------------------------------------------------------------
# Message classes


class Message:
    """Base of every generated message and struct class."""

    __slots__ = ()
    API_KEY: int = -1
    API_NAME: str = ""
    IS_REQUEST: bool = True
    VALID_VERSIONS: tuple[int, int] = (0, 0)
    FLEXIBLE_FROM: int | None = None
    FIELDS: tuple[F, ...] = ()
    _codecs: dict

    def encode(self, version: int) -> bytes:
        return encode(self, version)

    @classmethod
    def decode(cls, data, version: int):
        return decode(cls, data, version)

    def size(self, version: int) -> int:
        return size(self, version)


def _make_class(name: str, fields: list[F], qualname: str) -> type[Message]:
    spec: list[tuple[str, Any, Any]] = []
    nested: dict[str, type] = {}
    for f in fields:
        if f.is_struct or f.is_struct_array:
            sub = nested.get(f.struct_name)
            if sub is None:
                sub = _make_class(f.struct_name, f.fields or [], f"{qualname}.{f.struct_name}")
                nested[f.struct_name] = sub
            f._cls = sub
        spec.append((f.name, Any, _dataclass_default(f)))
    spec.append(("unknown_tagged_fields", list, dataclasses.field(default_factory=list)))
    made = dataclasses.make_dataclass(name, spec, bases=(Message,), slots=True, eq=True, repr=True)
    cls = cast("type[Message]", made)  # (a subclass of Message: its base)
    cls.__qualname__ = qualname
    cls.FIELDS = tuple(fields)
    cls._codecs = {}
    for sub_name, sub in nested.items():
        setattr(cls, sub_name, sub)
    return cls


def _dataclass_default(f: F):
    d = field_default(f)
    if f.is_array:
        return dataclasses.field(default_factory=list) if d == [] else dataclasses.field(default=d)
    if f.is_struct:
        if f.default is _NO_DEFAULT:
            cls = f._cls
            return dataclasses.field(default_factory=cls)
        return dataclasses.field(default=d)
    return dataclasses.field(default=d)


def make_default(f: F):
    if f.is_struct and f.default is _NO_DEFAULT:
        return f._cls()
    d = field_default(f)
    return list(d) if isinstance(d, list) else d


def build_message_classes(api: Api) -> tuple[type[Any], type[Any]]:
    """The request and response classes of an API (type[Any]: Message subclasses whose fields are generated,
    which a type checker cannot see)."""
    req = _make_class(f"{api.name}Request", api.request, f"{api.name}Request")
    resp = _make_class(f"{api.name}Response", api.response, f"{api.name}Response")
    for cls, is_req in ((req, True), (resp, False)):
        cls.API_KEY = api.key
        cls.API_NAME = api.name
        cls.IS_REQUEST = is_req
        cls.VALID_VERSIONS = (api.vrange.low, api.vrange.high)
        cls.FLEXIBLE_FROM = None if api.frange.empty else api.frange.low
    return req, resp


def is_flexible(cls: type[Message], version: int) -> bool:
    return cls.FLEXIBLE_FROM is not None and version >= cls.FLEXIBLE_FROM


# ---------------------------------------------------------------------------------------------------
# Runtime helpers called by generated code


_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I8 = struct.Struct(">b")


def _check(buf, pos: int, n: int, what: str) -> None:
    if n > len(buf) - pos:
        raise RemoteProtocolError(f"{what}: length {n} exceeds the {len(buf) - pos} bytes remaining")


def _read_len(buf, pos, flexible: bool, wide: bool):
    """Length prefix of a string (wide=False: int16) or bytes/array (wide=True: int32); -1 is null."""
    if flexible:
        n, pos = _uvarint(buf, pos)
        return n - 1, pos
    if wide:
        return _I32.unpack_from(buf, pos)[0], pos + 4
    return _I16.unpack_from(buf, pos)[0], pos + 2


def _read_string(buf, pos, flexible, nullable, what):
    n, pos = _read_len(buf, pos, flexible, False)
    if n < 0:
        if n == -1 and nullable:
            return None, pos
        raise RemoteProtocolError(f"{what}: null or negative string length {n}")
    _check(buf, pos, n, what)
    try:
        return str(buf[pos : pos + n], "utf-8"), pos + n
    except UnicodeDecodeError as e:
        raise RemoteProtocolError(f"{what}: invalid UTF-8") from e


def _read_bytes(buf, pos, flexible, nullable, what, zero_copy):
    n, pos = _read_len(buf, pos, flexible, True)
    if n < 0:
        if n == -1 and nullable:
            return None, pos
        raise RemoteProtocolError(f"{what}: null or negative bytes length {n}")
    _check(buf, pos, n, what)
    data = buf[pos : pos + n]
    return (data if zero_copy else bytes(data)), pos + n


def _read_array_len(buf, pos, flexible, nullable, what, min_size=1):
    """An array's count (-1 for null), refused before anything is allocated for it when it exceeds
    MAX_ARRAY_ELEMENTS or when `n` elements of at least `min_size` bytes cannot fit in the bytes left
    (see `limits`)."""
    n, pos = _read_len(buf, pos, flexible, True)
    if n < 0:
        if n == -1 and nullable:
            return -1, pos
        raise RemoteProtocolError(f"{what}: null or negative array length {n}")
    if n > MAX_ARRAY_ELEMENTS or n * min_size > len(buf) - pos:
        raise refuse_array(what, n, len(buf) - pos, min_size)
    return n, pos


def _min_element_size(f: F, version: int, flexible: bool) -> int:
    """The fewest bytes one element of array field `f` takes on the wire at `version`: what an array's
    count is multiplied by before it is believed (`limits`, rule 1)."""
    t = f.element_type
    if t in _FIXED_SIZES:
        return _FIXED_SIZES[t]
    if t == "string":
        return 1 if flexible else 2
    if t in ("bytes", "records"):
        return 1 if flexible else 4
    return max(1, _min_struct_size(f._cls, version, flexible, set()))


def _min_struct_size(cls: Any, version: int, flexible: bool, seen: set) -> int:
    """The fewest bytes a struct takes at `version`: every regular field at its shortest (null or empty
    where it may be), and one byte for an empty tagged-field section. A struct met again while its own
    size is being worked out (a recursive schema) counts as zero, which only loosens the bound."""
    if cls in seen:
        return 0
    seen.add(cls)
    total = 1 if flexible else 0
    for g in cls.FIELDS:
        if version not in g.vrange or (flexible and version in g.trange):
            continue
        t = g.element_type
        if g.is_array:
            total += 1 if flexible else 4
        elif t in _FIXED_SIZES:
            total += _FIXED_SIZES[t]
        elif t == "string":
            total += 1 if flexible else 2
        elif t in ("bytes", "records"):
            total += 1 if flexible else 4
        elif version in g.nrange:
            total += 1  # a nullable struct's marker byte
        else:
            total += _min_struct_size(g._cls, version, flexible, seen)
    seen.discard(cls)
    return total


def _write_null(out, flexible, nullable, what, wide=True):
    if not nullable:
        raise LocalProtocolError(f"{what} is not nullable in this version")
    if flexible:
        out.append(0)
    else:
        out += b"\xff\xff\xff\xff" if wide else b"\xff\xff"


def _write_len(out, n, flexible):
    """The int32 length (or count) of bytes and arrays; compact forms write n + 1."""
    if flexible:
        _put_uvarint(out, n + 1)
    else:
        out += _I32.pack(n)


def _write_string(out, value, flexible, nullable, what):
    if value is None:
        _write_null(out, flexible, nullable, what, wide=False)
        return
    data = value.encode("utf-8")
    if flexible:
        _put_uvarint(out, len(data) + 1)
    else:
        if len(data) > 0x7FFF:
            raise LocalProtocolError(f"{what} is longer than 32767 bytes")
        out += _I16.pack(len(data))
    out += data


def _write_bytes(out, value, flexible, nullable, what):
    if value is None:
        _write_null(out, flexible, nullable, what)
        return
    _write_len(out, len(value), flexible)
    out += value


def _write_records(out, chunks, value, flexible, nullable, what):
    """Records may be bytes-like or a list of chunks (bytes-like or FileRegion) for zero-copy sends."""
    if value is None or not isinstance(value, list):
        _write_bytes(out, value, flexible, nullable, what)
        return
    _write_len(out, sum(c.length if isinstance(c, FileRegion) else len(c) for c in value), flexible)
    for c in value:
        if isinstance(c, FileRegion):
            if out:
                chunks.append(bytes(out))
                del out[:]
            chunks.append(c)
        else:
            out += c


def _write_array_len(out, value, flexible, nullable, what):
    """Writes the count (or null); returns whether there are elements to write."""
    if value is None:
        _write_null(out, flexible, nullable, what)
        return False
    _write_len(out, len(value), flexible)
    return True


_ZERO_UUID_BYTES = bytes(16)
_UUIDS: dict[bytes, _uuid.UUID] = {}


def _uuid_from(b) -> _uuid.UUID:
    """Topic ids recur in every request: decoded ones are kept (a bounded cache; UUID() is slow)."""
    b = bytes(b)
    if b == _ZERO_UUID_BYTES:
        return ZERO_UUID
    u = _UUIDS.get(b)
    if u is None:
        if len(_UUIDS) >= 65536:
            _UUIDS.clear()
        u = _UUIDS[b] = _uuid.UUID(bytes=b)
    return u


def _absent(what: str, version: int):
    raise LocalProtocolError(f"{what} has a non-default value but does not exist in version {version}")


_RUNTIME = {
    "_uvarint": _uvarint, "_put_uvarint": _put_uvarint, "_read_string": _read_string, "_read_bytes": _read_bytes,
    "_read_array_len": _read_array_len, "_write_string": _write_string, "_write_bytes": _write_bytes,
    "_write_records": _write_records, "_write_array_len": _write_array_len, "_uuid_from": _uuid_from,
    "_absent": _absent, "_check": _check, "struct": struct, "RemoteProtocolError": RemoteProtocolError,
    "LocalProtocolError": LocalProtocolError, "_I8": _I8, "ZERO_UUID": ZERO_UUID,
    "_refuse_array": refuse_array, "_check_tags": check_tagged_field_count,
}


# ---------------------------------------------------------------------------------------------------
# Code generation


class _Gen:
    """Emits the source of one decoder and one encoder for a struct class at one version."""

    def __init__(self, cls: type[Message], version: int, flexible: bool, ns: dict, counter: list[int]):
        self.cls = cls
        self.version = version
        self.flexible = flexible
        self.ns = ns
        self.counter = counter

    def name(self, prefix: str, value) -> str:
        self.counter[0] += 1
        key = f"{prefix}{self.counter[0]}"
        self.ns[key] = value
        return key

    def present(self) -> tuple[list[F], list[F]]:
        v = self.version
        regular, tagged = [], []
        for f in self.cls.FIELDS:
            if v not in f.vrange:
                continue
            if self.flexible and v in f.trange:
                tagged.append(f)
            else:
                regular.append(f)
        tagged.sort(key=lambda f: -1 if f.tag is None else f.tag)  # (a field in its tagged versions has a tag)
        return regular, tagged

    # -- decoding --

    def decoder(self) -> str:
        v, fl = self.version, self.flexible
        regular, tagged = self.present()
        fname = self.name("_dec_", None)
        lines = [f"def {fname}(buf, pos):"]
        body: list[str] = []
        run: list[F] = []

        def flush_run():
            if not run:
                return
            fmt = ">" + "".join(_FIXED_FORMATS[f.type] for f in run)
            st = self.name("_S", struct.Struct(fmt))
            targets = ", ".join(f"v_{f.name}" for f in run)
            body.append(f"{targets}, = {st}.unpack_from(buf, pos)")
            body.append(f"pos += {struct.calcsize(fmt)}")
            for f in run:
                if f.type == "uuid":
                    body.append(f"v_{f.name} = _uuid_from(v_{f.name})")
            run.clear()

        for f in regular:
            if f.type in _FIXED_FORMATS and not f.is_array:
                run.append(f)
                continue
            flush_run()
            body.extend(self.decode_value(f, f"v_{f.name}", "buf"))
        flush_run()
        if fl:
            # Almost every struct carries no tagged fields: a single zero byte, read without a call.
            body.append("unknown = []")
            body.append("if buf[pos] == 0:")
            body.append("    pos += 1")
            body.append("else:")
            tags: list[str] = []
            owner, where = repr(self.cls.__qualname__), repr(f"{self.cls.__qualname__} tagged field")
            tags.append("n_tags, pos = _uvarint(buf, pos)")
            tags.append(f"_check_tags({owner}, n_tags, len(buf) - pos)")
            tags.append("last_tag = -1")
            tags.append("for _ in range(n_tags):")
            tags.append("    tag, pos = _uvarint(buf, pos)")
            tags.append("    tsize, pos = _uvarint(buf, pos)")
            tags.append(f"    _check(buf, pos, tsize, {where})")
            tags.append("    if tag <= last_tag: raise RemoteProtocolError('tagged fields out of order')")
            tags.append("    last_tag = tag")
            tags.append("    tbuf = buf[pos:pos + tsize]")
            first = True
            for f in tagged:
                kw = "if" if first else "elif"
                first = False
                tags.append(f"    {kw} tag == {f.tag}:")
                tags.append("        tpos = 0")
                for ln in self.decode_value(f, f"v_{f.name}", "tbuf", pos_var="tpos"):
                    tags.append("        " + ln)
            if tagged:
                tags.append("    else:")
                tags.append("        unknown.append((tag, bytes(tbuf)))")
            else:
                tags.append("    unknown.append((tag, bytes(tbuf)))")
            tags.append("    pos += tsize")
            body.extend("    " + ln for ln in tags)
            for f in tagged:
                body.insert(0, f"v_{f.name} = {self.default_expr(f)}")
        args = []
        present = {f.name for f in regular} | {f.name for f in tagged}
        for f in self.cls.FIELDS:
            args.append(f"v_{f.name}" if f.name in present else self.default_expr(f))
        args.append("unknown" if fl else "[]")
        cls_name = self.name("_C", self.cls)
        body.append(f"return {cls_name}({', '.join(args)}), pos")
        lines.extend("    " + ln for ln in body)
        self.ns[f"__src_{fname}"] = "\n".join(lines)
        return fname

    def default_expr(self, f: F) -> str:
        if f.is_struct and f.default is _NO_DEFAULT:
            return f"{self.name('_C', f._cls)}()"
        d = field_default(f)
        if isinstance(d, list):
            return "[]"
        if d is None or isinstance(d, (bool, int, float)):
            return repr(d)
        return self.name("_D", d)

    def decode_value(self, f: F, target: str, buf: str, pos_var: str = "pos") -> list[str]:
        v, fl = self.version, self.flexible
        nullable = v in f.nrange
        what = repr(f"{self.cls.__qualname__}.{f.name}")
        t = f.element_type
        p = pos_var
        out: list[str] = []
        if not f.is_array:
            if t in _FIXED_FORMATS:
                st = self.name("_S", struct.Struct(">" + _FIXED_FORMATS[t]))
                out.append(f"{target}, = {st}.unpack_from({buf}, {p})")
                out.append(f"{p} += {_FIXED_SIZES[t]}")
                if t == "uuid":
                    out.append(f"{target} = _uuid_from({target})")
            elif t == "string" and fl:
                out.extend(self.read_short_compact_len(
                    "sn", buf, p, what,
                    then=[f"{target} = str({buf}[{p}:{p} + sn], 'utf-8')", f"{p} += sn"],
                    otherwise=f"{target}, {p} = _read_string({buf}, {p}, {fl}, {nullable}, {what})",
                ))
            elif t == "string":
                out.append(f"{target}, {p} = _read_string({buf}, {p}, {fl}, {nullable}, {what})")
            elif t in ("bytes", "records"):
                out.append(f"{target}, {p} = _read_bytes({buf}, {p}, {fl}, {nullable}, {what}, {t == 'records'})")
            else:  # a single struct
                sub = self.sub_decoder(f)
                if nullable:
                    out.append(f"marker, = _I8.unpack_from({buf}, {p})")
                    out.append(f"{p} += 1")
                    out.append("if marker < 0:")
                    out.append(f"    {target} = None")
                    out.append("else:")
                    out.append(f"    {target}, {p} = {sub}({buf}, {p})")
                else:
                    out.append(f"{target}, {p} = {sub}({buf}, {p})")
            return out
        # The count is checked (limits.py) before the list exists: against the bytes left at this
        # element type's minimum size, and against MAX_ARRAY_ELEMENTS. A compact count under 127 is read
        # inline and needs only the first check; every longer one goes through _read_array_len.
        min_size = _min_element_size(f, v, fl)
        read_len = f"n, {p} = _read_array_len({buf}, {p}, {fl}, {nullable}, {what}, {min_size})"
        if fl:
            out.extend(self.read_short_compact_len("n", buf, p, what, then=[], otherwise=read_len, min_size=min_size))
        else:
            out.append(read_len)
        out.append("if n < 0:")
        out.append(f"    {target} = None")
        out.append("else:")
        if t in _FIXED_FORMATS and t != "uuid":
            size = _FIXED_SIZES[t]  # == min_size: the count check above covered the whole array
            out.append(f"    {target} = list(struct.unpack_from('>%d{_FIXED_FORMATS[t]}' % n, {buf}, {p}))")
            out.append(f"    {p} += n * {size}")
            return out
        out.append(f"    {target} = []")
        out.append("    for _ in range(n):")
        if t == "string":
            out.append(f"        item, {p} = _read_string({buf}, {p}, {fl}, False, {what})")
        elif t == "uuid":  # n * 16 bytes are there (checked above)
            out.append(f"        item = _uuid_from({buf}[{p}:{p} + 16])")
            out.append(f"        {p} += 16")
        else:
            sub = self.sub_decoder(f)
            out.append(f"        item, {p} = {sub}({buf}, {p})")
        out.append(f"        {target}.append(item)")
        return out

    @staticmethod
    def read_short_compact_len(var: str, buf: str, p: str, what: str, *, then: list[str], otherwise: str,
                               min_size: int | None = None) -> list[str]:
        """Lines reading a compact length (stored + 1) into `var`: one under 127 is a single byte, read
        inline, then `then` runs; anything else (null, longer, malformed) takes the call in `otherwise`.
        A string's or bytes' length is checked against the bytes left; an array's count (`min_size`
        given) at `min_size` bytes an element."""
        if min_size is None:
            check = f"    if {var} > len({buf}) - {p}: _check({buf}, {p}, {var}, {what})"
        else:
            need = var if min_size == 1 else f"{var} * {min_size}"
            check = f"    if {need} > len({buf}) - {p}: raise _refuse_array({what}, {var}, len({buf}) - {p}, {min_size})"
        return [
            f"{var} = {buf}[{p}] - 1",
            f"if 0 <= {var} < 127:",
            f"    {p} += 1",
            check,
            *("    " + ln for ln in then),
            "else:",
            f"    {otherwise}",
        ]

    @staticmethod
    def write_compact_len(out: str, length: str) -> list[str]:
        """Lines writing `length` + 1 as a compact length, one byte inline when it fits."""
        return [f"if {length} < 127: {out}.append({length} + 1)", f"else: _put_uvarint({out}, {length} + 1)"]

    def sub_decoder(self, f: F) -> str:
        return self.name("_sub", _codec_for(f._cls, self.version, self.flexible).decode_struct)

    def sub_encoder(self, f: F) -> str:
        return self.name("_sub", _codec_for(f._cls, self.version, self.flexible).encode_struct)

    # -- encoding --

    def encoder(self) -> str:
        v, fl = self.version, self.flexible
        regular, tagged = self.present()
        fname = self.name("_enc_", None)
        body: list[str] = []
        present = {f.name for f in regular} | {f.name for f in tagged}
        for f in self.cls.FIELDS:
            if f.name in present or f.ignorable:
                continue
            what = f"{self.cls.__qualname__}.{f.name}"
            body.append(f"if o.{f.name} != {self.default_expr(f)}: _absent({what!r}, {v})")
        run: list[F] = []

        def flush_run():
            if not run:
                return
            fmt = ">" + "".join(_FIXED_FORMATS[f.type] for f in run)
            st = self.name("_S", struct.Struct(fmt))
            args = ", ".join(f"o.{f.name}.bytes" if f.type == "uuid" else f"o.{f.name}" for f in run)
            body.append(f"out += {st}.pack({args})")
            run.clear()

        for f in regular:
            if f.type in _FIXED_FORMATS and not f.is_array:
                run.append(f)
                continue
            flush_run()
            body.extend(self.encode_value(f, f"o.{f.name}", "out"))
        flush_run()
        if fl:
            if not tagged:
                body.append("if o.unknown_tagged_fields:")
                body.append("    tags = sorted(o.unknown_tagged_fields)")
            else:
                body.append("tags = list(o.unknown_tagged_fields)")
                for f in tagged:
                    body.append(f"if o.{f.name} != {self.default_expr(f)}:")
                    body.append("    tb = bytearray()")
                    for ln in self.encode_value(f, f"o.{f.name}", "tb", chunks="None"):
                        body.append("    " + ln)
                    body.append(f"    tags.append(({f.tag}, tb))")
                body.append("if tags:")
                body.append("    tags.sort(key=lambda t: t[0])")
            body.append("    _put_uvarint(out, len(tags))")
            body.append("    for tag, tb in tags:")
            body.append("        _put_uvarint(out, tag)")
            body.append("        _put_uvarint(out, len(tb))")
            body.append("        out += tb")
            body.append("else:")
            body.append("    out.append(0)")
        lines = [f"def {fname}(o, out, chunks):"] + ["    " + ln for ln in (body or ["pass"])]
        self.ns[f"__src_{fname}"] = "\n".join(lines)
        return fname

    def encode_value(self, f: F, value: str, out: str, chunks: str = "chunks") -> list[str]:
        v, fl = self.version, self.flexible
        nullable = v in f.nrange
        what = repr(f"{self.cls.__qualname__}.{f.name}")
        t = f.element_type
        res: list[str] = []
        if not f.is_array:
            if t in _FIXED_FORMATS:
                st = self.name("_S", struct.Struct(">" + _FIXED_FORMATS[t]))
                arg = f"{value}.bytes" if t == "uuid" else value
                res.append(f"{out} += {st}.pack({arg})")
            elif t == "string" and fl:
                res.append(f"sv = {value}")
                res.append("if sv is None:")
                res.append(f"    _write_string({out}, None, {fl}, {nullable}, {what})")
                res.append("else:")
                res.append("    sb = sv.encode('utf-8')")
                res.extend("    " + ln for ln in self.write_compact_len(out, "len(sb)"))
                res.append(f"    {out} += sb")
            elif t == "string":
                res.append(f"_write_string({out}, {value}, {fl}, {nullable}, {what})")
            elif t == "bytes":
                res.append(f"_write_bytes({out}, {value}, {fl}, {nullable}, {what})")
            elif t == "records":
                res.append(f"_write_records({out}, {chunks}, {value}, {fl}, {nullable}, {what})")
            else:
                sub = self.sub_encoder(f)
                if nullable:
                    res.append(f"if {value} is None:")
                    res.append(f"    {out}.append(0xff)")
                    res.append("else:")
                    res.append(f"    {out}.append(1)")
                    res.append(f"    {sub}({value}, {out}, {chunks})")
                else:
                    res.append(f"if {value} is None: raise LocalProtocolError({what} + ' is not nullable')")
                    res.append(f"{sub}({value}, {out}, {chunks})")
            return res
        if fl:
            res.append(f"av = {value}")
            res.append("if av is None:")
            res.append(f"    _write_array_len({out}, None, {fl}, {nullable}, {what})")
            res.append("else:")
            res.extend("    " + ln for ln in self.write_compact_len(out, "len(av)"))
            value = "av"
        else:
            res.append(f"if _write_array_len({out}, {value}, {fl}, {nullable}, {what}):")
        if t in _FIXED_FORMATS and t != "uuid":
            res.append(f"    {out} += struct.pack('>%d{_FIXED_FORMATS[t]}' % len({value}), *{value})")
        elif t == "uuid":
            res.append(f"    for item in {value}: {out} += item.bytes")
        elif t == "string":
            res.append(f"    for item in {value}: _write_string({out}, item, {fl}, False, {what})")
        else:
            sub = self.sub_encoder(f)
            res.append(f"    for item in {value}: {sub}(item, {out}, {chunks})")
        return res


class _Codec:
    __slots__ = ("decode_struct", "encode_struct")
    decode_struct: Callable[[memoryview, int], tuple[Any, int]]  # (buffer, position) -> (struct, end position)
    encode_struct: Callable[[Any, bytearray, list], None]  # (struct, out, chunks)


_COMPILING: dict[tuple[type[Message], int, bool], _Codec] = {}


def _codec_for(cls: type[Message], version: int, flexible: bool) -> _Codec:
    key = (version, flexible)
    codec = cls._codecs.get(key)
    if codec is not None:
        return codec
    codec = _Codec()
    cls._codecs[key] = codec  # registered first so recursive structs resolve
    ns: dict = dict(_RUNTIME)
    gen = _Gen(cls, version, flexible, ns, [0])
    dname = gen.decoder()
    ename = gen.encoder()
    source = "\n\n".join(v for k, v in ns.items() if isinstance(k, str) and k.startswith("__src_"))
    exec(compile(source, f"<odradek codec {cls.__qualname__} v{version}>", "exec"), ns)
    codec.decode_struct = ns[dname]
    codec.encode_struct = ns[ename]
    return codec


def _check_version(cls: type[Message], version: int) -> None:
    low, high = cls.VALID_VERSIONS
    if not low <= version <= high:
        raise LocalProtocolError(f"{cls.__name__} has no version {version} (valid {low}-{high})")


def decode(cls: type[Message], data, version: int, pos: int = 0):
    """Decode a whole message body; trailing bytes are refused. Raises RemoteProtocolError only."""
    obj, end = decode_from(cls, data, version, pos)
    if end != len(data):
        raise RemoteProtocolError(f"{cls.__name__} v{version}: {len(data) - end} unexpected trailing bytes")
    return obj


_BY_VERSION: dict[tuple[type[Message], int], _Codec] = {}


def _codec_at(cls: type[Message], version: int) -> _Codec:
    """The codec of a top-level message at a version (checked once, then looked up)."""
    codec = _BY_VERSION.get((cls, version))
    if codec is None:
        _check_version(cls, version)
        codec = _BY_VERSION[(cls, version)] = _codec_for(cls, version, is_flexible(cls, version))
    return codec


def decode_from(cls: type[Message], data, version: int, pos: int = 0):
    """Decode a message body starting at `pos`; returns (message, end position)."""
    codec = _codec_at(cls, version)
    buf = data if isinstance(data, memoryview) else memoryview(data)
    try:
        return codec.decode_struct(buf, pos)
    except RemoteProtocolError:
        raise
    except (struct.error, IndexError, ValueError, TypeError, OverflowError) as e:
        raise RemoteProtocolError(f"{cls.__name__} v{version}: malformed body ({e})") from e


def encode_into(msg: Message, version: int, out: bytearray, chunks: list) -> None:
    """Append the encoding of `msg` to `out`; file regions split it into `chunks` (see module doc)."""
    cls = type(msg)
    codec = _codec_at(cls, version)
    try:
        codec.encode_struct(msg, out, chunks)
    except LocalProtocolError:
        raise
    except (struct.error, AttributeError, TypeError, ValueError, OverflowError) as e:
        raise LocalProtocolError(f"{cls.__name__} v{version}: cannot encode ({e})") from e


def encode(msg: Message, version: int) -> bytes:
    """Encode a message body to bytes (records must be bytes-like, not file regions)."""
    out = bytearray()
    chunks: list = []
    encode_into(msg, version, out, chunks)
    if chunks:
        raise LocalProtocolError("encode() cannot hold file regions; use encode_into()")
    return bytes(out)


# ---------------------------------------------------------------------------------------------------
# Generic size, walking the schema (an independent check on the generated encoders)


def size(msg: Message, version: int) -> int:
    cls = type(msg)
    _check_version(cls, version)
    return _struct_size(msg, version, is_flexible(cls, version))


def _len_prefix(n: int | None, flexible: bool, wide: bool) -> int:
    if flexible:
        return _uvarint_len(0 if n is None else n + 1)
    return 4 if wide else 2


def _value_size(f: F, value, version: int, flexible: bool) -> int:
    t = f.element_type
    if f.is_array:
        if value is None:
            return _len_prefix(None, flexible, True)
        total = _len_prefix(len(value), flexible, True)
        for item in value:
            total += _scalar_size(t, item, f, version, flexible, nullable_struct=False)
        return total
    return _scalar_size(t, value, f, version, flexible, nullable_struct=version in f.nrange)


def _scalar_size(t: str, value, f: F, version: int, flexible: bool, nullable_struct: bool) -> int:
    if t in _FIXED_SIZES:
        return _FIXED_SIZES[t]
    if t == "string":
        if value is None:
            return _len_prefix(None, flexible, False)
        n = len(value.encode("utf-8"))
        return _len_prefix(n, flexible, False) + n
    if t in ("bytes", "records"):
        if value is None:
            return _len_prefix(None, flexible, True)
        if isinstance(value, list):
            n = sum(c.length if isinstance(c, FileRegion) else len(c) for c in value)
        else:
            n = len(value)
        return _len_prefix(n, flexible, True) + n
    if nullable_struct:
        return 1 + (0 if value is None else _struct_size(value, version, flexible))
    return _struct_size(value, version, flexible)


def _struct_size(obj, version: int, flexible: bool) -> int:
    total = 0
    tags: list[tuple[int, int]] = []
    for f in type(obj).FIELDS:
        if version not in f.vrange:
            continue
        value = getattr(obj, f.name)
        if flexible and version in f.trange:
            if value != make_default(f):
                tags.append((f.tag, _value_size(f, value, version, flexible)))
            continue
        total += _value_size(f, value, version, flexible)
    if flexible:
        tags.extend((tag, len(data)) for tag, data in obj.unknown_tagged_fields)
        total += _uvarint_len(len(tags))
        for tag, n in tags:
            total += _uvarint_len(tag) + _uvarint_len(n) + n
    return total


def data_class(name: str, fields: list[F], *, valid: str = "0", flexible: str = "0+") -> type[Any]:
    """A versioned struct that is not an API message (metadata records, consumer protocol blobs)."""
    from .schema import VersionRange

    vrange, frange = VersionRange(valid), VersionRange(flexible)
    for f in fields:
        f.finalize()
    cls = _make_class(name, fields, name)
    cls.API_NAME = name
    cls.VALID_VERSIONS = (vrange.low, vrange.high)
    cls.FLEXIBLE_FROM = None if frange.empty else frange.low
    return cls
