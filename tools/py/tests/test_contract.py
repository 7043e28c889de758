"""The plugins' shared contract (testharness.contract): [tool.testharness] read once per pytest
config, report extras only by their declared names."""

from __future__ import annotations

from pathlib import Path

import pytest

from testharness import contract, settings

PROJECT = """
[tool.testharness]
results_dir = "out"
test_roots = ["tests"]
[tool.testharness.hygiene]
timeout = 30
[tool.pytest.ini_options]
testpaths = ["tests"]
"""


def _count_reads(monkeypatch: pytest.MonkeyPatch, root: Path) -> list[Path]:
    reads: list[Path] = []
    original = settings._read_pyproject

    def counting(pyproject: Path) -> dict[str, object]:
        if pyproject.parent == root:
            reads.append(pyproject)
        return original(pyproject)

    monkeypatch.setattr(settings, "_read_pyproject", counting)
    return reads


def test_the_table_is_read_once_per_session(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    # Every plugin (selection, tracker, hygiene, interrupts, remote selection, supervised) asks
    # for the settings; one read serves them all, and a second inner run reads once more.
    pytester.makepyprojecttoml(PROJECT)
    pytester.makepyfile(**{"tests/test_a.py": "def test_a(tracker):\n    tracker.track('v', 1)\n"})
    reads = _count_reads(monkeypatch, pytester.path)
    pytester.inline_run("-p", "testharness.plugin", "--testmon").assertoutcome(passed=1)
    assert len(reads) == 1
    pytester.inline_run("-p", "testharness.plugin").assertoutcome(passed=1)
    assert len(reads) == 2


def test_a_malformed_table_is_one_usage_error_line(pytester: pytest.Pytester) -> None:
    pytester.makepyprojecttoml("[tool.testharness]\nresults_dir = 3\n")
    pytester.makepyfile(test_a="def test_a():\n    pass\n")
    result = pytester.runpytest_subprocess("-p", "testharness.plugin")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    errors = [line for line in result.stderr.lines if line.startswith("ERROR:")]
    assert len(errors) == 1 and "results_dir" in errors[0], result.stderr.lines
    assert "Traceback" not in result.stderr.str()


def test_report_extras_are_only_the_declared_ones() -> None:
    report = pytest.TestReport("t.py::t", ("t.py", 0, "t"), {}, "passed", None, "call")
    contract.put_extra(report, "testharness_crash", {"cause": "x", "stack": ""})
    assert contract.get_extra(report, "testharness_crash") == {"cause": "x", "stack": ""}
    assert contract.get_extra(report, "testharness_hang") is None
    with pytest.raises(KeyError, match="not a declared report extra"):
        contract.put_extra(report, "testharness_typo", 1)
