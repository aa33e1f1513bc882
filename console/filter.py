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
        for k, v in self.headers:
            if k == name:
                return None if v is None else v.decode("utf-8", "replace")
        return None


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
        left = self.parse_and()
        while self.is_word("or"):
            self.count(self.take().column)
            right = self.parse_and()
            left = (lambda a, b: lambda r: _truthy(a(r)) or _truthy(b(r)))(left, right)
        return left

    def parse_and(self) -> Getter:
        left = self.parse_unary()
        while self.is_word("and"):
            self.count(self.take().column)
            right = self.parse_unary()
            left = (lambda a, b: lambda r: _truthy(a(r)) and _truthy(b(r)))(left, right)
        return left

    def parse_unary(self) -> Getter:
        if self.is_word("not"):
            token = self.take()
            self.count(token.column)
            self.nest(token.column)
            inner = self.parse_unary()
            self.depth -= 1
            return lambda r: not _truthy(inner(r))
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
            return lambda r: _compare(op, left(r), right(r))
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
            return lambda r: value
        if token.kind == "name":
            word = token.text.lower()
            if word in ("true", "false", "null"):
                constant = {"true": True, "false": False, "null": None}[word]
                return lambda r: constant
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
            return lambda r: getattr(r, name)
        if name == "headers":
            step = self.path_step()
            header = str(step.value)
            return lambda r: r.header(header)
        following = self.peek()
        if following is None or following.kind != ".":
            return lambda r: r.text(name)
        step = self.path_step()
        if step.kind == "name" and step.text == "size":
            def size(r: RecordView) -> int | None:
                raw = r.key_bytes if name == "key" else r.value_bytes
                return None if raw is None else len(raw)
            return size
        if step.kind != "name" or step.text != "json":
            raise FilterError(f"after {name}. comes json or size, not {step.text!r}", step.column)
        path: list[str | int] = []
        while (nxt := self.peek()) is not None and nxt.kind == ".":
            step = self.path_step()
            self.count(step.column)
            path.append(step.value if step.kind != "name" else step.text)
        frozen = tuple(path)
        return lambda r: _walk(r.json(name), frozen)


@dataclass(frozen=True)
class RecordFilter:
    """A parsed filter: `matches(record)` says whether a record passes."""

    source: str
    matches: Callable[[RecordView], bool]
    fields_used: frozenset[str]


def parse_filter(text: str) -> RecordFilter:
    """Parse `text`; FilterError (with a column) when it is not an expression of the grammar above."""
    parser = _Parser(tokenize(text), text)
    matches = parser.parse()
    return RecordFilter(text, matches, frozenset(parser.fields_used))
