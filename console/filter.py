"""The record filter: a small expression language the console evaluates next to the log, never code.

    key contains "order" and value.json.amount > 3
    headers.source == "web" or not (partition == 0)
    value.json.items.0.sku startswith "A-"    timestamp >= 1767225600000    value == null

Why a grammar of our own
------------------------
The filter comes from a browser, so it is hostile input. `eval`, and libraries that evaluate Python-like
ASTs (simpleeval), keep Python's attribute access, comprehensions and operator overloading within reach
and have had escapes; their safety is a list of things they remembered to forbid. Here the safety is what
the grammar cannot say: the only names are the record's fields, the only operations are comparisons and
`and`/`or`/`not`, there are no calls, no attributes of Python objects, no loops and no regular
expressions (a pattern is a denial of service in one line). Evaluation is a walk over a tree of at most
MAX_NODES nodes whose every step is O(size of a field), so the work per record is bounded by the
expression and the record, and the work per request by the browse's record bound (records.py).

Grammar (precedence from loose to tight)::

    expr    := or
    or      := and ("or" and)*
    and     := unary ("and" unary)*
    unary   := "not" unary | compare
    compare := operand (OP operand)?          OP: == != < <= > >= contains startswith endswith
    operand := field | STRING | NUMBER | true | false | null | "(" expr ")"
    field   := key | value | offset | partition | timestamp | headers.NAME
             | (key|value).json(.NAME | .INDEX | ."quoted name")*   | (key|value).size

Values: `key`/`value`/`headers.X` are the bytes decoded as UTF-8 (invalid bytes replaced), null when
absent; `.json` parses the field as JSON (null when it is not JSON) and walks objects by name and arrays by
index; `.size` is the length in bytes. A comparison between values of different kinds (a number and a
string) is false rather than an error, as a filter over records whose shape varies must be; an operand
alone is true when it is neither null, false, 0 nor empty. A malformed expression raises `FilterError`
with the column of the mistake, which the page shows.

Cheap first
-----------
A filter runs on every record a browse reads, so the parser compiles it for speed without changing what
it means (evaluation has no side effects and raises nothing, so the order of the operands of `and`/`or`
is free):

- the operands of `and`/`or` are evaluated cheapest first (offset, partition, timestamp; then sizes; then
  byte comparisons of key, value and headers; `.json` last), so `value.json.a == 1 and offset > 10` parses
  no JSON below offset 10;
- `==`, `!=`, contains, startswith and endswith between key, value or a header and a string are done on
  the bytes: for a string without U+FFFD (the replacement character) they give the same answer as on the
  decoded text, since valid UTF-8 decodes byte for byte and an invalid byte decodes to U+FFFD only;
- `(key|value).json.PATH == "text"` or `== 42` first looks for the literal in the raw bytes: a JSON text
  without a backslash writes every string as its characters, so `"text"` must occur in it; one without
  `.`, `e` or `E` writes every number as a plain integer, so the digits of 42 must occur. When the bytes
  cannot hold a match the JSON is not parsed; otherwise it is, as before.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, Callable

MAX_LENGTH = 1000  # characters of an expression
MAX_NODES = 200  # operands and operators of a parsed expression
MAX_DEPTH = 32  # nesting of parentheses and `not`
MAX_JSON_BYTES = 1 << 20  # a value larger than this is not parsed as JSON (.json is null)

OPERATORS = ("==", "!=", "<=", ">=", "<", ">", "contains", "startswith", "endswith")
FIELDS = ("key", "value", "offset", "partition", "timestamp", "headers")


class FilterError(ValueError):
    """A malformed filter expression; `column` is where the mistake is (1-based)."""

    def __init__(self, message: str, column: int):
        super().__init__(f"{message} (at column {column})")
        self.column = column


@dataclass(frozen=True, slots=True)
class Token:
    kind: str  # "name", "string", "number", "op", "(", ")", "."
    text: str
    value: Any
    column: int


_TOKEN = re.compile(r"""
    (?P<space>\s+)
  | (?P<number>-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)
  | (?P<string>"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*')
  | (?P<op>==|!=|<=|>=|<|>)
  | (?P<name>[A-Za-z_][A-Za-z0-9_\-]*)
  | (?P<paren>[()])
  | (?P<dot>\.)
""", re.VERBOSE)


def tokenize(text: str) -> list[Token]:
    if len(text) > MAX_LENGTH:
        raise FilterError(f"the expression is longer than {MAX_LENGTH} characters", MAX_LENGTH)
    tokens: list[Token] = []
    pos = 0
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None:
            raise FilterError(f"unexpected character {text[pos]!r}", pos + 1)
        kind = m.lastgroup
        raw = m.group()
        column = pos + 1
        pos = m.end()
        if kind == "space":
            continue
        if kind == "number":
            tokens.append(Token("number", raw, float(raw) if any(c in raw for c in ".eE") else int(raw), column))
        elif kind == "string":
            tokens.append(Token("string", raw, _unescape(raw[1:-1], column), column))
        elif kind == "op":
            tokens.append(Token("op", raw, raw, column))
        elif kind == "name":
            lowered = raw.lower()
            if lowered in ("contains", "startswith", "endswith"):
                tokens.append(Token("op", raw, lowered, column))
            else:
                tokens.append(Token("name", raw, raw, column))
        elif kind == "paren":
            tokens.append(Token(raw, raw, raw, column))
        else:
            tokens.append(Token(".", raw, raw, column))
    return tokens


_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "\\": "\\", '"': '"', "'": "'", "0": "\0"}


def _unescape(body: str, column: int) -> str:
    out, i = [], 0
    while i < len(body):
        c = body[i]
        if c != "\\":
            out.append(c)
            i += 1
            continue
        nxt = body[i + 1] if i + 1 < len(body) else ""
        if nxt in _ESCAPES:
            out.append(_ESCAPES[nxt])
            i += 2
        elif nxt == "u" and re.fullmatch(r"[0-9a-fA-F]{4}", body[i + 2:i + 6]):
            out.append(chr(int(body[i + 2:i + 6], 16)))
            i += 6
        else:
            raise FilterError(f"unknown escape \\{nxt} in a string", column + 1 + i)
    return "".join(out)


class RecordView:
    """What a filter sees of one record; decoded and parsed fields are computed once and kept."""

    __slots__ = ("key_bytes", "value_bytes", "headers", "offset", "partition", "timestamp", "_cache")

    def __init__(self, key: bytes | None, value: bytes | None, headers: list[tuple[str, bytes | None]],
                 offset: int, partition: int, timestamp: int):
        self.key_bytes = key
        self.value_bytes = value
        self.headers = headers
        self.offset = offset
        self.partition = partition
        self.timestamp = timestamp
        self._cache: dict[str, Any] = {}

    def text(self, name: str) -> str | None:
        if name not in self._cache:
            raw = self.key_bytes if name == "key" else self.value_bytes
            self._cache[name] = None if raw is None else raw.decode("utf-8", "replace")
        return self._cache[name]

    def json(self, name: str) -> Any:
        slot = name + ".json"
        if slot not in self._cache:
            raw = self.key_bytes if name == "key" else self.value_bytes
            parsed = None
            if raw is not None and len(raw) <= MAX_JSON_BYTES:
                try:
                    parsed = json.loads(raw)
                except ValueError:
                    parsed = None
            self._cache[slot] = parsed
        return self._cache[slot]

    def header(self, name: str) -> str | None:
        raw = self.header_bytes(name)
        return None if raw is None else raw.decode("utf-8", "replace")

    def header_bytes(self, name: str) -> bytes | None:
        for k, v in self.headers:
            if k == name:
                return v
        return None

    def raw(self, name: str) -> bytes | None:
        return self.key_bytes if name == "key" else self.value_bytes


Getter = Callable[[RecordView], Any]


def _walk(value: Any, path: tuple[str | int, ...]) -> Any:
    for step in path:
        if isinstance(value, dict) and isinstance(step, str):
            value = value.get(step)
        elif isinstance(value, list) and isinstance(step, int) and -len(value) <= step < len(value):
            value = value[step]
        elif isinstance(value, dict) and isinstance(step, int):
            value = value.get(str(step))
        else:
            return None
    return value


def _truthy(value: Any) -> bool:
    return value is not None and value is not False and value != 0 and value != "" and value != [] and value != {}


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _compare(op: str, left: Any, right: Any) -> bool:
    if op == "==":
        if isinstance(left, bool) or isinstance(right, bool):  # true == 1 is not a match
            return left is right
        return (_number(left) and _number(right) or type(left) is type(right)) and left == right
    if op == "!=":
        return not _compare("==", left, right)
    if op in ("contains", "startswith", "endswith"):
        if op == "contains" and isinstance(left, list):
            return right in left
        if not isinstance(left, str) or not isinstance(right, str):
            return False
        return right in left if op == "contains" else left.startswith(right) if op == "startswith" else left.endswith(right)
    if not ((_number(left) and _number(right)) or (isinstance(left, str) and isinstance(right, str))):
        return False
    if op == "<":
        return left < right
    if op == "<=":
        return left <= right
    if op == ">":
        return left > right
    return left >= right


@dataclass
class _Parser:
    tokens: list[Token]
    text: str
    pos: int = 0
    nodes: int = 0
    depth: int = 0
    fields_used: set[str] = field(default_factory=set)
    # id(getter) -> its cost (0 for constants and record numbers, up to COST_JSON), and what a field getter
    # reads, so that parse_compare can choose a cheaper form (see "Cheap first")
    optimize: bool = True  # False: the plain tree, as written (the reference the unit tests compare with)
    costs: dict[int, int] = field(default_factory=dict)
    reads: dict[int, tuple] = field(default_factory=dict)
    # Every getter made during the parse, held so that none is freed before the parse ends: the two maps above
    # are keyed by id(), and a getter parse_compare dropped (its fast form replaced it) would otherwise free its
    # id for the next one, which then inherited the dropped getter's cost and reads (a hypothesis case found
    # `timestamp == ""` compared as `value == ""`).
    alive: list[Getter] = field(default_factory=list)

    def costed(self, getter: Getter, cost: int, reads: tuple | None = None) -> Getter:
        self.alive.append(getter)
        self.costs[id(getter)] = cost
        if reads is not None:
            self.reads[id(getter)] = reads
        return getter

    def cost(self, getter: Getter) -> int:
        return self.costs.get(id(getter), COST_JSON)

    def peek(self) -> Token | None:
        return self.tokens[self.pos] if self.pos < len(self.tokens) else None

    def take(self) -> Token:
        token = self.peek()
        if token is None:
            raise FilterError("the expression ends too early", len(self.text) + 1)
        self.pos += 1
        return token

    def count(self, column: int) -> None:
        self.nodes += 1
        if self.nodes > MAX_NODES:
            raise FilterError(f"the expression has more than {MAX_NODES} parts", column)

    def is_word(self, word: str) -> bool:
        token = self.peek()
        return token is not None and token.kind == "name" and token.text.lower() == word

    def parse(self) -> Callable[[RecordView], bool]:
        if not self.tokens:
            raise FilterError("the expression is empty", 1)
        node = self.parse_or()
        token = self.peek()
        if token is not None:
            raise FilterError(f"unexpected {token.text!r}", token.column)
        return lambda record: _truthy(node(record))

    def parse_or(self) -> Getter:
        operands = [self.parse_and()]
        while self.is_word("or"):
            self.count(self.take().column)
            operands.append(self.parse_and())
        return self.chain(operands, any_of=True)

    def parse_and(self) -> Getter:
        operands = [self.parse_unary()]
        while self.is_word("and"):
            self.count(self.take().column)
            operands.append(self.parse_unary())
        return self.chain(operands, any_of=False)

    def chain(self, operands: list[Getter], *, any_of: bool) -> Getter:
        """`a or b or ...` (any_of) / `a and b and ...`, cheapest operand first."""
        if len(operands) == 1:
            return operands[0]
        ordered = tuple(sorted(operands, key=self.cost) if self.optimize else operands)
        if any_of:
            def either(r: RecordView) -> bool:
                for operand in ordered:
                    if _truthy(operand(r)):
                        return True
                return False
            return self.costed(either, sum(map(self.cost, ordered)))

        def both(r: RecordView) -> bool:
            for operand in ordered:
                if not _truthy(operand(r)):
                    return False
            return True
        return self.costed(both, sum(map(self.cost, ordered)))

    def parse_unary(self) -> Getter:
        if self.is_word("not"):
            token = self.take()
            self.count(token.column)
            self.nest(token.column)
            inner = self.parse_unary()
            self.depth -= 1
            return self.costed(lambda r: not _truthy(inner(r)), self.cost(inner))
        return self.parse_compare()

    def nest(self, column: int) -> None:
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise FilterError(f"the expression nests deeper than {MAX_DEPTH}", column)

    def parse_compare(self) -> Getter:
        left = self.parse_operand()
        token = self.peek()
        if token is not None and token.kind == "op":
            self.take()
            self.count(token.column)
            right = self.parse_operand()
            op = token.value
            fast = _on_bytes(op, self.reads.get(id(left)), right, self.reads.get(id(right))) if self.optimize else None
            if fast is not None:
                return self.costed(fast, COST_BYTES if self.reads[id(left)][0] != "json" else COST_JSON)
            return self.costed(lambda r: _compare(op, left(r), right(r)), self.cost(left) + self.cost(right))
        return left

    def parse_operand(self) -> Getter:
        token = self.take()
        self.count(token.column)
        if token.kind == "(":
            self.nest(token.column)
            inner = self.parse_or()
            closing = self.peek()
            if closing is None or closing.kind != ")":
                raise FilterError("a '(' is not closed", token.column)
            self.take()
            self.depth -= 1
            return inner
        if token.kind in ("string", "number"):
            value = token.value
            return self.costed(lambda r: value, 0, ("constant", value))
        if token.kind == "name":
            word = token.text.lower()
            if word in ("true", "false", "null"):
                constant = {"true": True, "false": False, "null": None}[word]
                return self.costed(lambda r: constant, 0, ("constant", constant))
            return self.parse_field(token)
        raise FilterError(f"expected a field or a value, got {token.text!r}", token.column)

    def path_step(self) -> Token:
        dot = self.peek()
        if dot is None or dot.kind != ".":
            raise FilterError("expected '.'", dot.column if dot else len(self.text) + 1)
        self.take()
        step = self.take()
        if step.kind not in ("name", "string", "number") or (step.kind == "number" and not isinstance(step.value, int)):
            raise FilterError(f"expected a name after '.', got {step.text!r}", step.column)
        return step

    def parse_field(self, token: Token) -> Getter:
        name = token.text
        if name not in FIELDS:
            raise FilterError(f"unknown field {name!r} (fields: {', '.join(FIELDS)})", token.column)
        self.fields_used.add(name)
        if name in ("offset", "partition", "timestamp"):
            return self.costed(lambda r: getattr(r, name), 0)
        if name == "headers":
            step = self.path_step()
            header = str(step.value)
            return self.costed(lambda r: r.header(header), COST_HEADER, ("header", header))
        following = self.peek()
        if following is None or following.kind != ".":
            return self.costed(lambda r: r.text(name), COST_TEXT, ("text", name))
        step = self.path_step()
        if step.kind == "name" and step.text == "size":
            def size(r: RecordView) -> int | None:
                raw = r.key_bytes if name == "key" else r.value_bytes
                return None if raw is None else len(raw)
            return self.costed(size, 1)
        if step.kind != "name" or step.text != "json":
            raise FilterError(f"after {name}. comes json or size, not {step.text!r}", step.column)
        path: list[str | int] = []
        while (nxt := self.peek()) is not None and nxt.kind == ".":
            step = self.path_step()
            self.count(step.column)
            path.append(step.value if step.kind != "name" else step.text)
        frozen = tuple(path)
        return self.costed(lambda r: _walk(r.json(name), frozen), COST_JSON, ("json", name, frozen))


COST_BYTES, COST_TEXT, COST_HEADER, COST_JSON = 2, 3, 4, 20


def _on_bytes(op: str, left: tuple | None, right: Getter, right_reads: tuple | None) -> Getter | None:
    """A faster getter for `left op "string"` (or `json == 42`) with the same answers, or None (see "Cheap
    first" above)."""
    if left is None or right_reads is None or right_reads[0] != "constant":
        return None
    constant = right_reads[1]
    kind = left[0]
    try:
        return _bytes_getter(op, left, kind, constant)
    except UnicodeEncodeError:  # a lone surrogate in the literal: compared as text, as before
        return None


def _bytes_getter(op: str, left: tuple, kind: str, constant: Any) -> Getter | None:
    if kind in ("text", "header") and isinstance(constant, str) and "\ufffd" not in constant \
            and op in ("==", "!=", "contains", "startswith", "endswith"):
        literal = constant.encode("utf-8")
        if kind == "text":
            name = left[1]

            def raw(r: RecordView) -> bytes | None:
                return r.key_bytes if name == "key" else r.value_bytes
        else:
            header = left[1]

            def raw(r: RecordView) -> bytes | None:
                return r.header_bytes(header)
        if op == "==":
            return lambda r: raw(r) == literal
        if op == "!=":
            return lambda r: raw(r) != literal
        if op == "contains":
            return lambda r: (b := raw(r)) is not None and literal in b
        if op == "startswith":
            return lambda r: (b := raw(r)) is not None and b.startswith(literal)
        return lambda r: (b := raw(r)) is not None and b.endswith(literal)
    if kind == "json" and op in ("==", "!=") and not isinstance(constant, bool) \
            and (isinstance(constant, str) or (isinstance(constant, int) and abs(constant) < 2 ** 53)):
        name, path = left[1], left[2]
        if isinstance(constant, str):
            needle, escaped = json.dumps(constant, ensure_ascii=False).encode("utf-8"), re.compile(rb"\\").search
        else:
            needle, escaped = str(abs(constant)).encode("ascii"), re.compile(rb"[.eE]").search

        def equal(r: RecordView) -> bool:
            raw = r.key_bytes if name == "key" else r.value_bytes
            if raw is None:
                return False
            # (a zero byte in the first four: json.loads reads UTF-16 or UTF-32, where these bytes say nothing)
            if needle not in raw and escaped(raw) is None and b"\x00" not in raw[:4]:
                return False  # the bytes cannot hold the literal: no JSON parsed
            return _compare("==", _walk(r.json(name), path), constant)
        return equal if op == "==" else (lambda r: not equal(r))
    return None


@dataclass(frozen=True)
class RecordFilter:
    """A parsed filter: `matches(record)` says whether a record passes."""

    source: str
    matches: Callable[[RecordView], bool]
    fields_used: frozenset[str]


def parse_filter(text: str, *, optimize: bool = True) -> RecordFilter:
    """Parse `text`; FilterError (with a column) when it is not an expression of the grammar above."""
    parser = _Parser(tokenize(text), text, optimize=optimize)
    matches = parser.parse()
    return RecordFilter(text, matches, frozenset(parser.fields_used))
