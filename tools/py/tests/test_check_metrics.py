"""The safe metric-check evaluator (testharness.checks) and its command line (checks.cli)."""

from __future__ import annotations

import importlib
import json
import math
import pickle
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from testharness import checks
from testharness.checks import (
    CheckResult,
    evaluate_check,
    max,
    mean,
    median,
    min,
    ratio_above,
)
from testharness.checks import cli as checks_cli

REPO_ROOT = Path(__file__).resolve().parents[3]
ENTRY = REPO_ROOT / "tests" / "check_metrics.py"

DATA: dict[str, Any] = {
    "train/loss": {"1": 5.0, "2": 4.0, "3": 3.0, "4": 2.0, "5": 1.0},
    "val/loss": {"2": 3.5, "4": 2.5},
    "resumed": {"50": 1.0, "51": 2.0, "52": 3.0},
    "nan": {"1": math.nan, "2": 1.0},
    "strnum": {"1": "1.5", "2": "2.5"},
    "bad": {"1": "abc"},
    "empty": {},
    "lst": [10, 20, 30],
    "name": "llama",
    "big": 10**30,
    "flat": 3,
}


def ok(check: str, data: Any = DATA) -> tuple[str, Any]:
    result = evaluate_check(data, check)
    assert result.passed is True, result.message
    assert result.reason == ""
    assert result.message == f"PASS: {check.strip()}"
    return result.message, result.value


def fail(check: str, data: Any = DATA) -> tuple[str, Any]:
    result = evaluate_check(data, check)
    assert result.passed is False
    assert type(result.passed) is bool
    assert result.check == check.strip()
    assert result.reason
    assert result.message == f"FAIL: {check.strip()} ({result.reason})"
    return result.message, result.value


# ---------------------------------------------------------------- the series functions


def test_min_max_over_float_values() -> None:
    assert min({"1": 3, "2": "1.5", "3": 2}) == 1.5
    assert max({"1": 3, "2": "1.5", "3": 2}) == 3.0
    assert isinstance(max({"1": 3}), float)


def test_min_max_propagate_nan_wherever_it_is() -> None:
    # builtins.min([1, nan]) == 1 but min([nan, 1]) is nan: a NaN must never hide.
    assert math.isnan(min({"1": 1.0, "2": math.nan}))
    assert math.isnan(max({"1": math.nan, "2": 1.0}))


def test_ratio_above_counts_greater_or_equal() -> None:
    assert ratio_above({"1": 1, "2": 2, "3": 3, "4": 4}, 3) == 0.5
    assert ratio_above({}, 3) == 0.0


@pytest.mark.parametrize(
    ("kwargs", "expected"),
    [
        ({}, 3.0),
        ({"range_start": 2}, 2.5),  # steps 2..5
        ({"range_start": 2, "range_end": 4}, 3.5),  # steps 2, 3 (end exclusive)
        ({"range_end": -1}, 3.5),  # up to last-1: steps 1..4
        ({"range_start": -2}, 1.5),  # the last two steps: 4, 5
        ({"range_start": -3, "range_end": -1}, 2.5),  # steps 3, 4
        ({"ignore_top_p": 0.4}, 2.0),  # keep the lowest int(5*0.6)=3: 1, 2, 3
        ({"ignore_top_p": 1.0}, 1.0),  # keeps at least one
    ],
)
def test_mean_ranges(kwargs: dict[str, Any], expected: float) -> None:
    assert mean(DATA["train/loss"], **kwargs) == expected


def test_mean_is_exact() -> None:
    series = {"1": 0.1, "2": 0.2, "3": 0.3, "4": 0.4, "5": 0.5, "6": 0.6, "7": 0.7}
    assert mean(series, range_start=1, range_end=8) == 0.4


def test_ranges_count_from_the_highest_step_present() -> None:
    # A series that starts late after a resume: -2 means the last two steps.
    assert mean(DATA["resumed"], -2) == 2.5
    assert median(DATA["resumed"], range_start=51) == 2.5
    assert mean(DATA["resumed"]) == 2.0


def test_median_ranges() -> None:
    assert median(DATA["train/loss"]) == 3.0
    assert median(DATA["train/loss"], 1, -1) == 3.5
    assert median({"1": 1, "2": 100, "3": 2}) == 2.0


