"""A calculator tool: exact arithmetic on `+ - * / **`, unary minus and parentheses, without `eval`.

Numbers are integers or decimals (`12`, `-3.25`, `1e3`, `1_000`) and every operation is done on
`fractions.Fraction`, so `0.1 + 0.2` is exactly `0.3` and `2 ** 200` is every digit of it. The
expression is parsed with Python's `ast`, and only these nodes are evaluated: number literals, the
five binary operators, unary `+`/`-` (parentheses are resolved by the parser). A name, call,
attribute, string or any other construct is refused before anything is computed, so an expression
cannot run code.

A result is written exactly: an integer, a decimal when it terminates (`0.3`), else the fraction and
an approximation (`1/3 ≈ 0.333333333333`). Refused, each with a sentence for the model: division by
zero, an exponent that is not a whole number (the result would not be exact), a number or result of
more than `MAX_RESULT_BITS` bits, an expression longer than `MAX_EXPRESSION_CHARS`, and syntax errors.
"""

import ast
import math
import operator
from collections.abc import Callable
from decimal import Decimal, InvalidOperation, localcontext
from fractions import Fraction
from typing import Annotated

from tool_use.tools import error_tool_result, simple_tool_result, tool
from tool_use.types import ToolResult

# Longer than any calculation a model writes out; also bounds how deeply an expression can nest.
MAX_EXPRESSION_CHARS = 500
# About 1,200 decimal digits: far beyond any answer, while no power or product can grow into
# megabytes of digits (an exponent is checked against this before the power is computed).
MAX_RESULT_BITS = 4000
_MAX_DIGITS = int(MAX_RESULT_BITS * math.log10(2))
_APPROXIMATE_DIGITS = 12

_SYMBOLS = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.Pow: "**", ast.FloorDiv: "//",
            ast.Mod: "%", ast.BitXor: "^", ast.MatMult: "@", ast.LShift: "<<", ast.RShift: ">>",
            ast.BitAnd: "&", ast.BitOr: "|", ast.Invert: "~", ast.Not: "not"}


class CalculatorError(ValueError):
    """An expression the calculator refuses; the message is written for the model."""


def evaluate(expression: str) -> Fraction:
    """The exact value of `expression` (see the module docstring for the grammar).

    Raises:
        CalculatorError: the expression is empty, too long, malformed, uses anything outside the
            grammar, divides by zero, or its value would exceed the size limit.
    """
    if not expression.strip():
        raise CalculatorError("the expression is empty")
    if len(expression) > MAX_EXPRESSION_CHARS:
        raise CalculatorError(f"the expression has {len(expression)} characters; the limit is {MAX_EXPRESSION_CHARS}")
    try:
        tree = ast.parse(expression.strip(), mode="eval")
        return _value(tree.body, expression.strip())
    except SyntaxError as exc:
        raise CalculatorError(f"cannot parse {expression!r}: {exc.msg}") from None
    except RecursionError:
        raise CalculatorError("the expression is nested too deeply") from None


def _value(node: ast.expr, source: str) -> Fraction:
    if isinstance(node, ast.Constant):
        return _number(node, source)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
        operand = _value(node.operand, source)
        return -operand if isinstance(node.op, ast.USub) else operand
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left, right = _value(node.left, source), _value(node.right, source)
        return _bounded(_BINARY[type(node.op)](left, right))
    raise CalculatorError(_unsupported(node, source))


def _number(node: ast.Constant, source: str) -> Fraction:
    """A literal as written: an int as is, a decimal from its text (`0.1` is 1/10, not a binary float)."""
    text = ast.get_source_segment(source, node) or repr(node.value)
    if isinstance(node.value, bool) or not isinstance(node.value, int | float):
        raise CalculatorError(f"{text!r} is not a number; the calculator takes integers and decimals")
    if isinstance(node.value, int):
        return _bounded(Fraction(node.value))
    try:
        decimal = Decimal(text.replace("_", ""))
    except InvalidOperation:
        raise CalculatorError(f"{text!r} is not a number the calculator reads") from None
    if abs(decimal.adjusted()) > _MAX_DIGITS:
        raise CalculatorError(f"{text!r} has more than {_MAX_DIGITS} digits; the limit is {MAX_RESULT_BITS} bits")
    return _bounded(Fraction(decimal))


