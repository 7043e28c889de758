"""The safe check evaluator: `data["train/loss"]["9"] < 1500` over a metrics JSON (pure core).

A check is one Python expression over `data` (the loaded JSON). It is parsed with `ast`
and evaluated by walking a whitelist of node types; the string is never given to
`eval`/`exec`/`compile`, so no input can run code. Everything outside the whitelist is
refused before anything is evaluated, with a reason that says what was refused
(`checks.whitelist`).

`evaluate_check` returns a `CheckResult`, upstream's `(passed, message, value)` tuple that
also carries `check` and `reason`, and never raises;
the table, the JSON report and the command line are in `checks.cli`.
"""

from __future__ import annotations

import ast
import math
import operator
from collections.abc import Iterable
from typing import Any, NamedTuple

from testharness.checks.functions import ALLOWED_FUNCTIONS
from testharness.checks.whitelist import BINOPS, CMPOPS, Refused, describe, validate

# Size limits: real checks are one short line; these keep hostile input from costing memory
# (the syntax tree's size and depth: checks.whitelist).
MAX_CHECK_LENGTH = 4096
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
            return BINOPS[type(node.op)](left, right)
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
        raise Refused(f"{describe(node)} is not allowed")

    def compare(self, node: ast.Compare) -> bool:
        left = self.value_of(node.left)
        if node is self.value_node:
            self.value, self.value_set = left, True
        for op, right_node in zip(node.ops, node.comparators, strict=True):
            right = self.value_of(right_node)
            if not isinstance(op, (ast.In, ast.NotIn)) and (_is_nan(left) or _is_nan(right)):
                self.nan_seen = True
                return False  # every comparison with NaN fails, `!=` included
            if not bool(CMPOPS[type(op)](left, right)):
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
        value_node = validate(tree)
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