@pytest.mark.parametrize("p", [-0.1, 1.5, math.nan])
def test_ignore_top_p_is_validated(p: float) -> None:
    with pytest.raises(ValueError, match="ignore_top_p must be between 0.0 and 1.0"):
        mean(DATA["train/loss"], ignore_top_p=p)


def test_empty_range_raises_a_clear_error() -> None:
    with pytest.raises(ValueError, match=r"no step k with 10 <= k < 6 \(series has steps 1..5\)"):
        mean(DATA["train/loss"], 10)


# ---------------------------------------------------------------- accepted constructs


def test_pass_message_value_and_whitespace() -> None:
    message, value = ok('  data["train/loss"]["5"] < 1500  ')
    assert message == 'PASS: data["train/loss"]["5"] < 1500'
    assert value == 1.0


def test_fail_message_keeps_the_value() -> None:
    message, value = fail('data["train/loss"]["1"] < 1')
    assert message == 'FAIL: data["train/loss"]["1"] < 1 (condition evaluated to False)'
    assert value == 5.0


@pytest.mark.parametrize(
    ("check", "value"),
    [
        ('mean(data["train/loss"]) == 3', 3.0),
        ('mean(data["train/loss"], 2, -1) == 3', 3.0),
        ('mean(data["train/loss"], range_start=-2, ignore_top_p=0.5) == 1', 1.0),
        ('median(data["train/loss"], range_start=2, range_end=-1) == 3', 3.0),
        ('max(data["train/loss"]) <= 5', 5.0),
        ('min(data["val/loss"]) >= 2.5', 2.5),
        ('ratio_above(data["train/loss"], 3) == 0.6', 0.6),
        ('len(data["train/loss"]) == 5', 5),
        ("abs(-3) == 3", 3),
        ('-data["train/loss"]["1"] < 0', -5.0),
        ('data["train/loss"]["5"] - data["train/loss"]["1"] < -3', -4.0),
        ('data["train/loss"]["5"] / data["train/loss"]["1"] < 0.25', 0.2),
        ('(data["train/loss"]["1"] + 1) * 2 == 12', 12.0),
        ('data["train/loss"]["5"] < data["train/loss"]["1"] * 0.5', 1.0),
        # Chained: the value is the first left-hand side.
        ('0 < data["train/loss"]["3"] < 4', 0),
        ("1 < 2 < 3 <= 3 != 4", 1),
        ('"val/loss" in data', "val/loss"),  # key membership on a dict
        ('"9" not in data["train/loss"]', "9"),
        ('"lla" in data["name"]', "lla"),
        ('data["lst"][-1] == 30', 30),
        ('data["lst"][0] + data["lst"][1] == 30', 30),
        ('data["train/loss"]["1"] > 4 and data["train/loss"]["5"] < 2', 5.0),
        ('data["train/loss"]["1"] < 4 or data["train/loss"]["5"] < 2', 5.0),
        ('not data["train/loss"]["1"] < 4', 5.0),
        ('data["big"] + 1 > data["big"]', 10**30 + 1),
        ('data["name"] == "llama"', "llama"),
        ("True == 1", True),
        ("data['flat'] == 3.0", 3),
        ('mean(data["strnum"]) == 2', 2.0),
    ],
)
def test_accepted_constructs(check: str, value: Any) -> None:
    _, got = ok(check)
    assert got == value
    assert type(got) is type(value)


def test_value_is_whole_expression_without_a_comparison() -> None:
    _, value = ok('data["train/loss"]["1"]')
    assert value == 5.0
    message, value = fail('data["train/loss"]["1"] - 5')
    assert message.endswith("(condition evaluated to False)")
    assert value == 0.0


def test_passed_is_a_real_bool_for_non_bool_results() -> None:
    assert evaluate_check(DATA, 'data["train/loss"]["1"] and data["name"]').passed is True


# ---------------------------------------------------------------- errors of evaluation


