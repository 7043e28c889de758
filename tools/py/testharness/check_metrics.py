"""Safe metric checks: evaluate `data["train/loss"]["9"] < 1500` over a metrics JSON.

A check is one Python expression over `data` (the loaded JSON). It is parsed with `ast`
and evaluated by walking a whitelist of node types; the string is never given to
`eval`/`exec`/`compile`, so no input can run code. Everything outside the whitelist is
refused before anything is evaluated, with a message that says what was refused.

The CLI (`tests/check_metrics.py METRICS.json CHECK...`) prints a rich table titled
"Metric Checks" and exits 0 when every check passes, 1 otherwise, 2 on bad input.
"""

from __future__ import annotations

import argparse
import ast
import builtins
import json
import math
import operator
import os
import statistics
import sys
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from testharness.atomic_io import write_text_atomic

__all__ = [
    "ALLOWED_FUNCTIONS",
    "CheckResult",
    "evaluate_check",
    "format_value",
    "main",
    "max",
    "mean",
    "median",
    "min",
    "ratio_above",
    "run_checks",
]

# Size limits: real checks are one short line; these keep hostile input from costing
# memory or recursion depth (the evaluator recurses once per nesting level).
MAX_CHECK_LENGTH = 4096
MAX_NODES = 1000
MAX_DEPTH = 64
MAX_SEQUENCE_RESULT = 100_000  # longest str/list a `*` or `+` may build
DEFAULT_PIPED_WIDTH = 200  # table width limit when stdout is not a terminal
MAX_INT_BITS = (
    100_000  # biggest int a `*` may build (big-int products cost quadratic time)
)


# ----------------------------------------------------------------------------------
# Functions callable from a check. A metric series is {"<step>": value}, steps from 1.
# ----------------------------------------------------------------------------------


def _values(args: tuple[Any, ...], name: str) -> list[float]:
    """The float values of one series (dict values or list items) or of several args."""
    if len(args) == 1:
        (only,) = args
        items: Iterable[Any]
        if isinstance(only, Mapping):
            items = only.values()
        elif isinstance(only, (list, tuple)):
            items = only
        else:
            items = [only]
    elif not args:
        raise TypeError(f"{name} expected at least 1 argument, got 0")
    else:
        items = args
    return [float(v) for v in items]


def min(*args: Any) -> float:
    """Smallest value of a series (over `float(v)` of its values); NaN if any is NaN."""
    vals = _values(args, "min")
    if any(math.isnan(v) for v in vals):
        return math.nan  # builtin min would depend on the position of the NaN
    return builtins.min(vals)


def max(*args: Any) -> float:
    """Largest value of a series (over `float(v)` of its values); NaN if any is NaN."""
    vals = _values(args, "max")
    if any(math.isnan(v) for v in vals):
        return math.nan
    return builtins.max(vals)


def ratio_above(value: Any, threshold: float) -> float:
    """Fraction of the series' values that are `>= threshold` (0.0 for an empty series)."""
    vals = _values((value,), "ratio_above")
    if not vals:
        return 0.0
    return sum(1 for v in vals if v >= threshold) / len(vals)


def _series_items(value: Any, name: str) -> list[tuple[int, float]]:
    """(step, float value) pairs of a series: a {"<step>": v} dict, or a list (steps from 1)."""
    if isinstance(value, Mapping):
        pairs: list[tuple[int, float]] = []
        for step, v in value.items():
            try:
                k = int(step)
            except (TypeError, ValueError):
                raise ValueError(
                    f"{name}: step keys must be integers, got {step!r}"
                ) from None
            pairs.append((k, float(v)))
        return pairs
    if isinstance(value, (list, tuple)):
        return [(i, float(v)) for i, v in enumerate(value, start=1)]
    raise TypeError(
        f"{name}: expected a metric series ({{step: value}}), got {type(value).__name__}"
    )


def _select_range(
    value: Any, range_start: float, range_end: float, name: str
) -> list[float]:
    """Values whose step k satisfies range_start <= k < range_end (negative/<=0 from the end)."""
    items = _series_items(value, name)
    # "last step" is the highest step present: a series resumed at step 50 still works.
    last = builtins.max((k for k, _ in items), default=0)
    start = last + 1 + range_start if range_start < 0 else range_start
    end = last + 1 + range_end if range_end <= 0 else range_end
    vals = [v for k, v in sorted(items) if start <= k < end]
    if not vals:
        if items:
            have = f"series has steps {builtins.min(k for k, _ in items)}..{last}"
        else:
            have = "series is empty"
        raise statistics.StatisticsError(
            f"{name} requires at least one data point: no step k with {start} <= k < {end} ({have})"
        )
    return vals


