"""What CI shows: JUnit XML and GitHub step summaries, from the run's final record. Through
tests/run_unit.sh with a real segfault, the JUnit file holds the test pytest died in."""

from __future__ import annotations

import os
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from markdown_it import MarkdownIt
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


def test_junit_xfail_is_skipped_xpass_passed_and_the_counters_are_the_testcases() -> None:
    record = {"tests": {
        "t.py::test_xfail": {"outcome": "xfailed"},
        "t.py::test_xpass": {"outcome": "xpassed"},
        "t.py::test_xpass_strict": {"outcome": "failed"},  # pytest fails a strict xpass: so does the record
        "t.py::test_odd": {"outcome": "unknown"},  # no JUnit word for it: an error, never a pass
    }}  # fmt: skip
    suite = ET.fromstring(ci_report.junit_xml(record)).find("testsuite")
    assert suite is not None
    children = {c.get("name"): [(e.tag, e.get("message"), e.get("type")) for e in c] for c in suite.iter("testcase")}
    assert children == {
        "test_xfail": [("skipped", "xfail: expected to fail", "pytest.xfail")],
        "test_xpass": [],
        "test_xpass_strict": [("failure", "failed", None)],
        "test_odd": [("error", "unknown", None)],
    }
    assert {k: suite.get(k) for k in ("tests", "failures", "errors", "skipped")} == {
        "tests": "4", "failures": "1", "errors": "1", "skipped": "1",
    }  # fmt: skip


def test_junit_keeps_any_id_whole_and_well_formed() -> None:
    ids = {
        "tests/t.py::test_p[a::b]": ("tests.t", "test_p[a::b]"),
        "tests/t.py::TestC::test_q[x::y[z]]": ("tests.t.TestC", "test_q[x::y[z]]"),
        "tests/t.py::test_c[\x01\x1b\x00]": ("tests.t", "test_c[\\x01\\x1b\\x00]"),
        "tests/t.py::test_s[\udcff\ud800]": ("tests.t", "test_s[\\udcff\\ud800]"),
        "tests/t.py::test_n[\ufffe\uffff\t\u00e9\U0001f600]": ("tests.t", "test_n[\\ufffe\\uffff\t\u00e9\U0001f600]"),
        'tests/t.py::test_h[`x`<img src=y>&"]': ("tests.t", 'test_h[`x`<img src=y>&"]'),
    }
    record = {
        "start_time": "\x07",
        "tests": {i: {"outcome": "error", "crash": {"cause": "\x02", "stack": "\udcff"}} for i in ids},
    }
    text = ci_report.junit_xml(record)
    suite = ET.fromstring(text.encode("utf-8")).find("testsuite")  # encodable, and parses
    assert suite is not None and suite.get("timestamp") == "\\x07"
    assert [(c.get("classname"), c.get("name")) for c in suite.iter("testcase")] == list(ids.values())
    errors = [c.find("error") for c in suite.iter("testcase")]
    assert {(e.get("message"), e.text) for e in errors if e is not None} == {("error: \\x02", "\\udcff")}


def test_an_output_path_is_refused_where_writing_it_would_lose_something_or_hang(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    record, history = tmp_path / "out" / "unit_results.json", tmp_path / "out" / "unit_results"
    history.mkdir(parents=True)
    record.write_text("{}")
    (tmp_path / "file").write_text("")
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "link").symlink_to(record)

    def problem(path: Path, make_dirs: bool = True) -> str | None:
        return ci_report.output_problem(path, [record], [history], make_dirs)

    assert problem(record) == problem(tmp_path / "link") == "is the run's record: give another file"
    assert (problem(history / "x.xml") or "").startswith("is in the results history")
    assert problem(tmp_path / "out") == "is a directory: give a file"
    assert (problem(tmp_path / "fifo") or "").startswith("is not a regular file")
    assert problem(tmp_path / "file" / "x.xml") is not None  # a directory that cannot be made
    assert problem(tmp_path / "new" / "dirs" / "x.xml") is None  # made when written
    assert (problem(tmp_path / "new" / "x.md", make_dirs=False) or "").startswith("cannot be created")
    assert problem(tmp_path / "file") is None and problem(tmp_path / "x.md", make_dirs=False) is None
    monkeypatch.setattr(ci_report.os, "access", lambda *_args: False)  # as a user without write permission (not root)
    assert problem(tmp_path / "file") == "is not writable"
    assert problem(tmp_path / "new.xml") == f"cannot be written: no permission to write in {tmp_path.resolve()}"


