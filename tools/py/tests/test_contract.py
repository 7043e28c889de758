"""The plugins' shared contract (testharness.contract): [tool.testharness] read once per pytest
config (serially, and in each process of a `-n` run), report extras only by their declared names."""

from __future__ import annotations

import collections
import json
from pathlib import Path

import pytest
from xdist_project import Head, env_for, make_project, run_pytest

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


def test_the_objects_a_config_registers_are_unregistered_when_it_ends(pytester: pytest.Pytester) -> None:
    # As pytest's own junitxml: the recorder's, hygiene's, run_first's objects of an inner run are
    # in its plugin manager while it runs, and gone once it is unconfigured.
    pytester.makepyprojecttoml(PROJECT)
    pytester.makeconftest(
        "import json, pathlib\n"
        "def pytest_sessionstart(session):\n"
        "    names = [n for n, _ in session.config.pluginmanager.list_name_plugin() if n]\n"
        "    pathlib.Path('names.json').write_text(json.dumps(names))\n"
    )
    pytester.makepyfile(**{"tests/test_a.py": "def test_a():\n    pass\n"})
    reprec = pytester.inline_run("-p", "testharness.plugin")
    reprec.assertoutcome(passed=1)
    config = reprec.getcall("pytest_unconfigure").config
    own = {f"testharness-{name}-{id(config)}" for name in ("recorder", "hygiene", "run-first")}
    assert own <= set(json.loads((pytester.path / "names.json").read_text()))  # while it ran
    assert not own & {name for name, _ in config.pluginmanager.list_name_plugin()}  # after its end


# Loaded first by every process of the run (the project's root is on PYTHONPATH): each read of
# the project's pyproject.toml is a line "<pid> <xdist role>" in $READS_LOG.
COUNTING_SITECUSTOMIZE = """
import os
from pathlib import Path

from testharness import settings

_original = settings._read_pyproject


def _counting(pyproject):
    if pyproject.parent == Path(os.environ["TESTHARNESS_ROOT"]):
        with open(os.environ["READS_LOG"], "a") as log:
            log.write(f"{os.getpid()} {os.environ.get('PYTEST_XDIST_WORKER', 'controller')}\\n")
    return _original(pyproject)


settings._read_pyproject = _counting
"""


def test_each_process_of_an_xdist_run_reads_the_table_once(tmp_path: Path, shared_head: Head) -> None:
    # The controller plans -n's file order with the history, whose place falls back to the
    # settings' results_dir: from the settings already read, not from a second read.
    files = {f"tests/test_{n}.py": f"def test_{n}():\n    pass\n" for n in "ab"}
    root = make_project(tmp_path, {**files, "sitecustomize.py": COUNTING_SITECUSTOMIZE})
    log = tmp_path / "reads.log"
    proc = run_pytest(root, "-n", "2", "-p", "no:randomly", env=env_for(root, shared_head, READS_LOG=str(log)))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "2 xdist workers share the Ray cluster" in proc.stdout
    reads = [line.split() for line in log.read_text().splitlines()]
    assert collections.Counter(role for _, role in reads) == {"controller": 1, "gw0": 1, "gw1": 1}, reads
    assert len({pid for pid, _ in reads}) == 3, reads


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
