"""The safe check evaluator: `data["train/loss"]["9"] < 1500` over a metrics JSON (pure core).

A check is one Python expression over `data` (the loaded JSON). It is parsed with `ast`
and evaluated by walking a whitelist of node types; the string is never given to
`eval`/`exec`/`compile`, so no input can run code. Everything outside the whitelist is
refused before anything is evaluated, with a reason that says what was refused.

`evaluate_check` returns a `CheckResult`, upstream's `(passed, message, value)` tuple that
also carries `check` and `reason`, and never raises;
the table, the JSON report and the command line are in `checks.cli`.
"""

from __future__ import annotations

import ast
import math
import operator
from collections.abc import Callable, Iterable
from typing import Any, NamedTuple

from testharness.checks.functions import ALLOWED_FUNCTIONS

# Size limits: real checks are one short line; these keep hostile input from costing
# memory or recursion depth (the evaluator recurses once per nesting level).
MAX_CHECK_LENGTH = 4096
MAX_NODES = 1000
MAX_DEPTH = 64
MAX_SEQUENCE_RESULT = 100_000  # longest str/list a `*` or `+` may build
MAX_INT_BITS = 100_000  # biggest int a `*` may build (big-int products cost quadratic time)


class _Outcome(NamedTuple):
    passed: bool
    message: str  # `PASS: <check>` or `FAIL: <check> (<reason>)`
    value: Any  # left-hand side of the first comparison (the whole value without one); None after an error


class CheckResult(_Outcome):
    """One evaluated check: upstream's `(passed, message, value)` triple, a real tuple.

    `passed, message, value = evaluate_check(...)`, `[0]` and comparison with a plain tuple
    work as in upstream NeMo RL's check_metrics; `check` (as written, stripped) and `reason`
    ("" when it passed) ride along as attributes, so no caller cuts them out of the message.
    """

    check: str
    reason: str

    def __new__(cls, check: str, value: Any, passed: bool, reason: str) -> CheckResult:
        message = f"PASS: {check}" if passed else f"FAIL: {check} ({reason})"
        self = super().__new__(cls, passed, message, value)
        self.check, self.reason = check, reason
        return self

    def __getnewargs__(self) -> tuple[str, Any, bool, str]:  # pickling and copy rebuild through __new__
        return (self.check, self.value, self.passed, self.reason)


# ----------------------------------------------------------------------------------
# Validation: refuse everything outside the whitelist before evaluating anything.
# ----------------------------------------------------------------------------------


class Refused(Exception):
    """The check uses a construct outside the whitelist (reported, never evaluated)."""