def rendered(markdown: str) -> ET.Element:
    """The Markdown as a CommonMark renderer with GitHub's tables shows it (raw HTML passed
    through, as GitHub does before sanitising): an element tree, so raw markup is an element."""
    return ET.fromstring("<div>" + MarkdownIt("commonmark").enable("table").render(markdown) + "</div>")


def rows_of(page: ET.Element) -> list[list[str]]:
    return [["".join(td.itertext()) for td in tr.iter("td")] for tr in page.iter("tr") if tr.find("td") is not None]


def test_unit_markdown_lists_what_did_not_pass() -> None:
    text = ci_report.unit_markdown(RECORD, "run_unit: FAILED: ...", {"deselected": 7})
    page = rendered(text)
    assert "1 error, 1 failed, 1 passed, 1 skipped; 7 deselected" in "".join(page.itertext())
    assert rows_of(page) == [
        ["tests/unit/test_a.py::TestC::test_bad[x|y]", "failed", ""],
        ["tests/unit/test_b.py::test_died", "error", "killed by SIGSEGV"],
    ]
    assert [c.text for c in page.iter("code")] == [r[0] for r in rows_of(page)]  # ids in monospace


HOSTILE = "tests/t.py::test_p[`x`<img src=y>|[l](http://e)*a*_b_ $m$ ``]"


def test_summaries_show_ids_checks_and_causes_as_text(tmp_path: Path) -> None:
    record = {"tests": {
        HOSTILE: {"outcome": "failed", "crash": {"cause": "<b>x</b> & `y\nz"}},
        "tests/t.py::test_xfail": {"outcome": "xfailed"},
        "tests/t.py::test_xpass": {"outcome": "xpassed"},
    }}  # fmt: skip
    page = rendered(ci_report.unit_markdown(record, "run_unit: FAILED <i>", None))
    assert {el.tag for el in page.iter()} == {"div", "h3", "p", "table", "thead", "tbody", "tr", "th", "td", "code"}
    assert rows_of(page) == [[HOSTILE, "failed", "<b>x</b> & `y z"]]  # xfail, xpass: not failures
    assert "run_unit: FAILED <i>" in "".join(page.itertext())
    (tmp_path / "a<b>_c").mkdir()
    (tmp_path / "a<b>_c" / "checks.json").write_text('{"results": [{"check": "x < 1 | `y`", "passed": true}]}')
    page = rendered(ci_report.functional_markdown([("a<b>_c", "PASS", "1s", "[n](u) *m*")], tmp_path, "0"))
    assert {el.tag for el in page.iter()} <= {
        "div",
        "h3",
        "p",
        "table",
        "thead",
        "tbody",
        "tr",
        "th",
        "td",
        "code",
        "details",
        "summary",
    }
    assert rows_of(page) == [["a<b>_c", "PASS", "1s", "[n](u) *m*"], ["PASS", "x < 1 | `y`", "None"]]
    assert "".join(next(page.iter("summary")).itertext()) == "a<b>_c: 1/1 metric checks passed"


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
    page = rendered(ci_report.functional_markdown(rows, tmp_path, "0"))
    assert rows_of(page) == [
        ["sft", "FAIL", "31.0s", "exit status 1"],
        ["grpo", "SKIP", "-", "not selected: nothing it reached changed"],
        ["PASS", "a < 1", "0.5"],
        ["FAIL", "b > 2", "1"],
    ]
    assert "".join(next(page.iter("summary")).itertext()) == "sft: 1/2 metric checks passed"


def test_step_summary_appends_only_under_github_actions(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ci_report.SUMMARY_ENV, raising=False)
    ci_report.append_step_summary("nothing")  # no variable: nothing written, no error
    path = tmp_path / "summary.md"
    monkeypatch.setenv(ci_report.SUMMARY_ENV, str(path))
    ci_report.append_step_summary("one")
    ci_report.append_step_summary("two")
    assert path.read_text() == "one\ntwo\n"
    os.mkfifo(tmp_path / "fifo")
    monkeypatch.setenv(ci_report.SUMMARY_ENV, str(tmp_path / "fifo"))
    with pytest.raises(OSError):  # no reader: an error at once, never a wait (the functional summary's path)
        ci_report.append_step_summary("three")


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
    page = rendered(summary.read_text())
    assert "run_unit: FAILED" in "".join(page.itertext())
    assert [row[:2] for row in rows_of(page)] == [["tests/test_crashy.py::test_segfault", "failed"]]
    assert rows_of(page)[0][2].startswith("killed by SIGSEGV")
    bad = run_unit_sh(root, "--junitxml")
    assert bad.returncode == 2 and bad.stderr.rstrip().endswith(
        "--junitxml needs a file path, e.g. --junitxml=unit.xml"
    )