def test_key_not_found() -> None:
    message, value = fail('data["missing"]["1"] < 3')
    assert message == 'FAIL: data["missing"]["1"] < 3 (key not found: \'missing\')'
    assert value is None
    message, _ = fail('data["train/loss"]["99"] < 3')
    assert message.endswith("(key not found: '99')")
    # Steps are string keys: an int subscript is a different key, reported as such.
    message, _ = fail('data["train/loss"][9] < 3')
    assert message.endswith("(key not found: 9)")


def test_index_error() -> None:
    message, value = fail('data["lst"][5] > 0')
    assert message.endswith("(index error: list index out of range)")
    assert value is None


@pytest.mark.parametrize(
    ("check", "reason"),
    [
        ("1 / 0 > 0", "error: division by zero"),
        (
            'data["train/loss"]["1"] / (data["train/loss"]["1"] - 5) > 0',
            "error: division by zero",
        ),
        (
            'mean(data["train/loss"], 10) < 3',
            "error: mean requires at least one data point",
        ),
        ('median(data["empty"]) < 3', "error: median requires at least one data point"),
        (
            'mean(data["train/loss"], 3, 3) < 3',
            "error: mean requires at least one data point",
        ),
        ('max(data["empty"]) < 3', "error: max() arg is an empty sequence"),
        (
            'mean(data["train/loss"], ignore_top_p=2) < 3',
            "error: ignore_top_p must be between 0.0 and 1.0, got 2",
        ),
        ('mean(data["bad"]) < 3', "error: could not convert string to float: 'abc'"),
        ('max(data["name"]) < 3', "error: could not convert string to float: 'llama'"),
        (
            'data["name"] < 3',
            "error: '<' not supported between instances of 'str' and 'int'",
        ),
        (
            'data["strnum"]["1"] < 3',
            "error: '<' not supported between instances of 'str' and 'int'",
        ),
        (
            'mean(data["train/loss"], foo=1) < 3',
            "error: mean() got an unexpected keyword argument 'foo'",
        ),
        ('mean(data["flat"]) < 3', "error: mean: expected a metric series"),
        ("mean(data) < 3", "error: mean: step keys must be integers"),
        ('data["flat"]["1"] < 3', "error: 'int' object is not subscriptable"),
        ('data["name"] * 1000000000 > ""', "error: result too large"),
        ('-data["name"] < 3', "error: bad operand type for unary -: 'str'"),
        ('data["big"] / 10 ** 0 > 0', "error: operator '**' is not allowed"),
    ],
)
def test_errors_fail_with_a_message(check: str, reason: str) -> None:
    message, value = fail(check)
    # Python 3.12 words the empty-max error differently; the prefix is what matters there.
    if "empty sequence" in reason:
        reason = "error: max()"
    assert f"({reason}" in message, message
    assert value is None


def test_big_int_products_are_bounded() -> None:
    data = {"b": 10**4000}
    message, _ = fail(" * ".join(['data["b"]'] * 9) + " > 0", data)
    assert "integer result too large" in message
    # A big int as the value does not break the report (int->str digit limit).
    result = evaluate_check(data, 'data["b"] * data["b"] > 0')
    assert result.passed is True
    assert checks_cli.format_value(result.value)


# ---------------------------------------------------------------- NaN always fails


@pytest.mark.parametrize(
    "check",
    [
        'data["nan"]["1"] < 3',
        'data["nan"]["1"] > 3',
        'data["nan"]["1"] == data["nan"]["1"]',
        'data["nan"]["1"] != 3',  # Python says True; a NaN must still fail
        'not data["nan"]["1"] > 3',
        'data["nan"]["1"] > 3 or 1 < 2',
        'max(data["nan"]) < 100',
        'min(data["nan"]) < 100',
        'mean(data["nan"]) < 100',
        'median(data["nan"]) < 100',
        'data["nan"]["1"]',
    ],
)
def test_nan_fails(check: str) -> None:
    fail(check)


def test_nan_after_short_circuit_is_not_evaluated() -> None:
    ok('1 < 2 or data["nan"]["1"] > 3')


# ---------------------------------------------------------------- refused: never executed

