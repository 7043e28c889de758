"""Where the harness is merely installed: harmless (issue 35, item 5).

A project without `[tool.testharness]` gets the plugin's options, markers and `tracker`
fixture and nothing else: no Ray cluster for `-n`, no results file, no leak check, watchdog
or signal handling. Whatever the project's `ray` is (Ray, not installed, blocked, a stand-in
module or a MagicMock in `sys.modules["ray"]`), the harness calls into it only when it is
Ray's own package (real_ray), and everything but the Ray features works without it.

Every run is a pytest subprocess with the installed plugin (its `pytest11` entry point), as in
a project that never heard of the harness.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import types
from pathlib import Path
from unittest import mock

import pytest

import testharness
from testharness import real_ray

# Asserted inside the inner runs' tests: what the plugin did, seen from a test.
PROBE = """
import os, signal, sys


def test_tracker_records(tracker, request):
    assert request.config.pluginmanager.hasplugin("testharness.plugin")  # the installed plugin
    tracker.track("loss", 0.5)
    assert tracker.log_max_mem("mem") > 0
    from testharness.tracker import session_record

    assert session_record(request.config)["metrics"][tracker.key]["loss"] == 0.5
    expect = os.environ["EXPECT"].split(",")
    if "no-ray" in expect:  # nothing started or joined a cluster, nor even imported Ray
        assert "RAY_ADDRESS" not in os.environ
        ray = [m for m, v in sys.modules.items() if (m == "ray" or m.startswith("ray.")) and v is not None]
        assert not ray or "stand-in" in expect, ray
    if "own-signals" in expect and "PYTEST_XDIST_WORKER" not in os.environ:
        assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL  # the project's, untouched


def test_second(tracker):
    tracker.track("n", 2)
"""

CONFIGURED = '[tool.testharness]\nresults_dir = "out"\ntest_roots = ["tests"]\n'
UNCONFIGURED = '[project]\nname = "someone-else"\nversion = "0"\n'

BLOCK_RAY = 'import sys\n\nsys.modules["ray"] = None  # as where Ray is not installed: `import ray` fails\n'
STAND_IN_MODULE = 'import sys, types\n\nsys.modules["ray"] = types.ModuleType("ray")  # a stand-in of the project\n'
STAND_IN_MOCK = """
import sys
from unittest import mock

import pytest


