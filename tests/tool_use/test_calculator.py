"""The calculator: exact values written exactly, and every refusal a sentence for the model."""

import asyncio
from fractions import Fraction

import pytest

from renderers import ToolCall
from tool_use import ToolErrorKind, calculator, handle_tool_call
from tool_use.calculator import MAX_EXPRESSION_CHARS, CalculatorError, evaluate, format_number


@pytest.mark.parametrize(("expression", "written"), [
    ("0.1 + 0.2", "0.3"),
    ("0.1 * 3 - 0.3", "0"),
    ("2 ** 200", str(2**200)),
    ("123456789012345678901234567890 * 987654321098765432109876543210",
     str(123456789012345678901234567890 * 987654321098765432109876543210)),
    ("-(3 - 5) * 2.5", "5"),
    ("--4 + +1", "5"),
    ("7 / 8", "0.875"),
    ("-1 / 40", "-0.025"),
    ("2 ** -3", "0.125"),
    ("1 / 3", "1/3 ≈ 0.333333333333"),
    ("(1 + 2) * (3 + 4) / 6", "3.5"),
    ("1e3 + 1_000", "2000"),
    ("1 ** (10 ** 1000)", "1"),
    ("(-1) ** (10 ** 100 + 1)", "-1"),
    ("0 ** 0", "1"),
], ids=lambda value: str(value)[:24])
def test_exact_results(expression: str, written: str) -> None:
    assert format_number(evaluate(expression)) == written


def test_decimals_are_read_from_their_text_not_as_binary_floats() -> None:
    assert evaluate("0.1") == Fraction(1, 10)
    assert evaluate("1.1 * 1.1") == Fraction(121, 100)


@pytest.mark.parametrize(("expression", "refusal"), [
    ("1 / 0", "division by zero"),
    ("0 ** -1", r"division by zero \(0 to a negative power\)"),
    ("2 ** 0.5", "the exponent 1/2 is not a whole number, so the result would not be exact"),
    ("2 ** 100000", r"the result of \(2\) \*\* 100000 would be larger than 4000 bits"),
    ("10 ** 1000 * 10 ** 1000", "a number in the calculation is larger than the limit of 4000 bits"),
    ("1e100000000", "'1e100000000' has more than 1204 digits"),
    ("2 ^ 3", r"'\^' is not supported; write powers with \*\*"),
    ("7 % 2", "'%' is not supported; use"),
    ("1 +", "cannot parse '1 \\+': invalid syntax"),
    ("", "the expression is empty"),
    ("__import__('os').system('true')", "is not arithmetic the calculator does"),
    ("x + 1", "'x' is not arithmetic the calculator does"),
    ("(1).real", "is not arithmetic the calculator does"),
    ("True + 1", "'True' is not a number"),
    ("'1' + '2'", "is not a number"),
    ("2j", "'2j' is not a number"),
    ("1" * (MAX_EXPRESSION_CHARS + 1), f"the limit is {MAX_EXPRESSION_CHARS}"),
    ("(" * 220 + "1" + ")" * 220, "too many nested parentheses"),
], ids=lambda value: str(value)[:24])
def test_refusals(expression: str, refusal: str) -> None:
    with pytest.raises(CalculatorError, match=refusal):
        evaluate(expression)


def test_deep_nesting_within_the_length_limit_still_evaluates() -> None:
    assert evaluate("-" * (MAX_EXPRESSION_CHARS - 2) + "1") == 1  # an even number of minus signs


def test_as_a_tool_a_refusal_is_an_error_result() -> None:
    result = asyncio.run(handle_tool_call([calculator], ToolCall.of("calculator", {"expression": "1/0"})))
    assert result.error == ToolErrorKind.FAILED
    assert result.messages[0]["content"] == "Error: division by zero"
    ok = asyncio.run(handle_tool_call([calculator], ToolCall.of("calculator", {"expression": "0.1 + 0.2"})))
    assert ok.error is None and ok.messages[0]["content"] == "0.3"