HOSTILE = [
    ("data.__class__", "attribute access '.__class__' is not allowed"),
    ('data["train/loss"].keys()', "attribute access '.keys' is not allowed"),
    ("().__class__.__bases__[0].__subclasses__()", "attribute access"),
    (
        '__import__("os").system("touch /tmp/pwned_check_metrics")',
        "attribute access '.system' is not allowed",
    ),
    ('__import__("os")', "function '__import__' is not allowed"),
    ('eval("1")', "function 'eval' is not allowed"),
    ('exec("x=1")', "function 'exec' is not allowed"),
    ('open("/etc/passwd")', "function 'open' is not allowed"),
    ('getattr(data, "keys")', "function 'getattr' is not allowed"),
    ("globals()", "function 'globals' is not allowed"),
    ("__builtins__", "name '__builtins__' is not allowed"),
    ("os", "name 'os' is not allowed"),
    ("x < 3", "name 'x' is not allowed"),
    ("min < 3", "function 'min' can only be called"),
    ("(lambda: 1)()", "lambda is not allowed"),
    (
        'data["x"]()',
        "only calls of abs, all_finite, len, max, mean, median, min, ratio_above are allowed",
    ),
    ("lambda: 1", "lambda is not allowed"),
    ("[x for x in data]", "list comprehension is not allowed"),
    ("{k: 1 for k in data}", "dict comprehension is not allowed"),
    ("sum(x for x in [1])", "function 'sum' is not allowed"),
    ("2 ** 10 ** 100 > 1", "operator '**' is not allowed"),
    ("9 ** 9 ** 9", "operator '**' is not allowed"),
    ("pow(9, 9)", "function 'pow' is not allowed"),
    ("7 // 2 == 3", "operator '//' is not allowed"),
    ('"%s" % data', "operator '%' is not allowed"),
    ("1 << 100000000", "operator '<<' is not allowed"),
    ("~1 < 0", "operator '~' is not allowed"),
    ("1 if data else 2", "conditional expression"),
    ("(y := 1) > 0", "assignment expression"),
    ('f"{data}"', "f-string is not allowed"),
    ("[1, 2] == [1, 2]", "list literal is not allowed"),
    ("(1, 2)", "tuple literal is not allowed"),
    ("{1, 2}", "set literal is not allowed"),
    ("{}", "dict literal is not allowed"),
    ('data["lst"][0:2]', "slice is not allowed"),
    ("None == None", "constant None is not allowed"),
    ('b"x" == b"x"', "constant b'x' is not allowed"),
    ("1j == 1j", "constant 1j is not allowed"),
    ("... == ...", "constant Ellipsis is not allowed"),
    ('max(*data["lst"]) > 0', "starred argument"),
    ("mean(**data) > 0", "keyword unpacking (**kwargs) is not allowed"),
    ("data is data", "comparison 'is' is not allowed"),
    ('mean(data["train/loss"])[0]', "subscripts are only allowed on data"),
    ('"abc"[0] == "a"', "subscripts are only allowed on data"),
    ("data(1)", "function 'data' is not allowed"),
    ("max.__call__(1)", "attribute access"),
    ("import os", "invalid syntax"),
    ("x = 1", "invalid syntax"),
    ("1 < 2; 3 < 4", "invalid syntax"),
    ('data["train/loss"]["1"] <', "invalid syntax"),
    ("data[", "invalid syntax"),
    ("", "empty check"),
    ("   ", "empty check"),
    ("1" * 5000, "too long"),
    ("-" * 3000 + "1", "nested too deeply"),
    ("not " * 800 + "1", "nested too deeply"),
    ("(" * 300 + "1" + ")" * 300, "too many nested parentheses"),
    ("+".join(["1"] * 1200), "nested too deeply"),
    ("1 < " + " < ".join(["2"] * 600), "too large"),
    ("await data", "await"),
    ("9" * 4400, "too long"),
]


def test_at_least_thirty_hostile_expressions() -> None:
    assert len(HOSTILE) >= 30


@pytest.mark.parametrize(("check", "reason"), HOSTILE, ids=[str(i) for i in range(len(HOSTILE))])
def test_hostile_expressions_are_refused(check: str, reason: str) -> None:
    result = evaluate_check(DATA, check)
    assert result.passed is False
    assert result.value is None
    assert result.message.startswith("FAIL: ")
    assert reason in result.reason, result.reason
    assert result.reason.startswith("error: ")
    assert not Path("/tmp/pwned_check_metrics").exists()


