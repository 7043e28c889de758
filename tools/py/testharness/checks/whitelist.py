"""What a check may say: the whitelist of syntax and functions, checked before anything is
evaluated (pure core). Everything outside it is `Refused`, with a reason that names what was
refused; `validate` also bounds the expression's size and depth. The evaluator
(`checks.evaluator`) walks only trees that passed here.
"""

from __future__ import annotations

import ast
import operator
from collections.abc import Callable
from typing import Any

from testharness.checks.functions import ALLOWED_FUNCTIONS

# Size limits: real checks are one short line; these keep hostile input from costing
# memory or recursion depth (the evaluator recurses once per nesting level).
MAX_NODES = 1000
MAX_DEPTH = 64


class Refused(Exception):
    """The check uses a construct outside the whitelist (reported, never evaluated)."""


BINOPS: dict[type[ast.operator], Callable[[Any, Any], Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
}
_BINOP_SYMBOLS: dict[type[ast.operator], str] = {
    ast.Pow: "**",
    ast.FloorDiv: "//",
    ast.Mod: "%",
    ast.MatMult: "@",
    ast.LShift: "<<",
    ast.RShift: ">>",
    ast.BitOr: "|",
    ast.BitAnd: "&",
    ast.BitXor: "^",
}
CMPOPS: dict[type[ast.cmpop], Callable[[Any, Any], Any]] = {
    ast.Lt: operator.lt,
    ast.LtE: operator.le,
    ast.Gt: operator.gt,
    ast.GtE: operator.ge,
    ast.Eq: operator.eq,
    ast.NotEq: operator.ne,
    ast.In: lambda a, b: a in b,
    ast.NotIn: lambda a, b: a not in b,
}
# Human names for refused node types, so the message says what was refused.
_REFUSED_NAMES: dict[type[ast.AST], str] = {
    ast.Attribute: "attribute access",
    ast.Lambda: "lambda",
    ast.ListComp: "list comprehension",
    ast.SetComp: "set comprehension",
    ast.DictComp: "dict comprehension",
    ast.GeneratorExp: "generator expression",
    ast.IfExp: "conditional expression (x if c else y)",
    ast.NamedExpr: "assignment expression (:=)",
    ast.JoinedStr: "f-string",
    ast.FormattedValue: "f-string",
    ast.List: "list literal",
    ast.Tuple: "tuple literal",
    ast.Set: "set literal",
    ast.Dict: "dict literal",
    ast.Slice: "slice",
    ast.Starred: "starred argument (*args)",
    ast.Await: "await",
    ast.Yield: "yield",
    ast.YieldFrom: "yield",
}


def describe(node: ast.AST) -> str:
    name = _REFUSED_NAMES.get(type(node), type(node).__name__)
    if isinstance(node, ast.Attribute):
        return f"attribute access '.{node.attr}'"
    return name


def _check_node(node: ast.AST, parent: ast.AST | None) -> None:
    """Raise Refused if this single node is outside the whitelist."""
    if isinstance(node, (ast.Expression, ast.Load, ast.boolop, ast.cmpop, ast.keyword)):
        if isinstance(node, ast.keyword) and node.arg is None:
            raise Refused("keyword unpacking (**kwargs) is not allowed")
        return
    if isinstance(node, ast.Constant):
        v = node.value
        if isinstance(v, (int, float, str)):  # bool is an int
            return
        raise Refused(f"constant {v!r} is not allowed (only numbers and strings)")
    if isinstance(node, ast.Name):
        if node.id == "data":
            return
        if node.id in ALLOWED_FUNCTIONS:
            if isinstance(parent, ast.Call) and parent.func is node:
                return
            raise Refused(f"function '{node.id}' can only be called, not used as a value")
        raise Refused(f"name '{node.id}' is not allowed (only 'data' and calls of {_func_list()})")
    if isinstance(node, ast.Subscript):
        root: ast.AST = node
        while isinstance(root, ast.Subscript):
            root = root.value
        if not (isinstance(root, ast.Name) and root.id == "data"):
            raise Refused("subscripts are only allowed on data (data[...][...])")
        return
    if isinstance(node, ast.BinOp):
        if type(node.op) in BINOPS:
            return
        symbol = _BINOP_SYMBOLS.get(type(node.op), type(node.op).__name__)
        raise Refused(f"operator '{symbol}' is not allowed (only + - * /)")
    if isinstance(node, ast.UnaryOp):
        if isinstance(node.op, (ast.USub, ast.UAdd, ast.Not)):
            return
        raise Refused("operator '~' is not allowed")
    if isinstance(node, ast.operator | ast.unaryop):
        return  # checked with their BinOp/UnaryOp
    if isinstance(node, ast.BoolOp):
        return
    if isinstance(node, ast.Compare):
        for op in node.ops:
            if type(op) not in CMPOPS:
                symbol = (
                    "is not" if isinstance(op, ast.IsNot) else "is" if isinstance(op, ast.Is) else type(op).__name__
                )
                raise Refused(f"comparison '{symbol}' is not allowed (only < <= > >= == != in, not in)")
        return
    if isinstance(node, ast.Call):
        func = node.func
        if isinstance(func, ast.Name) and func.id in ALLOWED_FUNCTIONS:
            return
        if isinstance(func, ast.Name):
            raise Refused(f"function '{func.id}' is not allowed (only {_func_list()})")
        if isinstance(func, (ast.Attribute, ast.Lambda)):
            raise Refused(f"{describe(func)} is not allowed")
        raise Refused(f"only calls of {_func_list()} are allowed")
    raise Refused(f"{describe(node)} is not allowed")


def function_names() -> list[str]:
    """The functions a check may call, sorted."""
    return sorted(ALLOWED_FUNCTIONS)


def _func_list() -> str:
    return ", ".join(function_names())


def validate(tree: ast.Expression) -> ast.Compare | None:
    """Walk the tree iteratively (no recursion) against the whitelist and the size limits.

    Returns the first comparison in source order: its left-hand side is the check's value.
    """
    first_compare: ast.Compare | None = None
    count = 0
    stack: list[tuple[ast.AST, ast.AST | None, int]] = [(tree, None, 0)]
    while stack:
        node, parent, depth = stack.pop()
        count += 1
        if count > MAX_NODES:
            raise Refused(f"expression is too large (more than {MAX_NODES} nodes)")
        if depth > MAX_DEPTH:
            raise Refused(f"expression is nested too deeply (more than {MAX_DEPTH} levels)")
        _check_node(node, parent)
        if first_compare is None and isinstance(node, ast.Compare):
            first_compare = node
        # Reverse so the leftmost child is visited first (pre-order = source order).
        for child in reversed(list(ast.iter_child_nodes(node))):
            stack.append((child, node, depth + 1))
    return first_compare
