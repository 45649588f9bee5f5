"""The schema language of Fig. 2: parsing, errors with positions, printing, round trips."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from store.schema import DataType, Schema, SchemaSyntaxError, Tensor

FIG3_IMAGE = "{input: {[Tensor[256, 256, 3]], []}\noutput:{[Tensor[1000]], []}}"
FIG3_SERIES = "{input: {[Tensor[10]], [next]}\noutput:{[Tensor[10]], [next]}}"


def test_fig3_examples_parse_to_the_python_form() -> None:
    assert Schema.parse(FIG3_IMAGE) == Schema(input=Tensor(256, 256, 3), output=Tensor(1000))
    series = Schema.parse(FIG3_SERIES)
    assert series.input == DataType([Tensor(10)], ["next"])
    assert series.input.is_sequence and series.output.recursive == ("next",)


def test_named_fields_and_trees() -> None:
    s = Schema.parse(
        "{input: {[word :: Tensor[300], pos :: Tensor[12]], [left, right]}, "
        "output: {[Tensor[5]], []}}"
    )
    assert [f.name for f in s.input.fields] == ["word", "pos"]
    assert s.input.recursive == ("left", "right") and not s.input.is_sequence
    assert str(s) == (
        "{input: {[word :: Tensor[300], pos :: Tensor[12]], [left, right]}, "
        "output: {[Tensor[5]], []}}"
    )


@pytest.mark.parametrize(
    ("text", "line", "column", "expected"),
    [
        ("{input: {[Tensor[3]], []}, output: {[Tensor[0]], []}}", 1, 45, "positive integer"),
        ("{input: {[Tensor[3]], []},\n output {[Tensor[2]], []}}", 2, 9, "':'"),
        ("{input: {[Tensor[3] []}, output: {[Tensor[2]], []}}", 1, 21, "',' or ']'"),
        ("{input: {[Tensor[3]], [Next]}, output: {[Tensor[2]], []}}", 1, 24, "field name"),
        ("{input: {[Tensor[3]], []}, output: {[Tensor[2]], []}} extra", 1, 55, "end of input"),
        ("{input: {[Tensor[3]], []}, output: {[Tensor[2]], []}", 1, 53, "'}'"),
        ("", 1, 1, "'{'"),
        ("{input: {[x :: Tensor[3]], [x]}, output: {[Tensor[2]], []}}", 1, 28, "unique"),
    ],
)
def test_syntax_errors_say_where_and_what(text: str, line: int, column: int, expected: str) -> None:
    with pytest.raises(SchemaSyntaxError) as err:
        Schema.parse(text)
    assert (err.value.line, err.value.column) == (line, column), str(err.value)
    assert expected in err.value.expected
    assert f"line {line}, column {column}" in str(err.value)


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: Tensor(), "at least one dimension"),
        (lambda: Tensor(3, 0), "positive integers"),
        (lambda: Tensor(3, name="Bad Name"), "not a field name"),
        (lambda: DataType([Tensor(3)], ["a/b"]), "not a field name"),
        (lambda: Schema(input=[3], output=Tensor(2)), "not a Tensor or DataType"),  # type: ignore[arg-type]
    ],
)
def test_python_form_rejects_bad_values(make, message: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ValueError, match=message):
        make()


_names = st.from_regex(r"[a-z0-9_]{1,6}", fullmatch=True)
_tensors = st.builds(
    lambda dims, name: Tensor(*dims, name=name),
    st.lists(st.integers(1, 4096), min_size=1, max_size=4),
    st.none() | _names,
)


def _data_type(fields: list[Tensor], rec: list[str]) -> DataType:
    names = {f.name for f in fields if f.name}
    return DataType(fields, [r for r in dict.fromkeys(rec) if r not in names])


_data_types = st.builds(
    _data_type,
    st.lists(_tensors, max_size=3, unique_by=lambda t: t.name or id(t)),
    st.lists(_names, max_size=3),
)


@given(_data_types, _data_types)
def test_round_trip(inp: DataType, out: DataType) -> None:
    s = Schema(input=inp, output=out)
    assert Schema.parse(str(s)) == s
    spaced = str(s).replace(", ", " ,\n  ").replace("[", "[ ")
    assert Schema.parse(spaced) == s


def test_a_data_types_size_is_its_tensors_values_summed() -> None:
    """What the cost prior takes as a tenant's features (input) and classes (output)."""
    assert DataType([Tensor(28, 28, 1)]).size == 784
    assert Schema(input=Tensor(12), output=Tensor(9)).output.size == 9
    assert DataType([Tensor(3, name="a"), Tensor(2, 2, name="b")], ["next"]).size == 7
