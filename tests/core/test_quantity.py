from __future__ import annotations

import math
import re
from decimal import Decimal, localcontext

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from volcano_monitor.core.quantity import QuantityError, parse_quantity, resource_label_and_unit

VALID = [
    ("0", 0.0),
    ("1", 1.0),
    ("1.5Gi", 1610612736.0),
    ("250m", 0.25),
    ("1e3", 1000.0),
    ("1E3", 1000.0),
    ("12E-1", 1.2),
    ("12e+6", 12_000_000.0),
    ("1E-3", 0.001),
    ("100n", 1e-07),
    ("100u", 1e-04),
    (".5", 0.5),
    ("5.", 5.0),
    ("+1", 1.0),
    ("-1k", -1000.0),
    ("+.5Ki", 512.0),
    ("1Ki", 1024.0),
    ("1Mi", 1048576.0),
    ("1Gi", 1073741824.0),
    ("1Ti", 1099511627776.0),
    ("1Pi", 1125899906842624.0),
    ("1Ei", 1152921504606846976.0),
    ("1k", 1e3),
    ("1M", 1e6),
    ("100M", 1e8),
    ("1G", 1e9),
    ("2T", 2e12),
    ("3P", 3e15),
    ("1E", 1e18),
    ("0.1", 0.1),
    ("0.3", 0.3),
    ("007", 7.0),
    ("-0", 0.0),
    ("1.000000000000000000000000000000001", 1.0),
    ("123456789012345678901234567890", 1.2345678901234568e29),
    (7, 7.0),
    (0, 0.0),
    (-3, -3.0),
    (2.5, 2.5),
]


@pytest.mark.parametrize(("value", "expected"), VALID)
def test_valid(value: str | int | float, expected: float) -> None:
    result = parse_quantity(value)
    assert type(result) is float
    assert result == expected


def test_negative_zero_is_normalised() -> None:
    assert math.copysign(1.0, parse_quantity("-0")) == 1.0


INVALID: list[object] = [
    "",
    " ",
    " 1",
    "1 ",
    "1\n",
    "1.5.3",
    "Mi",
    "1 Gi",
    "abc",
    "1Gb",
    "1gi",
    "1KI",
    "1K",
    "--1",
    "+-1",
    "1e",
    "1e+",
    "1e1.5",
    "1.5e3Gi",
    "1Gi1",
    ".",
    "+",
    "-.",
    "\u0661",  # ARABIC-INDIC DIGIT ONE
    "\uff11",  # FULLWIDTH DIGIT ONE
    "1_000",
    "0x10",
    "inf",
    "nan",
    "NaN",
    "Infinity",
    "1e400",
    "1e999999999999999999",
    "1e99999999999999999999999999999",
    "1" + "0" * 300 + "Ei",
    True,
    False,
    None,
    float("nan"),
    float("inf"),
    float("-inf"),
    10**400,
    [],
    {},
    ["1"],
    {"cpu": "1"},
]


@pytest.mark.parametrize("value", INVALID, ids=repr)
def test_invalid(value: object) -> None:
    with pytest.raises(QuantityError) as info:
        parse_quantity(value)  # type: ignore[arg-type]
    assert isinstance(info.value, ValueError)
    assert repr(value)[:40] in str(info.value)


def test_error_message_truncates_huge_values() -> None:
    huge = "x" * 100_000
    with pytest.raises(QuantityError) as info:
        parse_quantity(huge)
    assert "'xxxx" in str(info.value)
    assert len(str(info.value)) < 120


def test_long_valid_string_is_exact() -> None:
    text = "1" + "0" * 300 + "e-300"
    assert parse_quantity(text) == 1.0
    assert parse_quantity("0." + "0" * 500 + "1e501") == 1.0


# ---- property-based: valid quantities built from components, checked against Decimal arithmetic

_BINARY = {"Ki": 1, "Mi": 2, "Gi": 3, "Ti": 4, "Pi": 5, "Ei": 6}
_DECIMAL = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
digits = st.text(alphabet="0123456789", min_size=1, max_size=25)


@st.composite
def quantities(draw: st.DrawFn) -> tuple[str, Decimal]:
    sign = draw(st.sampled_from(["", "+", "-"]))
    form = draw(st.sampled_from(["int", "int.frac", "int.", ".frac"]))
    whole = draw(digits) if form != ".frac" else ""
    frac = draw(digits) if form in ("int.frac", ".frac") else ""
    number = {"int": whole, "int.frac": f"{whole}.{frac}", "int.": f"{whole}.", ".frac": f".{frac}"}[form]
    value = Decimal(f"{whole or '0'}.{frac or '0'}")
    kind = draw(st.sampled_from(["binary", "decimal", "exponent"]))
    with localcontext() as ctx:
        ctx.prec = 500
        if kind == "binary":
            suffix = draw(st.sampled_from(sorted(_BINARY)))
            value *= Decimal(2) ** (10 * _BINARY[suffix])
        elif kind == "decimal":
            suffix = draw(st.sampled_from(sorted(_DECIMAL)))
            value = value.scaleb(_DECIMAL[suffix])
        else:
            exp = draw(st.integers(min_value=-40, max_value=40))
            exp_sign = "+" if exp >= 0 and draw(st.booleans()) else ""
            suffix = draw(st.sampled_from("eE")) + exp_sign + str(exp)
            value = value.scaleb(exp)
        if sign == "-":
            value = -value
    return sign + number + suffix, value


@given(quantities())
@example(("1.5Gi", Decimal(1610612736)))
def test_generated_valid_quantities_are_exact(case: tuple[str, Decimal]) -> None:
    text, expected = case
    assert parse_quantity(text) == float(expected)


# The CRDs' own pattern for quantities (it also admits decimal exponents, which Kubernetes rejects).
CRD_PATTERN = re.compile(
    r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$",
    re.ASCII,
)


@given(st.text())
@example("1e1.5")
@example("\u0661\u0662")
def test_arbitrary_text_only_raises_quantity_error(text: str) -> None:
    try:
        value = parse_quantity(text)
    except QuantityError as exc:
        assert repr(text)[:20] in str(exc)
    else:
        assert math.isfinite(value)
        assert CRD_PATTERN.match(text) and not text.endswith("\n")


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=10,
)


@given(json_values)
@example(10**400)
@example(float("nan"))
def test_arbitrary_json_only_raises_quantity_error(value: object) -> None:
    try:
        result = parse_quantity(value)  # type: ignore[arg-type]
    except QuantityError:
        if type(value) is int:
            assert abs(value) > 10**308
        elif type(value) is float:
            assert not math.isfinite(value)
    else:
        assert type(value) in (int, float, str)
        assert type(result) is float and math.isfinite(result)
        if type(value) is not str:
            assert result == value


@pytest.mark.parametrize(
    ("name", "label", "unit"),
    [
        ("cpu", "cpu", "core"),
        ("memory", "memory", "byte"),
        ("ephemeral-storage", "ephemeral_storage", "byte"),
        ("storage", "storage", "byte"),
        ("hugepages-2Mi", "hugepages_2Mi", "byte"),
        ("hugepages-1Gi", "hugepages_1Gi", "byte"),
        ("nvidia.com/gpu", "nvidia_com_gpu", "integer"),
        ("amd.com/gpu", "amd_com_gpu", "integer"),
        ("pods", "pods", "integer"),
        ("example.com/foo-bar_baz", "example_com_foo_bar_baz", "integer"),
        ("gpu.ß", "gpu__", "integer"),
    ],
)
def test_resource_label_and_unit(name: str, label: str, unit: str) -> None:
    assert resource_label_and_unit(name) == (label, unit)