def test_non_string_check_does_not_raise() -> None:
    result = evaluate_check(DATA, None)  # type: ignore[arg-type]
    assert (result.check, result.passed, result.value) == ("None", False, None)
    assert result.reason == "error: a check must be a string"


def test_evaluator_never_calls_eval_exec_or_compile_to_code(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import ast
    import builtins

    real_compile = builtins.compile
    calls: list[str] = []

    def forbidden(*_a: Any, **_k: Any) -> Any:
        calls.append("eval/exec")
        raise AssertionError("eval/exec called")

    def ast_only_compile(source: Any, filename: Any, mode: str, flags: int = 0, *a: Any, **k: Any) -> Any:
        # ast.parse is compile(..., PyCF_ONLY_AST): a tree, never code. Anything else is refused.
        if not flags & ast.PyCF_ONLY_AST:
            calls.append("compile")
            raise AssertionError("compile to code called")
        return real_compile(source, filename, mode, flags, *a, **k)

    monkeypatch.setattr(builtins, "eval", forbidden)
    monkeypatch.setattr(builtins, "exec", forbidden)
    monkeypatch.setattr(builtins, "compile", ast_only_compile)
    for check, _ in HOSTILE:
        evaluate_check(DATA, check)
    passed = evaluate_check(DATA, 'mean(data["train/loss"], -2) < 2').passed
    monkeypatch.undo()
    assert passed is True
    assert calls == []


# ---------------------------------------------------------------- the entry point and CLI


def test_importable_from_tests_dir(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(REPO_ROOT / "tests"))
    monkeypatch.delitem(sys.modules, "check_metrics", raising=False)
    mod = importlib.import_module("check_metrics")
    assert mod.evaluate_check is evaluate_check
    for name in ("min", "max", "mean", "median", "ratio_above"):
        assert getattr(mod, name) is getattr(checks, name)


def run_cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(ENTRY), *args],
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=cwd,
    )


@pytest.fixture
def metrics_file(tmp_path: Path) -> Path:
    path = tmp_path / "metrics.json"
    path.write_text(json.dumps({"train/loss": {"1": 817.4517822265625, "9": 3.0}}))
    return path


def test_cli_all_pass_prints_the_table(metrics_file: Path) -> None:
    proc = run_cli(str(metrics_file), 'data["train/loss"]["1"] < 1500', "--table-width", "120")
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "Metric Checks" in out
    for col in ("Status", "Check", "Value", "Message"):
        assert col in out
    assert 'data["train/loss"]["1"] < 1500' in out  # brackets survive rich markup
    assert "817.4517822265625" in out
    assert "PASS" in out and "FAIL" not in out


def test_cli_one_failure_exits_1_and_writes_json(metrics_file: Path, tmp_path: Path) -> None:
    out_json = tmp_path / "out" / "checks.json"
    proc = run_cli(
        str(metrics_file),
        'data["train/loss"]["9"] < 1',
        'data["nope"]["1"] < 1',
        'data["train/loss"]["9"] < 5',
        "--table-width",
        "160",
        "--json",
        str(out_json),
    )
    assert proc.returncode == 1
    assert "condition evaluated to False" in proc.stdout
    assert "key not found: 'nope'" in proc.stdout
    assert "N/A" in proc.stdout
    report = json.loads(out_json.read_text())
    assert report["passed"] is False
    assert [r["passed"] for r in report["results"]] == [False, False, True]
    assert report["results"][0]["value"] == 3.0
    assert report["results"][1]["value"] is None
    assert report["results"][2]["message"] == 'PASS: data["train/loss"]["9"] < 5'
    # Atomic write: no temp file left.
    assert [p.name for p in out_json.parent.iterdir()] == ["checks.json"]


