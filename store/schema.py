"""The ease.ml schema language: what a tenant's inputs and outputs look like.

Formal syntax (shared/papers/000, Fig. 2), which `Schema.parse` accepts and `str(schema)` prints::

    prog         ::= {input: data_type, output: data_type}
    data_type    ::= {nonrec_field list, rec_field list}
    nonrec_field ::= Tensor[int list] | field_name :: Tensor[int list]
    rec_field    ::= field_name
    field_name   ::= [a-z0-9_]*

Examples (Fig. 3)::

    {input: {[Tensor[256, 256, 3]], []}, output: {[Tensor[1000]], []}}   # image classification
    {input: {[Tensor[10]], [next]}, output: {[Tensor[10]], [next]}}       # time series

A *non-recursive* field is a constant-shaped tensor; a *recursive* field names a pointer to another
object of the same type (`next` makes a sequence, two fields such as `left, right` make a tree).
The comma between `input` and `output` is optional, as in the paper's Fig. 3. Field names must be
non-empty here (the paper's `*` would allow an empty name, which cannot be referred to).

The Python form builds the same value: ``Schema(input=Tensor(256, 256, 3), output=Tensor(3))``.
A bare `Tensor` stands for a data type with that one field and no recursive fields.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TypeVar

__all__ = ["DataType", "Schema", "SchemaSyntaxError", "Tensor"]

_T = TypeVar("_T")
_NAME = re.compile(r"[a-z0-9_]+\Z")


class SchemaSyntaxError(ValueError):
    """A schema text that does not follow Fig. 2; says where (1-based line, column) and what."""

    def __init__(self, text: str, pos: int, expected: str, found: str) -> None:
        self.line = text.count("\n", 0, pos) + 1
        self.column = pos - (text.rfind("\n", 0, pos) + 1) + 1
        self.expected = expected
        self.found = found
        super().__init__(
            f"schema syntax error at line {self.line}, column {self.column}: "
            f"expected {expected}, found {found}"
        )


def _check_name(name: str, what: str) -> str:
    if not _NAME.match(name):
        raise ValueError(f"{what} {name!r} is not a field name: use one or more of [a-z0-9_]")
    return name


@dataclass(frozen=True, init=False)
class Tensor:
    """A constant-shaped tensor field, e.g. ``Tensor(256, 256, 3)`` or ``Tensor(10, name="x")``."""

    shape: tuple[int, ...]
    name: str | None = None

    def __init__(self, *shape: int, name: str | None = None) -> None:
        if not shape:
            raise ValueError("Tensor needs at least one dimension, e.g. Tensor(10)")
        for d in shape:
            if isinstance(d, bool) or not isinstance(d, int) or d < 1:
                raise ValueError(
                    f"Tensor dimension {d!r} is not valid: dimensions are positive integers"
                )
        if name is not None:
            _check_name(name, "Tensor name")
        object.__setattr__(self, "shape", tuple(shape))
        object.__setattr__(self, "name", name)

    def __str__(self) -> str:
        body = f"Tensor[{', '.join(map(str, self.shape))}]"
        return f"{self.name} :: {body}" if self.name else body


@dataclass(frozen=True, init=False)
class DataType:
    """``{nonrec_field list, rec_field list}``: tensors plus named pointers to the same type."""

    fields: tuple[Tensor, ...]
    recursive: tuple[str, ...] = ()

    def __init__(self, fields: Iterable[Tensor], recursive: Iterable[str] = ()) -> None:
        fields = tuple(fields)
        recursive = tuple(recursive)
        for f in fields:
            if not isinstance(f, Tensor):
                raise ValueError(f"data type field {f!r} is not a Tensor")
        for r in recursive:
            _check_name(r, "recursive field")
        names = [f.name for f in fields if f.name] + list(recursive)
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ValueError(f"field names must be unique within a data type; repeated: {dup}")
        object.__setattr__(self, "fields", fields)
        object.__setattr__(self, "recursive", recursive)

    def __str__(self) -> str:
        return f"{{[{', '.join(map(str, self.fields))}], [{', '.join(self.recursive)}]}}"

    @property
    def is_sequence(self) -> bool:
        """One recursive pointer (``next``): an object is a sequence of its tensor fields."""
        return len(self.recursive) == 1

    @property
    def size(self) -> int:
        """The values one object holds (one step of a sequence): its tensors' elements summed,
        e.g. 784 for ``Tensor(28, 28, 1)``, a classifier's classes for its output."""
        return sum(math.prod(f.shape) for f in self.fields)

    @property
    def single(self) -> Tensor | None:
        """The only tensor field when there is exactly one, else None."""
        return self.fields[0] if len(self.fields) == 1 else None


