"""A small GraphQL reader for the double: one operation's fields, aliases, arguments (literals
and `$variables`) and selections; fragments and directives are refused, never guessed at."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

_TOKEN = re.compile(
    r"""
    (?P<skip>[\s,\ufeff]+|\#[^\n]*)
    |(?P<block>\"\"\"(?:[^"\\]|\\.|"(?!""))*\"\"\")
    |(?P<string>"(?:[^"\\\n]|\\.)*")
    |(?P<spread>\.\.\.)
    |(?P<number>-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?)
    |(?P<name>[_A-Za-z][_0-9A-Za-z]*)
    |(?P<punct>[!$():=@\[\]{}|&])
    """,
    re.VERBOSE,
)


class ParseError(Exception):
    """The query is not GraphQL the double reads; the message says where."""


@dataclass(frozen=True)
class Var:
    name: str


@dataclass
class Field:
    name: str
    alias: str | None = None
    args: dict[str, Any] = field(default_factory=dict)  # values may hold Var
    selections: list[Field] = field(default_factory=list)
    line: int = 1
    column: int = 1

    @property
    def key(self) -> str:
        return self.alias or self.name


@dataclass
class Operation:
    kind: str  # "query" or "mutation"
    name: str | None
    selections: list[Field]
    defaults: dict[str, Any]


@dataclass(frozen=True)
class _Tok:
    kind: str
    text: str
    line: int
    column: int


def _tokens(text: str) -> list[_Tok]:
    out, pos = [], 0
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None:
            raise ParseError(f"Parse error on {text[pos]!r} at offset {pos}")
        kind = m.lastgroup or ""
        if kind != "skip":
            line = text.count("\n", 0, pos) + 1
            out.append(_Tok(kind, m.group(), line, pos - text.rfind("\n", 0, pos)))
        pos = m.end()
    return out


class _Reader:
    def __init__(self, text: str) -> None:
        self.toks = _tokens(text)
        self.i = 0

    def peek(self) -> _Tok | None:
        return self.toks[self.i] if self.i < len(self.toks) else None

    def take(self, text: str | None = None, kind: str | None = None) -> _Tok:
        tok = self.peek()
        if tok is None or (text is not None and tok.text != text) or (kind and tok.kind != kind):
            want = text or kind
            got = "end of query" if tok is None else repr(tok.text)
            raise ParseError(f"Parse error on {got}: expected {want}")
        self.i += 1
        return tok

    def at(self, text: str) -> bool:
        tok = self.peek()
        return tok is not None and tok.text == text and tok.kind in ("punct", "spread")

    def value(self, const: bool = False) -> Any:
        tok = self.take()
        if tok.text == "$" and not const:
            return Var(self.take(kind="name").text)
        if tok.kind == "number":
            return float(tok.text) if any(c in tok.text for c in ".eE") else int(tok.text)
        if tok.kind == "string":
            return json.loads(tok.text)
        if tok.kind == "block":
            return tok.text[3:-3].replace('\\"""', '"""')
        if tok.kind == "name":
            return {"true": True, "false": False, "null": None}.get(tok.text, tok.text)
        if tok.text == "[":
            items = []
            while not self.at("]"):
                items.append(self.value(const))
            self.take("]")
            return items
        if tok.text == "{":
            obj = {}
            while not self.at("}"):
                key = self.take(kind="name").text
                self.take(":")
                obj[key] = self.value(const)
            self.take("}")
            return obj
        raise ParseError(f"Parse error on {tok.text!r}: expected a value")

    def type_ref(self) -> None:
        if self.at("["):
            self.take("[")
            self.type_ref()
            self.take("]")
        else:
            self.take(kind="name")
        if self.at("!"):
            self.take("!")

    def selection_set(self) -> list[Field]:
        self.take("{")
        fields = []
        while not self.at("}"):
            if self.at("...") or self.at("@"):
                raise ParseError("fragments and directives are not read by the GitHub double")
            first = self.take(kind="name")
            f = Field(first.text, line=first.line, column=first.column)
            if self.at(":"):
                self.take(":")
                f.alias, f.name = first.text, self.take(kind="name").text
            if self.at("("):
                self.take("(")
                while not self.at(")"):
                    name = self.take(kind="name").text
                    self.take(":")
                    f.args[name] = self.value()
                self.take(")")
            if self.at("@"):
                raise ParseError("directives are not read by the GitHub double")
            if self.at("{"):
                f.selections = self.selection_set()
            fields.append(f)
        self.take("}")
        return fields

    def operation(self) -> Operation:
        kind, name, defaults = "query", None, {}
        if not self.at("{"):
            kind = self.take(kind="name").text
            if kind not in ("query", "mutation"):
                raise ParseError(f"the GitHub double reads no {kind!r} definitions")
            tok = self.peek()
            if tok is not None and tok.kind == "name":
                name = self.take().text
            if self.at("("):
                self.take("(")
                while not self.at(")"):
                    self.take("$")
                    var = self.take(kind="name").text
                    self.take(":")
                    self.type_ref()
                    if self.at("="):
                        self.take("=")
                        defaults[var] = self.value(const=True)
                self.take(")")
        return Operation(kind, name, self.selection_set(), defaults)


def parse(text: str, operation_name: str | None = None) -> Operation:
    """The operation named `operation_name` (or the only one) in the document `text`."""
    reader = _Reader(text)
    ops = []
    while reader.peek() is not None:
        ops.append(reader.operation())
    if not ops:
        raise ParseError("the query has no operation")
    if operation_name is not None:
        for op in ops:
            if op.name == operation_name:
                return op
        raise ParseError(f'No operation named "{operation_name}"')
    if len(ops) > 1:
        raise ParseError("An operation name is required")
    return ops[0]


def resolve(value: Any, variables: dict[str, Any], defaults: dict[str, Any]) -> Any:
    """`value` with its `$variables` replaced (unset ones read as their default, else null)."""
    if isinstance(value, Var):
        return variables.get(value.name, defaults.get(value.name))
    if isinstance(value, list):
        return [resolve(v, variables, defaults) for v in value]
    if isinstance(value, dict):
        return {k: resolve(v, variables, defaults) for k, v in value.items()}
    return value