def mean(
    value: Any, range_start: float = 1, range_end: float = 0, ignore_top_p: float = 0.0
) -> float:
    """Mean over steps range_start <= k < range_end, optionally dropping the top fraction.

    range_end <= 0 means "last step + 1 + range_end" (0: up to the last step included);
    a negative range_start means "last step + 1 + range_start" (-5: the last five steps).
    ignore_top_p (0..1) drops the highest values, keeping the lowest int(n * (1 - p)),
    at least one.
    """
    if not 0.0 <= ignore_top_p <= 1.0:
        raise ValueError(
            f"ignore_top_p must be between 0.0 and 1.0, got {ignore_top_p}"
        )
    vals = _select_range(value, range_start, range_end, "mean")
    if ignore_top_p > 0.0:
        keep = builtins.max(1, int(len(vals) * (1.0 - ignore_top_p)))
        vals = sorted(vals)[:keep]
    return statistics.mean(vals)


def median(value: Any, range_start: float = 1, range_end: float = 0) -> float:
    """Median over steps range_start <= k < range_end (same range rules as `mean`)."""
    vals = _select_range(value, range_start, range_end, "median")
    if any(math.isnan(v) for v in vals):
        return math.nan  # sorting with NaN gives an arbitrary median
    return statistics.median(vals)


ALLOWED_FUNCTIONS: dict[str, Callable[..., Any]] = {
    "min": min,
    "max": max,
    "mean": mean,
    "median": median,
    "ratio_above": ratio_above,
    "len": builtins.len,
    "abs": builtins.abs,
}


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
            raise Refused(
                f"function '{node.id}' can only be called, not used as a value"
            )
        raise Refused(
            f"name '{node.id}' is not allowed (only 'data' and calls of {_func_list()})"
        )
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
                    "is not"
                    if isinstance(op, ast.IsNot)
                    else "is"
                    if isinstance(op, ast.Is)
                    else type(op).__name__
                )
                raise Refused(
                    f"comparison '{symbol}' is not allowed (only < <= > >= == != in, not in)"
                )
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


def _func_list() -> str:
    return ", ".join(sorted(ALLOWED_FUNCTIONS))


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
            raise Refused(
                f"expression is nested too deeply (more than {MAX_DEPTH} levels)"
            )
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
            return (
                operator.neg(operand)
                if isinstance(node.op, ast.USub)
                else operator.pos(operand)
            )
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
            kwargs = {
                kw.arg: self.value_of(kw.value)
                for kw in node.keywords
                if kw.arg is not None
            }
            return func(*args, **kwargs)
        # Unreachable after _validate; kept so a gap in the whitelist cannot evaluate.
        raise Refused(f"{_describe(node)} is not allowed")

    def compare(self, node: ast.Compare) -> bool:
        left = self.value_of(node.left)
        if node is self.value_node:
            self.value, self.value_set = left, True
        for op, right_node in zip(node.ops, node.comparators):
            right = self.value_of(right_node)
            if not isinstance(op, (ast.In, ast.NotIn)) and (
                _is_nan(left) or _is_nan(right)
            ):
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
            if (
                isinstance(a, seq)
                and isinstance(b, int)
                and len(a) * b > MAX_SEQUENCE_RESULT
            ):
                raise ValueError(
                    f"result too large (more than {MAX_SEQUENCE_RESULT} items)"
                )
    if (
        isinstance(op, ast.Add)
        and isinstance(left, seq)
        and isinstance(right, seq)
        and len(left) + len(right) > MAX_SEQUENCE_RESULT
    ):
        raise ValueError(f"result too large (more than {MAX_SEQUENCE_RESULT} items)")


def _safe_repr(v: Any) -> str:
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
        return False, f"key not found: {_safe_repr(key)}", None
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


def evaluate_check(data: Any, check: str) -> tuple[bool, str, Any]:
    """Evaluate one check over `data`: (passed, message, value). Never raises.

    `passed` is a real bool; `value` is the left-hand side of the (first) comparison, or
    the whole expression's value when it has no comparison, None after an error.
    Messages: `PASS: <check>` or `FAIL: <check> (<reason>)`.
    """
    if not isinstance(check, str):
        return (
            False,
            f"FAIL: {_safe_repr(check)} (error: a check must be a string)",
            None,
        )
    check = check.strip()
    try:
        passed, reason, value = _evaluate(data, check)
    except Exception as exc:  # noqa: BLE001 - belt and braces: the contract is "never raises"
        passed, reason, value = False, f"error: {_error_text(exc)}", None
    if passed:
        return True, f"PASS: {check}", value
    return False, f"FAIL: {check} ({reason})", value


# ----------------------------------------------------------------------------------
# Table, JSON and CLI.
# ----------------------------------------------------------------------------------


# One row: {"check", "passed", "value", "message", "reason"} (reason: "" on PASS).
CheckResult = dict[str, Any]


def run_checks(data: Any, checks: Iterable[str]) -> list[CheckResult]:
    """Evaluate every check; the reason is the message's part in parentheses ("" on PASS)."""
    rows: list[CheckResult] = []
    for check in checks:
        passed, message, value = evaluate_check(data, check)
        shown = check.strip() if isinstance(check, str) else _safe_repr(check)
        prefix = f"FAIL: {shown} ("
        reason = (
            message[len(prefix) : -1]
            if not passed and message.startswith(prefix)
            else ("" if passed else message)
        )
        rows.append(
            {
                "check": shown,
                "passed": passed,
                "value": value,
                "message": message,
                "reason": reason,
            }
        )
    return rows


