"""The exit codes of a run and what they mean, in one place (pure: no pytest, no Ray).

pytest's codes (pytest.ExitCode, named here without importing pytest: run_unit's --help needs
neither pytest nor Ray), the harness's own, how bad each is (`worse`), and the one mapping from
how a supervised run ended to run_unit's exit code and closing line (`verdict`): the supervisor
calls it once per run and the record's `exit_status` is set to what it returns.

`RUN_UNIT_CODES` is what each of run_unit's exit codes means; docs/unit-tests.md's table between
`<!-- exit-codes: begin -->` and `<!-- exit-codes: end -->` is checked against it
(tools/py/tests/test_exit_codes.py).
"""

from __future__ import annotations

import signal
from collections.abc import Mapping

# pytest's exit codes (pytest.ExitCode).
OK, TESTS_FAILED, INTERRUPTED, INTERNAL_ERROR, USAGE_ERROR, NO_TESTS = 0, 1, 2, 3, 4, 5
# The harness's own: a pytest process ends itself with it after a test left its CUDA context
# unusable (EX_TEMPFAIL); the supervisor goes on in a fresh one. Never run_unit's exit code.
FRESH_PROCESS = 75

RUN_UNIT_CODES: dict[int, str] = {
    OK: "every selected test passed (or skipped); or no test ran by design: deselected by the markers, "
    "-k or --shard, skipped at module level, or unchanged under --testmon (the last line says which)",
    TESTS_FAILED: "some tests failed, crashed their process or were killed past their timeout",
    INTERRUPTED: "interrupted (a stop signal, pytest.exit, --sw after a failure), a bad flag, "
    "or a test file that could not be collected (serial and under -n alike)",
    INTERNAL_ERROR: "the record could not be written, or pytest died outside any test",
    USAGE_ERROR: "pytest could not start on what it was given: a path that does not exist, "
    "a conftest.py that does not import (as pytest's own exit 4)",
    NO_TESTS: "no test at all at the given paths",
}

# Exit codes by how bad they are: passed < nothing collected < failed < interrupted < usage
# error < internal error < anything else (a signal, a code pytest never returns).
_SEVERITY = {OK: 0, NO_TESTS: 1, TESTS_FAILED: 2, INTERRUPTED: 3, USAGE_ERROR: 4, INTERNAL_ERROR: 5}


def worse(a: int, b: int) -> int:
    """The worse of two exit codes (a signal's negative code is worse than any of pytest's)."""
    return a if _SEVERITY.get(a, 6) >= _SEVERITY.get(b, 6) else b


# --- the verdict: how a supervised run ended -> run_unit's exit code and last line -------------


def _count(summary: Mapping[str, object] | None, key: str) -> int:
    value = summary.get(key) if summary else None
    return value if isinstance(value, int) else 0


def _text(summary: Mapping[str, object] | None, key: str) -> str | None:
    value = summary.get(key) if summary else None
    return value if isinstance(value, str) and value else None


def _named(summary: Mapping[str, object] | None, key: str) -> dict[str, str]:
    """A {path: one line} table of the summary (collection errors, module-level skips)."""
    value = summary.get(key) if summary else None
    return {str(k): str(v) for k, v in value.items()} if isinstance(value, dict) else {}


def verdict(code: int, summary: Mapping[str, object] | None, stopped_by: str | None = None) -> tuple[int, str]:
    """(run_unit's exit code, its closing line) for pytest's exit code; `stopped_by`: the stop
    signal run_unit received and passed on, if any. `summary` is what the plugin wrote
    (testharness.run_summary) and the supervisor added (`died`, `usage_error`): where the results
    went or why they could not be written, what stopped the session, what was collected."""
    before = _text(summary, "before_collection")
    error, died = _text(summary, "results_error"), _text(summary, "died")
    if before is not None and stopped_by is None:  # a conftest.py that does not import
        if error is not None:
            return INTERNAL_ERROR, f"run_unit: FAILED: {before}; no results were written ({error})"
        return USAGE_ERROR, f"run_unit: FAILED: {before}"
    if error is None and died is None:
        return _tests_line(code, summary, stopped_by)
    # Exit 3 whatever the tests did (no record, or pytest died outside a test): say what they did too.
    tests = summary.get("tests_exit_status" if error is not None else "exit_status") if summary else None
    tests_code = tests if isinstance(tests, int) and not isinstance(tests, bool) else code if error else None
    parts = [f"no results were written ({error})"] if error is not None else [str(died)]
    if tests_code is not None:
        _status, line = _tests_line(tests_code, summary, stopped_by)
        parts.append("the tests: " + line.removeprefix("run_unit: ").removeprefix("FAILED: "))
    if error is not None and died is not None:
        parts.append(died)
    return INTERNAL_ERROR, "run_unit: FAILED: " + "; ".join(parts)


