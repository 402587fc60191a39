"""The built-in tools a multi-turn rollout can call by name (``grpo.tools: [calculator]``): plain Python functions
with type hints and a docstring, from which the JSON schema the chat template shows the model is made."""

from __future__ import annotations

import ast
import operator
from collections.abc import Callable
from typing import Any

#: the largest exponent and the most digits a calculator result may have: ``9**9**9`` must fail, not hang the run
MAX_EXPONENT = 64
MAX_DIGITS = 4_000

_BINARY: dict[type, Callable[[Any, Any], Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}


def arithmetic_value(node: ast.AST) -> int | float:
    """The value of a parsed arithmetic expression, as Python's ``eval`` gives it (a huge power or result fails)."""
    if isinstance(node, ast.Expression):
        return arithmetic_value(node.body)
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.UAdd, ast.USub)):
        value = arithmetic_value(node.operand)
        return value if isinstance(node.op, ast.UAdd) else -value
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left, right = arithmetic_value(node.left), arithmetic_value(node.right)
        if isinstance(node.op, ast.Pow) and abs(right) > MAX_EXPONENT:
            raise ValueError(f"exponent {right} is larger than {MAX_EXPONENT}")
        result = _BINARY[type(node.op)](left, right)
        if isinstance(result, int) and result.bit_length() > MAX_DIGITS * 3.33:
            raise ValueError(f"the result has more than {MAX_DIGITS} digits")
        return result
    raise ValueError(f"{ast.unparse(node)!r} is not arithmetic (numbers, + - * / // % ** and parentheses)")


def calculator(expression: str) -> str:
    """Exact arithmetic.

    Args:
        expression: e.g. "347 * 829"
    """
    try:
        tree = ast.parse(expression.strip(), mode="eval")
    except SyntaxError:
        raise ValueError(f"cannot parse {expression!r} as arithmetic") from None
    value = arithmetic_value(tree)
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**53:
        value = int(value)  # 6 / 3 reads 2, as a person writes it
    return str(value)


#: every tool known by name
BUILTIN_TOOLS: dict[str, Callable[..., Any]] = {"calculator": calculator}