@pytest.fixture(autouse=True)
def fake_ray(monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", mock.MagicMock())  # through setup, call and teardown
"""


def _project(root: Path, pyproject: str, conftest: str = "") -> Path:
    (root / "pyproject.toml").write_text(pyproject)
    (root / "conftest.py").write_text(conftest)
    (root / "tests").mkdir()  # the default test root: results would go there
    (root / "tests" / "test_probe.py").write_text(PROBE)
    return root


def _run(root: Path, *args: str, expect: str) -> tuple[subprocess.CompletedProcess[str], Path]:
    """pytest in `root` as its user runs it (no RAY_ADDRESS: this suite's cluster is not theirs);
    (the run, its own RAY_TMPDIR, where a cluster it started would leave its session)."""
    ray_tmp = Path(tempfile.mkdtemp(prefix="mi_ray_", dir="/tmp"))  # short: Ray's socket paths
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TESTHARNESS_", "RAY_ADDRESS", "COV_"))}
    env = {k: v for k, v in env.items() if not k.startswith("PYTEST_") or k == "PYTEST_ADDOPTS"}
    env.update(EXPECT=expect, RAY_TMPDIR=str(ray_tmp), RAY_ENABLE_UV_RUN_RUNTIME_ENV="0")
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-rA", *args],
        cwd=root, env=env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    return proc, ray_tmp


def _results_files(root: Path) -> list[Path]:
    return sorted(root.rglob("unit_results*"))


@pytest.mark.parametrize("xdist", [[], ["-n", "2"]], ids=["serial", "xdist"])
def test_a_project_without_the_table_gets_the_fixture_and_nothing_else(tmp_path: Path, xdist: list[str]) -> None:
    """`pytest -n 2` starts no Ray cluster (not even an import of Ray), no results file is
    written, signals stay the project's, and the tracker fixture records in memory."""
    root = _project(tmp_path, UNCONFIGURED)
    proc, ray_tmp = _run(root, *xdist, expect="no-ray,own-signals")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0 and "2 passed" in proc.stdout, out
    assert "Ray cluster" not in out and "testharness:" not in out, out
    assert not list(ray_tmp.rglob("session_*")), "a Ray cluster was started"
    assert _results_files(root) == [], "a results file in a project that never asked for one"
    assert "unit results:" not in out


def test_a_project_without_the_table_still_gets_results_when_it_asks(tmp_path: Path) -> None:
    root = _project(tmp_path, UNCONFIGURED)
    proc, _ = _run(root, "--unit-results-dir", "mine", expect="no-ray")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert _results_files(root / "mine") == [root / "mine" / "unit_results", root / "mine" / "unit_results.json"]


def test_a_project_without_the_table_gets_no_leak_check_unless_asked(tmp_path: Path) -> None:
    root = _project(tmp_path, UNCONFIGURED)
    (root / "tests" / "test_child.py").write_text(
        "import pathlib, subprocess, sys\n\n\ndef test_leaves_a_process():\n"
        "    child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
        "    with open('pids', 'a') as fh:\n        fh.write(f'{child.pid}\\n')\n"
    )
    try:
        proc, _ = _run(root, "tests/test_child.py", expect="")
        assert proc.returncode == 0 and "leak" not in proc.stdout, proc.stdout + proc.stderr
        proc, _ = _run(root, "tests/test_child.py", "--fail-on-leak", expect="")  # asked for: it checks
        assert proc.returncode == 1 and "test_child.py::test_leaves_a_process: 1 leak(s)" in proc.stdout, (
            proc.stdout + proc.stderr
        )
    finally:
        for pid in (root / "pids").read_text().split():  # nothing sweeps them here: not configured
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(pid), signal.SIGKILL)


def test_a_configured_project_runs_dash_n_without_ray(tmp_path: Path) -> None:
    """Ray not importable: -n runs without a shared cluster (one line says so), the tracker
    measures this machine, and the results file is written as documented."""
    root = _project(tmp_path, CONFIGURED, BLOCK_RAY)
    proc, ray_tmp = _run(root, "-n", "2", expect="no-ray")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0 and "2 passed" in proc.stdout, out
    # One test file: one worker (plan first), and no Ray to share
    assert "testharness: 1 xdist workers without a shared Ray cluster (Ray is blocked" in proc.stdout, out
    assert not list(ray_tmp.rglob("session_*"))
    assert (root / "out" / "unit_results.json").is_file(), out


@pytest.mark.parametrize("pyproject", [CONFIGURED, UNCONFIGURED], ids=["configured", "unconfigured"])
@pytest.mark.parametrize("stand_in", [STAND_IN_MODULE, STAND_IN_MOCK], ids=["module", "magicmock"])
def test_a_stand_in_ray_is_never_called(tmp_path: Path, pyproject: str, stand_in: str) -> None:
    """A stand-in in sys.modules["ray"]: every test passes (no teardown error from the
    tracker's cluster reading, no "previous item was not torn down properly"), log_max_mem
    works, and the harness's leak check and results file are unaffected."""
    root = _project(tmp_path, pyproject, stand_in)
    args = ["-n", "2"] if pyproject == CONFIGURED and stand_in == STAND_IN_MODULE else []
    proc, ray_tmp = _run(root, *args, expect="no-ray,stand-in")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0 and "2 passed" in proc.stdout, out
    assert "error" not in proc.stdout.lower() and "torn down" not in out, out
    assert not list(ray_tmp.rglob("session_*"))
    if args:  # the controller imported the project's conftest too: its `ray` is no Ray
        assert "without a shared Ray cluster (sys.modules['ray'] is not Ray but a stand-in (module))" in out
    assert (root / "out" / "unit_results.json").is_file() == (pyproject == CONFIGURED), out


# --- real_ray: the check itself (no run) ---------------------------------------------------


def test_real_ray_is_ray_and_nothing_else(tmp_path: Path) -> None:
    import ray

    assert real_ray.is_ray(ray)
    shadow = tmp_path / "ray"
    shadow.mkdir()
    (shadow / "__init__.py").write_text("def is_initialized():\n    return True\n")
    spec = importlib.util.spec_from_file_location("ray", shadow / "__init__.py")
    assert spec is not None and spec.loader is not None
    package = importlib.util.module_from_spec(spec)  # a `ray` folder of a project's own
    spec.loader.exec_module(package)
    stand_ins = [None, types.ModuleType("ray"), mock.MagicMock(), mock.MagicMock(spec=types.ModuleType), package]
    assert not any(real_ray.is_ray(m) for m in stand_ins)


@pytest.mark.parametrize(
    "stand_in", [None, types.ModuleType("ray"), mock.MagicMock()], ids=["blocked", "module", "mock"]
)
def test_real_ray_never_calls_a_stand_in(monkeypatch: pytest.MonkeyPatch, stand_in: object) -> None:
    monkeypatch.setitem(sys.modules, "ray", stand_in)
    assert real_ray.imported() is None and real_ray.connected() is None
    ray, why_not = real_ray.load()
    assert ray is None and "ray" in why_not.lower()
    if isinstance(stand_in, mock.MagicMock):
        stand_in.assert_not_called()
        assert stand_in.method_calls == []


def test_real_ray_load_says_why_when_ray_is_not_installed(tmp_path: Path) -> None:
    code = textwrap.dedent(
        """
        import sys, sysconfig
        # The standard library and the harness only: no installed package (a GPU machine's Ray
        # may come from a plain directory on PYTHONPATH, not from a site-packages).
        stdlib = (sysconfig.get_path("stdlib"), sysconfig.get_path("platstdlib"))
        sys.path = [p for p in sys.path if p == TOOLS_PY or (
            p.startswith(stdlib) and "-packages" not in p) or p.endswith(".zip")]
        from testharness import real_ray
        assert real_ray.imported() is None and real_ray.connected() is None
        ray, why = real_ray.load()
        assert ray is None, ray
        print(why)
        """
    )
    # The harness package alone on the path (where it was installed from a wheel, its folder
    # also holds the other packages, Ray among them).
    tools_py = tmp_path / "harness_only"
    tools_py.mkdir()
    (tools_py / "testharness").symlink_to(Path(testharness.__file__).resolve().parent)
    env = {**os.environ, "PYTHONPATH": str(tools_py)}
    code = f"TOOLS_PY = {str(tools_py)!r}\n" + code
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "Ray cannot be imported: No module named 'ray'"