IDS = """
import pytest

@pytest.mark.xfail(reason="known")
def test_xfail():
    assert False

@pytest.mark.xfail(reason="fixed?")
def test_xpass():
    pass

@pytest.mark.xfail(reason="must fail", strict=True)
def test_xpass_strict():
    pass

@pytest.mark.parametrize("s", ["\\x01", "\\udcff", "a::b", "`x`<img src=y>"])
def test_p(s):
    assert "<" not in s
"""
HOSTILE_ID = "tests/test_ids.py::test_p[`x`<img src=y>]"


def test_run_unit_ci_files_of_every_outcome_and_any_id(tmp_path: Path) -> None:
    root = write_project(tmp_path, {"tests/test_ids.py": IDS})
    with (root / "pyproject.toml").open("a") as fh:  # the ids as given: control characters, a surrogate
        fh.write("disable_test_id_escaping_and_forfeit_all_rights_to_community_support = true\n")
    summary = tmp_path / "step.md"
    proc = run_unit_sh(root, "--junitxml", "junit.xml", GITHUB_STEP_SUMMARY=str(summary))
    assert proc.returncode == 1, proc.stdout + proc.stderr  # the strict xpass and the <img> test failed
    assert proc.stderr.rstrip().endswith("run_unit: FAILED: some tests failed (see the summary above)")
    assert "Traceback" not in proc.stderr and "could not" not in proc.stderr
    suite = ET.parse(root / "junit.xml").getroot().find("testsuite")
    assert suite is not None
    assert {k: suite.get(k) for k in ("tests", "failures", "errors", "skipped")} == {
        "tests": "7", "failures": "2", "errors": "0", "skipped": "1",
    }  # fmt: skip
    cases = {(c.get("classname"), c.get("name")): [e.tag for e in c] for c in suite.iter("testcase")}
    assert cases == {
        ("tests.test_ids", "test_xfail"): ["skipped"],
        ("tests.test_ids", "test_xpass"): [],
        ("tests.test_ids", "test_xpass_strict"): ["failure"],
        ("tests.test_ids", "test_p[\\x01]"): [],
        ("tests.test_ids", "test_p[\\udcff]"): [],
        ("tests.test_ids", "test_p[a::b]"): [],
        ("tests.test_ids", "test_p[`x`<img src=y>]"): ["failure"],
    }
    text = summary.read_text()
    assert "<img" not in text and text.count("`") == text.count("\\`")  # every backtick escaped
    page = rendered(text)
    assert rows_of(page) == [["tests/test_ids.py::test_xpass_strict", "failed", ""], [HOSTILE_ID, "failed", ""]]
    assert "1 xfailed, 1 xpassed" in "".join(page.itertext())


def test_run_unit_refuses_ci_files_that_would_lose_the_record_or_hang(tmp_path: Path) -> None:
    root = write_project(tmp_path, {"tests/test_ok.py": "def test_ok():\n    pass\n"})
    record, old = root / "out" / "unit_results.json", root / "out" / "unit_results" / "old.json"
    old.parent.mkdir(parents=True)
    record.write_text("the previous record")
    old.write_text("a dated record")
    os.mkfifo(root / "fifo")
    for path in ("out/unit_results.json", "out/unit_results/old.json", "fifo", "out", "tests/test_ok.py/x.xml"):
        proc = run_unit_sh(root, "--junitxml", path, timeout=60)  # a hang fails here rather than hangs
        assert proc.returncode == 2, proc.stdout + proc.stderr
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith(f"run_unit: --junitxml {path} "), proc.stderr
        assert "pytest" not in proc.stdout  # refused before pytest started
    assert record.read_text() == "the previous record" and old.read_text() == "a dated record"
    proc = run_unit_sh(root, "--junitxml", "ci/junit.xml", GITHUB_STEP_SUMMARY=str(root / "fifo"), timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr  # the environment's summary: skipped, the tests run
    warning = [line for line in proc.stderr.splitlines() if "step summary" in line]
    assert warning == [f"run_unit: warning: no step summary: $GITHUB_STEP_SUMMARY ({root / 'fifo'}) is not a "
                       "regular file (a FIFO, a device or a socket): give a file"]  # fmt: skip
    assert ET.parse(root / "ci" / "junit.xml").getroot().find("testsuite") is not None