def _as_data_type(value: Tensor | DataType, side: str) -> DataType:
    if isinstance(value, Tensor):
        return DataType([value])
    if isinstance(value, DataType):
        return value
    raise ValueError(f"schema {side} {value!r} is not a Tensor or DataType")


@dataclass(frozen=True, init=False)
class Schema:
    """A tenant's task: ``{input: data_type, output: data_type}``."""

    input: DataType
    output: DataType

    def __init__(self, input: Tensor | DataType, output: Tensor | DataType) -> None:  # noqa: A002
        object.__setattr__(self, "input", _as_data_type(input, "input"))
        object.__setattr__(self, "output", _as_data_type(output, "output"))

    def __str__(self) -> str:
        return f"{{input: {self.input}, output: {self.output}}}"

    @classmethod
    def parse(cls, text: str) -> Schema:
        """Parse Fig. 2 syntax; raises `SchemaSyntaxError` with line and column."""
        return _Parser(text).program()


class _Parser:
    """Recursive descent over Fig. 2; whitespace (including newlines) separates tokens."""

    _TOKEN = re.compile(r"\s*(::|[{}\[\],:]|[A-Za-z0-9_]+|\S)")

    def __init__(self, text: str) -> None:
        self.text = text
        self.tokens: list[tuple[str, int]] = []
        pos = 0
        while True:
            m = self._TOKEN.match(text, pos)
            if m is None:
                break
            self.tokens.append((m.group(1), m.start(1)))
            pos = m.end()
        self.i = 0

    def _peek(self) -> str | None:
        return self.tokens[self.i][0] if self.i < len(self.tokens) else None

    def _pos(self) -> int:
        return self.tokens[self.i][1] if self.i < len(self.tokens) else len(self.text)

    def _fail(self, expected: str) -> SchemaSyntaxError:
        tok = self._peek()
        return SchemaSyntaxError(
            self.text, self._pos(), expected, "end of input" if tok is None else repr(tok)
        )

    def _expect(self, token: str) -> None:
        if self._peek() != token:
            raise self._fail(repr(token))
        self.i += 1

    def program(self) -> Schema:
        self._expect("{")
        self._expect("input")
        self._expect(":")
        inp = self.data_type()
        if self._peek() == ",":
            self.i += 1
        self._expect("output")
        self._expect(":")
        out = self.data_type()
        self._expect("}")
        if self._peek() is not None:
            raise self._fail("end of input")
        return Schema(input=inp, output=out)

    def data_type(self) -> DataType:
        self._expect("{")
        fields = self._list(self.nonrec_field)
        self._expect(",")
        rec_pos = self._pos()
        recursive = self._list(self.field_name)
        self._expect("}")
        try:
            return DataType(fields, recursive)
        except ValueError as e:
            raise SchemaSyntaxError(self.text, rec_pos, "unique field names", str(e)) from e

    def _list(self, parse: Callable[[], _T]) -> list[_T]:
        self._expect("[")
        out: list[_T] = []
        if self._peek() == "]":
            self.i += 1
            return out
        while True:
            out.append(parse())
            if self._peek() == ",":
                self.i += 1
                continue
            if self._peek() == "]":
                self.i += 1
                return out
            raise self._fail("',' or ']'")

    def field_name(self) -> str:
        tok = self._peek()
        if tok is None or not _NAME.match(tok):
            raise self._fail("a field name of [a-z0-9_]")
        self.i += 1
        return tok

    def nonrec_field(self) -> Tensor:
        name = None
        if self._peek() != "Tensor":
            name = self.field_name()
            self._expect("::")
        self._expect("Tensor")
        self._expect("[")
        dims: list[int] = []
        while True:
            tok = self._peek()
            if tok is None or not tok.isdigit() or int(tok) < 1:
                raise self._fail("a positive integer dimension")
            dims.append(int(tok))
            self.i += 1
            if self._peek() == ",":
                self.i += 1
                continue
            self._expect("]")
            return Tensor(*dims, name=name)