_BINOPS: dict[type[ast.operator], Callable[[Any, Any], Any]] = {
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
_CMPOPS: dict[type[ast.cmpop], Callable[[Any, Any], Any]] = {
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


def _describe(node: ast.AST) -> str:
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
        if type(node.op) in _BINOPS:
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
            if type(op) not in _CMPOPS:
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
            raise Refused(f"{_describe(func)} is not allowed")
        raise Refused(f"only calls of {_func_list()} are allowed")
    raise Refused(f"{_describe(node)} is not allowed")


def function_names() -> list[str]:
    """The functions a check may call, sorted."""
    return sorted(ALLOWED_FUNCTIONS)


def _func_list() -> str:
    return ", ".join(function_names())


def _validate(tree: ast.Expression) -> ast.Compare | None:
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


# ----------------------------------------------------------------------------------
# Evaluation of a validated tree.
# ----------------------------------------------------------------------------------


def _is_nan(v: Any) -> bool:
    return isinstance(v, float) and math.isnan(v)


class _Evaluator:
    def __init__(self, data: Any, value_node: ast.Compare | None) -> None:
        self.data = data
        self.value_node = value_node
        self.value: Any = None
        self.value_set = False
        # A NaN met in a comparison or a condition fails the check even when `not`,
        # `or` or `!=` would turn it into True.
        self.nan_seen = False

    def truth(self, v: Any) -> bool:
        if _is_nan(v):
            self.nan_seen = True
            return False
        return bool(v)

    def value_of(self, node: ast.AST) -> Any:
        if isinstance(node, ast.Expression):
            return self.value_of(node.body)
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, ast.Name):  # validated: only `data` gets here
            return self.data
        if isinstance(node, ast.Subscript):
            container = self.value_of(node.value)
            key = self.value_of(node.slice)
            return container[key]
        if isinstance(node, ast.BinOp):
            left = self.value_of(node.left)
            right = self.value_of(node.right)
            _guard_size(node.op, left, right)
            return _BINOPS[type(node.op)](left, right)
        if isinstance(node, ast.UnaryOp):
            operand = self.value_of(node.operand)
            if isinstance(node.op, ast.Not):
                return not self.truth(operand)
            return operator.neg(operand) if isinstance(node.op, ast.USub) else operator.pos(operand)
        if isinstance(node, ast.BoolOp):
            is_and = isinstance(node.op, ast.And)
            result: Any = None
            for sub in node.values:
                result = self.value_of(sub)
                t = self.truth(result)
                if is_and and not t:
                    return result
                if not is_and and t:
                    return result
            return result
        if isinstance(node, ast.Compare):
            return self.compare(node)
        if isinstance(node, ast.Call):
            assert isinstance(node.func, ast.Name)
            func = ALLOWED_FUNCTIONS[node.func.id]
            args = [self.value_of(a) for a in node.args]
            kwargs = {kw.arg: self.value_of(kw.value) for kw in node.keywords if kw.arg is not None}
            return func(*args, **kwargs)
        # Unreachable after _validate; kept so a gap in the whitelist cannot evaluate.
        raise Refused(f"{_describe(node)} is not allowed")

    def compare(self, node: ast.Compare) -> bool:
        left = self.value_of(node.left)
        if node is self.value_node:
            self.value, self.value_set = left, True
        for op, right_node in zip(node.ops, node.comparators, strict=True):
            right = self.value_of(right_node)
            if not isinstance(op, (ast.In, ast.NotIn)) and (_is_nan(left) or _is_nan(right)):
                self.nan_seen = True
                return False  # every comparison with NaN fails, `!=` included
            if not bool(_CMPOPS[type(op)](left, right)):
                return False
            left = right
        return True


def _guard_size(op: ast.operator, left: Any, right: Any) -> None:
    """Refuse `*`/`+` that would build a huge string, list or int ("a" * 10**12)."""
    seq = (str, list, tuple)
    if (
        isinstance(op, ast.Mult)
        and isinstance(left, int)
        and isinstance(right, int)
        and left.bit_length() + right.bit_length() > MAX_INT_BITS
    ):
        raise ValueError(f"integer result too large (more than {MAX_INT_BITS} bits)")
    if isinstance(op, ast.Mult):
        for a, b in ((left, right), (right, left)):
            if isinstance(a, seq) and isinstance(b, int) and len(a) * b > MAX_SEQUENCE_RESULT:
                raise ValueError(f"result too large (more than {MAX_SEQUENCE_RESULT} items)")
    if (
        isinstance(op, ast.Add)
        and isinstance(left, seq)
        and isinstance(right, seq)
        and len(left) + len(right) > MAX_SEQUENCE_RESULT
    ):
        raise ValueError(f"result too large (more than {MAX_SEQUENCE_RESULT} items)")


def safe_repr(v: Any) -> str:
    try:
        return repr(v)
    except Exception:  # noqa: BLE001 - e.g. an int beyond the int->str digit limit
        return f"<{type(v).__name__}>"


def _error_text(exc: BaseException) -> str:
    try:
        text = str(exc)
    except Exception:  # noqa: BLE001 - evaluation must never raise
        text = ""
    return text or type(exc).__name__


def _evaluate(data: Any, check: str) -> tuple[bool, str | None, Any]:
    """(passed, failure reason or None, value). Never raises."""
    if len(check) > MAX_CHECK_LENGTH:
        return (
            False,
            f"error: check is too long ({len(check)} characters, limit {MAX_CHECK_LENGTH})",
            None,
        )
    if not check:
        return False, "error: empty check", None
    try:
        tree = ast.parse(check, mode="eval")
    except SyntaxError as exc:
        where = f" at column {exc.offset}" if exc.offset else ""
        return False, f"error: invalid syntax: {exc.msg}{where}", None
    except (MemoryError, RecursionError, ValueError):
        return (
            False,
            "error: expression is too large or nested too deeply to parse",
            None,
        )
    try:
        value_node = _validate(tree)
    except Refused as exc:
        return False, f"error: {exc}", None
    ev = _Evaluator(data, value_node)
    try:
        result = ev.value_of(tree)
    except Refused as exc:
        return False, f"error: {exc}", None
    except KeyError as exc:
        key = exc.args[0] if exc.args else None
        return False, f"key not found: {safe_repr(key)}", None
    except IndexError as exc:
        return False, f"index error: {_error_text(exc)}", None
    except ZeroDivisionError:
        return False, "error: division by zero", None
    except RecursionError:
        return False, "error: expression is nested too deeply", None
    except Exception as exc:  # noqa: BLE001 - evaluation must never raise
        return False, f"error: {_error_text(exc)}", None
    value = ev.value if ev.value_set else (result if value_node is None else None)
    passed = ev.truth(result)
    if passed and ev.nan_seen:
        return False, "error: NaN met in a comparison or condition", value
    if not passed:
        return False, "condition evaluated to False", value
    return True, None, value


def evaluate_check(data: Any, check: str) -> CheckResult:
    """Evaluate one check over `data`. Never raises: every problem is a failed result.

    `passed` is a real bool; `value` is the left-hand side of the (first) comparison, or
    the whole expression's value when it has no comparison, None after an error.
    """
    if not isinstance(check, str):
        return CheckResult(safe_repr(check), None, False, "error: a check must be a string")
    check = check.strip()
    try:
        passed, reason, value = _evaluate(data, check)
    except Exception as exc:  # noqa: BLE001 - belt and braces: the contract is "never raises"
        passed, reason, value = False, f"error: {_error_text(exc)}", None
    return CheckResult(check, value, passed, reason or "")


def run_checks(data: Any, checks: Iterable[str]) -> list[CheckResult]:
    """Evaluate every check, in order."""
    return [evaluate_check(data, check) for check in checks]