def _stopped_early(summary: Mapping[str, object] | None, where: str) -> str:
    """The closing line of a run that pytest ended early with exit 2 without a stop signal
    reaching run_unit, from what the plugin saw interrupt it (`stopped`)."""
    stopped = summary.get("stopped") if summary else None
    by = stopped.get("by") if isinstance(stopped, dict) else None
    reason = stopped.get("reason") if isinstance(stopped, dict) else None
    reason = reason if isinstance(reason, str) else ""
    if by == "signal":  # sent to pytest itself, not through run_unit
        return f"run_unit: interrupted by {reason}{where}"
    if by == "pytest":  # session.shouldstop: --sw after a failure, xdist's --maxfail, a plugin
        return f"run_unit: pytest stopped the run early: {reason}{where}"
    if by == "exit":
        return f"run_unit: stopped by pytest.exit(): {reason}{where}"
    if by == "KeyboardInterrupt":
        return f"run_unit: stopped by a KeyboardInterrupt raised in a test or plugin (no stop signal){where}"
    if by == "collection":
        return f"run_unit: stopped by errors during collection ({reason}; see the ERROR lines above)"
    # No word from the plugin: pytest stopped itself, nearly always on `Interrupted: N errors
    # during collection`.
    return (
        "run_unit: stopped by errors during collection (see the ERROR lines above), or a test "
        "or plugin ended the session (pytest.exit, KeyboardInterrupt)"
    )


def _listed(named: dict[str, str], limit: int = 3) -> str:
    shown = [f"{path}: {line}" for path, line in list(named.items())[:limit]]
    return "; ".join(shown) + (f"; and {len(named) - limit} more" if len(named) > limit else "")


def _empty_by_design(summary: Mapping[str, object] | None) -> str | None:
    """Why no test ran although the paths hold tests (None: they hold none)."""
    if _count(summary, "collected") > 0:
        return None
    why = []
    skipped = _named(summary, "module_skips")
    if skipped:
        reasons = sorted(set(skipped.values()))
        why.append(f"{len(skipped)} file(s) skipped at module level: {'; '.join(reasons[:3])}")
    deselected = _count(summary, "deselected")
    if deselected:
        why.append(f"the selection (markers, -k, --shard) matched none of the {deselected} tests found")
    return "run_unit: no test ran: " + "; ".join(why) if why else None


def _tests_line(code: int, summary: Mapping[str, object] | None, stopped_by: str | None) -> tuple[int, str]:
    results = _text(summary, "results")
    where = f"; results of the tests that ran: {results}" if results else ""
    if (
        stopped_by is not None
        and summary is not None
        and summary.get("stopped") is None
        and code in (OK, TESTS_FAILED, NO_TESTS)
    ):
        # The session ran to its end: a test or library swallowed the signal (its own handler, an
        # `except BaseException`, a `__del__` it was raised in). Where everything passed, it
        # stopped nothing; where tests failed, they may have failed of it (Ctrl-C reaches Ray's
        # workers too): the run was interrupted, as it would have been without the catch.
        status, line = _tests_line(code, summary, None)
        if status == OK:
            return OK, f"{line} ({stopped_by} reached the run but stopped nothing: a test or library caught it)"
        said = line.removeprefix("run_unit: ").removeprefix("FAILED: ")
        return INTERRUPTED, (
            f"run_unit: interrupted by {stopped_by} (a test or library caught it and the session went on to "
            f"its end: {said}){where}"
        )
    if stopped_by is not None or code < 0:
        name = stopped_by or signal.Signals(-code).name
        return INTERRUPTED, f"run_unit: interrupted by {name}{where}"
    broken = _named(summary, "collection_errors")
    if broken and code in (TESTS_FAILED, INTERRUPTED, NO_TESTS):
        # The other files ran (1: run_unit's --continue-on-collection-errors, xdist), or pytest
        # stopped at the error (2: -x, --maxfail): one verdict.
        return INTERRUPTED, (
            f"run_unit: FAILED: {len(broken)} test file(s) could not be collected: {_listed(broken)}"
            " (see the ERROR lines above)"
        )
    if code == OK:
        return OK, "run_unit: all selected tests passed"
    if code == TESTS_FAILED:
        return TESTS_FAILED, "run_unit: FAILED: some tests failed (see the summary above)"
    if code == INTERRUPTED:
        # A Ctrl-C from the terminal reaches run_unit too (above): no signal came this way.
        return INTERRUPTED, _stopped_early(summary, where)
    if code == USAGE_ERROR:
        usage_error = _text(summary, "usage_error")
        if usage_error is not None:  # the session started, then pytest refused a path
            return USAGE_ERROR, f"run_unit: FAILED: pytest: {usage_error}"
        return INTERRUPTED, "run_unit: pytest rejected the arguments (see the error above)"
    if code == NO_TESTS:
        why = _empty_by_design(summary)
        if why is not None:
            return OK, why
        return NO_TESTS, "run_unit: no tests collected: no test found at the given paths"
    return code, f"run_unit: pytest stopped with an internal error (exit {code})"