def test_cli_table_width_is_honoured(metrics_file: Path) -> None:
    proc = run_cli(str(metrics_file), 'data["train/loss"]["1"] < 1500', "--table-width", "40")
    assert proc.returncode == 0
    assert all(len(line) <= 40 for line in proc.stdout.splitlines())


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        (None, "metrics file not found"),
        ("{not json", "is not valid JSON"),
        ("[1, 2]", "must hold a JSON object"),
    ],
)
def test_cli_bad_metrics_file_exits_2_with_one_line(tmp_path: Path, content: str | None, needle: str) -> None:
    path = tmp_path / "metrics.json"
    if content is not None:
        path.write_text(content)
    proc = run_cli(str(path), "1 < 2")
    assert proc.returncode == 2
    assert needle in proc.stderr
    assert "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def test_cli_without_checks_is_a_usage_error(metrics_file: Path) -> None:
    proc = run_cli(str(metrics_file))
    assert proc.returncode == 2
    assert "CHECK" in proc.stderr


def test_cli_runs_from_any_cwd(metrics_file: Path, tmp_path: Path) -> None:
    proc = run_cli(str(metrics_file), "1 < 2", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr


def test_plain_table_without_rich(capsys: pytest.CaptureFixture[str]) -> None:
    rows = checks.run_checks(DATA, ['data["train/loss"]["1"] < 1', "1 < 2"])
    checks_cli.render_plain(rows)
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "Metric Checks"
    assert [c.strip() for c in out[1].split(" | ")] == [
        "Status",
        "Check",
        "Value",
        "Message",
    ]
    assert out[2].startswith("FAIL") and "condition evaluated to False" in out[2]
    assert out[3].startswith("PASS")


def test_cli_rejects_a_tiny_table_width(metrics_file: Path) -> None:
    proc = run_cli(str(metrics_file), "1 < 2", "--table-width", "5")
    assert proc.returncode == 2
    assert "--table-width must be at least 20" in proc.stderr


def test_a_result_carries_its_reason_without_parsing_a_message() -> None:
    # The reason is data, not text cut out of "FAIL: ... (reason)": a check whose own text
    # ends in ")" or holds " (" keeps its reason intact.
    result = evaluate_check(DATA, 'mean(data["train/loss"], -2) > (9)')
    assert result == CheckResult('mean(data["train/loss"], -2) > (9)', 1.5, False, "condition evaluated to False")
    assert checks.run_checks(DATA, ["1 < 2", "2 < 1"]) == [
        CheckResult("1 < 2", 1, True, ""),
        CheckResult("2 < 1", 2, False, "condition evaluated to False"),
    ]


def test_json_report_keeps_a_nan_value(metrics_file: Path, tmp_path: Path) -> None:
    metrics_file.write_text('{"loss": {"1": NaN}}')
    out_json = tmp_path / "checks.json"
    proc = run_cli(str(metrics_file), 'data["loss"]["1"] < 1', "--json", str(out_json))
    assert proc.returncode == 1
    (row,) = json.loads(out_json.read_text())["results"]
    assert math.isnan(row["value"])
    assert row["message"] == 'FAIL: data["loss"]["1"] < 1 (condition evaluated to False)'


def test_evaluate_check_is_upstreams_passed_message_value_triple() -> None:
    # Upstream NeMo RL's own tests unpack, index and compare the result as a 3-tuple.
    passed, message, value = evaluate_check({"acc": {"1": 0.9, "2": 0.95}}, "mean(data['acc']) > 0.85")
    assert (passed, message, value) == (True, "PASS: mean(data['acc']) > 0.85", 0.925)
    failed = evaluate_check({"acc": {"1": 0.9}}, "mean(data['missing']) > 0.5")
    assert failed[0] is False and failed[2] is None and len(failed) == 3
    assert failed == (False, "FAIL: mean(data['missing']) > 0.5 (key not found: 'missing')", None)
    assert (failed.check, failed.reason) == ("mean(data['missing']) > 0.5", "key not found: 'missing'")
    # It survives pickling (xdist, Ray) and copying with its extra attributes.
    clone = pickle.loads(pickle.dumps(failed))
    assert clone == failed and (clone.check, clone.reason) == (failed.check, failed.reason)


@pytest.mark.parametrize(
    ("series", "expected"),
    [({}, False), ({"1": 1.0, "2": "-2.5"}, True), ({"1": 1.0, "2": math.nan}, False), ({"1": math.inf}, False)],
)
def test_all_finite(series: dict[str, Any], expected: bool) -> None:
    assert checks.all_finite(series) is expected
    assert evaluate_check({"s": series}, 'all_finite(data["s"])').passed is expected