def format_value(value: Any) -> str:
    """Value column text: `N/A` when there is none."""
    if value is None:
        return "N/A"
    try:
        return str(value)
    except Exception:  # noqa: BLE001 - evaluation must never raise
        return _safe_repr(value)


def render_table(
    rows: list[CheckResult], width: int | None = None, file: Any = None
) -> None:
    """Print the "Metric Checks" rich table (Status, Check, Value, Message)."""
    try:
        from rich.console import Console
        from rich.table import Table
        from rich.text import Text
    except ImportError:  # a bare interpreter: same columns, plain text
        _render_plain(rows, file=file)
        return

    table = Table(title="Metric Checks")
    table.add_column("Status", style="bold", no_wrap=True)
    table.add_column("Check")
    table.add_column("Value", style="cyan")
    table.add_column("Message", style="italic")
    for row in rows:
        status = (
            Text("PASS", style="green") if row["passed"] else Text("FAIL", style="red")
        )
        # Text, not markup: checks are full of [...] that rich would read as tags.
        table.add_row(
            status,
            Text(row["check"]),
            Text(format_value(row["value"])),
            Text(row["reason"]),
        )
    Console(width=width, file=file).print(table)


def _render_plain(rows: list[CheckResult], file: Any = None) -> None:
    header = ("Status", "Check", "Value", "Message")
    cells = [header] + [
        (
            "PASS" if r["passed"] else "FAIL",
            r["check"],
            format_value(r["value"]),
            r["reason"],
        )
        for r in rows
    ]
    widths = [builtins.max(len(c[i]) for c in cells) for i in range(4)]
    out = file or sys.stdout
    print("Metric Checks", file=out)
    for c in cells:
        print(" | ".join(v.ljust(w) for v, w in zip(c, widths)).rstrip(), file=out)


def _json_default(v: Any) -> Any:
    return _safe_repr(v)


def write_json_atomic(path: str | Path, payload: Any) -> None:
    write_text_atomic(Path(path), json.dumps(payload, indent=2, default=_json_default) + "\n")


class MetricsFileError(Exception):
    """The metrics file is missing or is not a JSON object."""


def load_metrics(path: str | Path) -> dict[str, Any]:
    """Load the metrics JSON; MetricsFileError with a one-line reason otherwise."""
    p = Path(path)
    if not p.is_file():
        raise MetricsFileError(f"metrics file not found: {p}")
    try:
        data = json.loads(p.read_text())
    except (OSError, UnicodeDecodeError) as exc:
        raise MetricsFileError(f"cannot read metrics file {p}: {exc}") from None
    except json.JSONDecodeError as exc:
        raise MetricsFileError(f"metrics file {p} is not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise MetricsFileError(
            f"metrics file {p} must hold a JSON object, got {type(data).__name__}"
        )
    return data


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="check_metrics.py",
        description="Evaluate metric checks (Python expressions over `data`) against a metrics JSON.",
        epilog=(
            'Example: check_metrics.py metrics.json \'data["train/loss"]["9"] < 1500\' '
            "'mean(data[\"train/loss\"], -3) < 0.5'. Functions: " + _func_list() + "."
        ),
    )
    parser.add_argument("metrics", help="JSON file: {metric: {step: value}}")
    parser.add_argument(
        "checks",
        nargs="+",
        metavar="CHECK",
        help="expression over data, e.g. 'max(data[\"x\"]) < 3'",
    )
    parser.add_argument(
        "--table-width",
        type=int,
        default=None,
        metavar="N",
        help="table width in columns",
    )
    parser.add_argument(
        "--json",
        dest="json_out",
        default=None,
        metavar="OUT",
        help="also write the results here",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    """CLI: 0 when every check passes, 1 when one fails, 2 on bad input."""
    args = build_parser().parse_args(argv)
    if args.table_width is not None and args.table_width < 20:
        print(
            f"error: --table-width must be at least 20, got {args.table_width}",
            file=sys.stderr,
        )
        return 2
    try:
        data = load_metrics(args.metrics)
    except MetricsFileError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    rows = run_checks(data, args.checks)
    width = args.table_width
    if width is None and not sys.stdout.isatty() and "COLUMNS" not in os.environ:
        # Piped (tee, CI logs): rich would assume 80 columns and wrap every check.
        width = DEFAULT_PIPED_WIDTH
    render_table(rows, width=width)
    all_passed = all(r["passed"] for r in rows)
    if args.json_out:
        payload = {
            "metrics_file": str(args.metrics),
            "passed": all_passed,
            "results": [
                {
                    "check": r["check"],
                    "passed": r["passed"],
                    "value": r["value"],
                    "message": r["message"],
                }
                for r in rows
            ],
        }
        try:
            write_json_atomic(args.json_out, payload)
        except OSError as exc:
            print(f"error: cannot write {args.json_out}: {exc}", file=sys.stderr)
            return 2
    failed = sum(not r["passed"] for r in rows)
    print(
        f"{len(rows) - failed}/{len(rows)} checks passed"
        + ("" if all_passed else f", {failed} FAILED")
    )
    return 0 if all_passed else 1


if __name__ == "__main__":
    sys.exit(main())
