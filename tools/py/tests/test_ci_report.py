"""What CI shows: JUnit XML and GitHub step summaries, from the run's final record. Through
tests/run_unit.sh with a real segfault, the JUnit file holds the test pytest died in."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from records_project import run_unit_sh, write_project

from testharness import ci_report

RECORD = {
    "start_time": "2026-12-06 06:00:00",
    "tests": {
        "tests/unit/test_a.py::test_ok": {"outcome": "passed", "duration": 0.5, "attempts": ["passed"]},
        "tests/unit/test_a.py::TestC::test_bad[x|y]": {"outcome": "failed", "duration": 1.0, "attempts": ["failed"]},
        "tests/unit/test_b.py::test_skip": {"outcome": "skipped", "duration": 0.0, "attempts": ["skipped"]},
        "tests/unit/test_b.py::test_died": {
            "outcome": "error", "duration": 2.0, "attempts": ["error"],
            "crash": {"cause": "killed by SIGSEGV", "stack": "Fatal Python error: Segmentation fault"},
        },
    },
}  # fmt: skip


def test_junit_names_outcomes_and_crashes_like_pytest() -> None:
    suite = ET.fromstring(ci_report.junit_xml(RECORD)).find("testsuite")
    assert suite is not None
    assert {k: suite.get(k) for k in ("tests", "failures", "errors", "skipped")} == {
        "tests": "4", "failures": "1", "errors": "1", "skipped": "1",
    }  # fmt: skip
    cases = {(c.get("classname"), c.get("name")): c for c in suite.iter("testcase")}
    assert list(cases["tests.unit.test_a", "test_ok"]) == []
    bad = cases["tests.unit.test_a.TestC", "test_bad[x|y]"].find("failure")
    assert bad is not None and bad.get("message") == "failed"
    died = cases["tests.unit.test_b", "test_died"].find("error")
    assert died is not None and died.get("message") == "error: killed by SIGSEGV"
    assert died.text == "Fatal Python error: Segmentation fault"
    assert cases["tests.unit.test_b", "test_skip"].find("skipped") is not None


def test_unit_markdown_lists_what_did_not_pass() -> None:
    text = ci_report.unit_markdown(RECORD, "run_unit: FAILED: ...", {"deselected": 7})
    assert "1 error, 1 failed, 1 passed, 1 skipped; 7 deselected" in text
    assert "| `tests/unit/test_a.py::TestC::test_bad[x\\|y]` | failed |  |" in text
    assert "| `tests/unit/test_b.py::test_died` | error | killed by SIGSEGV |" in text
    assert "test_ok" not in text


def test_functional_markdown_shows_rows_and_the_checks_of_scripts_that_ran(tmp_path: Path) -> None:
    (tmp_path / "sft").mkdir()
    (tmp_path / "sft" / "checks.json").write_text(
        '{"passed": false, "results": [{"check": "a < 1", "passed": true, "value": 0.5},'
        ' {"check": "b > 2", "passed": false, "value": 1}]}'
    )
    rows = [
        ("sft", "FAIL", "31.0s", "exit status 1"),
        ("grpo", "SKIP", "-", "not selected: nothing it reached changed"),
    ]
    text = ci_report.functional_markdown(rows, tmp_path, "0")
    assert "| grpo | SKIP | - | not selected: nothing it reached changed |" in text
    assert "sft: 1/2 metric checks passed" in text and "| FAIL | `b > 2` | 1 |" in text


def test_step_summary_appends_only_under_github_actions(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ci_report.SUMMARY_ENV, raising=False)
    ci_report.append_step_summary("nothing")  # no variable: nothing written, no error
    path = tmp_path / "summary.md"
    monkeypatch.setenv(ci_report.SUMMARY_ENV, str(path))
    ci_report.append_step_summary("one")
    ci_report.append_step_summary("two")
    assert path.read_text() == "one\ntwo\n"


CRASHY = """
import ctypes

def test_before():
    pass

def test_segfault():
    ctypes.string_at(0)

def test_after():
    pass
"""


def test_run_unit_junitxml_holds_the_test_whose_process_died(tmp_path: Path) -> None:
    root = write_project(tmp_path, {"tests/test_crashy.py": CRASHY})
    summary = tmp_path / "step.md"
    proc = run_unit_sh(root, "--junitxml", "out/junit.xml", GITHUB_STEP_SUMMARY=str(summary))
    assert proc.returncode == 1, proc.stdout + proc.stderr  # a crash is a failed test; the run goes on
    suite = ET.parse(root / "out" / "junit.xml").getroot().find("testsuite")
    assert suite is not None and suite.get("tests") == "3" and suite.get("failures") == "1"
    died = [c for c in suite.iter("testcase") if c.find("failure") is not None]
    assert [c.get("name") for c in died] == ["test_segfault"]
    failure = died[0].find("failure")
    assert failure is not None and (failure.get("message") or "").startswith("failed: killed by SIGSEGV")
    assert "Segmentation fault" in (failure.text or "")  # the stack the supervisor kept
    text = summary.read_text()
    assert "run_unit: FAILED" in text and "| `tests/test_crashy.py::test_segfault` | failed | killed by SIGSEGV" in text
    bad = run_unit_sh(root, "--junitxml")
    assert bad.returncode == 2 and bad.stderr.rstrip().endswith(
        "--junitxml needs a file path, e.g. --junitxml=unit.xml"
    )