def _divide(left: Fraction, right: Fraction) -> Fraction:
    if right == 0:
        raise CalculatorError("division by zero")
    return left / right


def _power(base: Fraction, exponent: Fraction) -> Fraction:
    if exponent.denominator != 1:
        raise CalculatorError(f"the exponent {exponent} is not a whole number, so the result would not be exact")
    if base == 0 and exponent < 0:
        raise CalculatorError("division by zero (0 to a negative power)")
    bits = max(abs(base.numerator).bit_length(), base.denominator.bit_length())
    if (bits - 1) * abs(exponent.numerator) > MAX_RESULT_BITS:  # a lower bound of the result's size
        raise CalculatorError(f"the result of ({base}) ** {exponent} would be larger than {MAX_RESULT_BITS} bits")
    return base**exponent.numerator


_BINARY: dict[type[ast.operator], Callable[[Fraction, Fraction], Fraction]] = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: _divide, ast.Pow: _power,
}


def _bounded(value: Fraction) -> Fraction:
    if max(abs(value.numerator).bit_length(), value.denominator.bit_length()) > MAX_RESULT_BITS:
        raise CalculatorError(f"a number in the calculation is larger than the limit of {MAX_RESULT_BITS} bits "
                              f"(about {_MAX_DIGITS} digits)")
    return value


def _unsupported(node: ast.expr, source: str) -> str:
    """Why `node` is refused, naming what the model wrote."""
    op = getattr(node, "op", None)
    if op is not None and type(op) in _SYMBOLS:
        if isinstance(op, ast.BitXor):
            return "'^' is not supported; write powers with **"
        return f"'{_SYMBOLS[type(op)]}' is not supported; use + - * / ** and parentheses"
    text = ast.get_source_segment(source, node) or type(node).__name__
    return f"{text!r} is not arithmetic the calculator does; it takes numbers, + - * / ** and parentheses"


def format_number(value: Fraction) -> str:
    """`value` written exactly: `42`, `-0.375`, or `1/3 ≈ 0.333333333333` when no decimal ends."""
    if value.denominator == 1:
        return str(value.numerator)
    decimal = _terminating_decimal(value)
    if decimal is not None:
        return decimal
    with localcontext() as context:
        context.prec = _APPROXIMATE_DIGITS
        approximate = Decimal(value.numerator) / Decimal(value.denominator)
    return f"{value.numerator}/{value.denominator} ≈ {approximate}"


def _terminating_decimal(value: Fraction) -> str | None:
    """The exact decimal of `value` when its denominator has no prime factor but 2 and 5, else None."""
    rest, twos, fives = value.denominator, 0, 0
    while rest % 2 == 0:
        rest, twos = rest // 2, twos + 1
    while rest % 5 == 0:
        rest, fives = rest // 5, fives + 1
    if rest != 1:
        return None
    places = max(twos, fives)
    digits = str(abs(value.numerator) * 10**places // value.denominator).rjust(places + 1, "0")
    sign = "-" if value < 0 else ""
    return f"{sign}{digits[:-places]}.{digits[-places:]}"


@tool
def calculator(
    expression: Annotated[str, "arithmetic on integers and decimals with + - * / ** and parentheses, "
                               "e.g. (1.5 + 2) * 3 ** 2 / 7"],
) -> ToolResult:
    """Evaluate an arithmetic expression exactly; a fraction comes with a decimal approximation."""
    try:
        return simple_tool_result(format_number(evaluate(expression)))
    except CalculatorError as exc:
        return error_tool_result(str(exc))
