"""The exit codes live in one module (testharness.exit_codes): docs/unit-tests.md's table is
checked against it, and its verdict is a pure function, tested here as one. The same cases
through tests/run_unit.sh on throwaway projects: test_verdict_lines.py."""

from __future__ import annotations

import re
from pathlib import Path

from testharness import exit_codes
from testharness.exit_codes import INTERRUPTED, NO_TESTS, OK, TESTS_FAILED, USAGE_ERROR, verdict

DOC = Path(__file__).resolve().parents[3] / "docs" / "unit-tests.md"


def test_the_docs_exit_code_table_is_the_modules() -> None:
    text = DOC.read_text(encoding="utf-8")
    block = re.search(r"<!-- exit-codes: begin -->\n(.*?)<!-- exit-codes: end -->", text, re.S)
    assert block is not None, "docs/unit-tests.md has no exit-codes table"
    rows = [line.strip().strip("|").split("|") for line in block.group(1).splitlines()[2:] if line.strip()]
    documented = {int(code.strip()): meaning.strip() for code, meaning in rows}
    assert documented == exit_codes.RUN_UNIT_CODES


def test_no_module_but_exit_codes_defines_the_codes() -> None:
    # The codes were defined five times (unit_runner, supervisor, crash_record, record, supervised).
    package = Path(exit_codes.__file__).parent
    pattern = re.compile(r"^(INTERNAL_ERROR|INTERRUPTED|USAGE_ERROR|NO_TESTS|TESTS_FAILED|FRESH_PROCESS\w*)\b.*=", re.M)
    defining = sorted(p.name for p in package.rglob("*.py") if pattern.search(p.read_text(encoding="utf-8")))
    assert defining == ["exit_codes.py"]


def test_a_selection_empty_by_design_ends_0_and_says_why() -> None:
    status, line = verdict(NO_TESTS, {"collected": 0, "deselected": 3})
    assert (status, line) == (
        OK,
        "run_unit: no test ran: the selection (markers, -k, --shard) matched none of the 3 tests found",
    )
    skipped = {"collected": 0, "deselected": 0, "module_skips": {"tests/test_s.py": "needs a backend"}}
    assert verdict(NO_TESTS, skipped) == (
        OK,
        "run_unit: no test ran: 1 file(s) skipped at module level: needs a backend",
    )
    # nothing there at all is still an error
    assert verdict(NO_TESTS, {"collected": 0, "deselected": 0})[0] == NO_TESTS


def test_a_collection_error_is_one_verdict_whatever_pytest_exited_with() -> None:
    broken = {"collection_errors": {"tests/test_b.py": "RuntimeError: broken at import"}}
    serial = verdict(INTERRUPTED, {**broken, "stopped": {"by": "collection", "reason": "1 error during collection"}})
    assert serial == verdict(TESTS_FAILED, broken)  # xdist ran the other files
    assert serial == (INTERRUPTED, "run_unit: FAILED: 1 test file(s) could not be collected: "
                      "tests/test_b.py: RuntimeError: broken at import (see the ERROR lines above)")  # fmt: skip


def test_usage_errors_are_told_apart() -> None:
    # in its session (a path not found): pytest's exit 4 and its words
    found = verdict(USAGE_ERROR, {"usage_error": "file or directory not found: tests/x.py"})
    assert found == (USAGE_ERROR, "run_unit: FAILED: pytest: file or directory not found: tests/x.py")
    # before it (a conftest that does not import): 4, named
    line = "tests/conftest.py could not be imported: ModuleNotFoundError: No module named 'x'"
    assert verdict(USAGE_ERROR, {"before_collection": line}) == (USAGE_ERROR, f"run_unit: FAILED: {line}")
    # a refused flag: 2, below the usage text
    assert verdict(USAGE_ERROR, None) == (INTERRUPTED, "run_unit: pytest rejected the arguments (see the error above)")


def test_a_caught_stop_signal_stops_nothing_only_where_everything_passed() -> None:
    ran_to_the_end = {"results": "out/unit_results.json", "stopped": None}
    status, line = verdict(OK, ran_to_the_end, "SIGTERM")
    assert status == OK and line.endswith("(SIGTERM reached the run but stopped nothing: a test or library caught it)")
    status, line = verdict(TESTS_FAILED, ran_to_the_end, "SIGINT")  # Ray's workers got the Ctrl-C too
    assert (status, line) == (INTERRUPTED, (
        "run_unit: interrupted by SIGINT (a test or library caught it and the session went on to its end: "
        "some tests failed (see the summary above)); results of the tests that ran: out/unit_results.json"
    ))  # fmt: skip
