"""Precision of remote-aware selection: the run-time reach record, with real Ray actors.

A worker reports the functions it ran; a body edit selects exactly the tests that sent the
code to a worker, where the import graph alone would select every test that imports it.
The other scenarios: test_remote_select_plugin.py (edits, interrupts, import kinds) and
test_remote_select_state.py (damaged, moved or concurrent records).

The first inner run starts Ray in a fixture of its own (that Ray's processes do not make its
test opaque is asserted there); the later runs that use Ray join one cluster that a helper
process holds (`shared_head`, through RAY_ADDRESS): two Ray starts instead of three.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
from selection_project import PYPROJECT, STATE_FILE, Project
from xdist_project import Head

# The token of the helper's cluster (xdist_project.shared_head), under the HOME it started in:
# an inner run's HOME is pytester's folder.
RAY_TOKEN = Path.home() / ".ray" / "auth_token"

pytest_plugins = ["pytester"]

RAY_FILES = {
    "mylib/__init__.py": "",
    "mylib/helper.py": """
        SCALE = 2


        def scale(x):
            return x * SCALE
    """,
    "mylib/worker.py": """
        from mylib.helper import scale


        class Doubler:
            def run(self, x):
                return scale(x)


        def describe():
            return "doubler"
    """,
    "mylib/unrelated.py": """
        def tag():
            return "t"
    """,
    "tests/conftest.py": """
        import os

        import pytest


        @pytest.fixture(scope="session")
        def ray_session():
            import ray

            if os.environ.get("RAY_ADDRESS"):  # the cluster the outer test holds
                ray.init(log_to_driver=False)
            else:
                ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False)
            yield
            ray.shutdown()
    """,
    "tests/test_actor.py": """
        import pytest
        import ray

        from mylib import unrelated  # noqa: F401  (in the static closure, never sent to a worker)
        from mylib.worker import Doubler


        @pytest.fixture(scope="module")
        def doubler(ray_session):
            return ray.remote(Doubler).remote()


        def test_run(doubler):
            assert ray.get(doubler.run.remote(3)) == 6
    """,
    "tests/test_describe.py": """
        from mylib.worker import describe


        def test_describe():
            assert describe() == "doubler"
    """,
}
RUN, DESCRIBE = "tests/test_actor.py::test_run", "tests/test_describe.py::test_describe"


def test_reach_record_selects_the_tests_that_sent_the_code_to_a_ray_worker(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, shared_head: Head
) -> None:
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(pytester.path), os.environ.get("PYTHONPATH", "")]))
    monkeypatch.setenv("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0")  # workers use this interpreter
    monkeypatch.delenv("RAY_ADDRESS", raising=False)  # the first run: a cluster of its own
    pytester.makefile(".toml", pyproject=PYPROJECT)
    proj = Project(pytester.path, pytester)
    for rel, text in RAY_FILES.items():
        proj.write(rel, text)
    result, ran = proj.run()
    assert ran == {RUN: "PASSED", DESCRIBE: "PASSED"}, result.stdout.str()
    state = json.loads((proj.path / STATE_FILE).read_text())
    reach = {n: [e.partition("#")[0] for e in state["reach_lists"][rid]] for n, rid in state["reach"].items()}
    # The actor was created by a module fixture and started with ray.init (Ray's own
    # processes do not make the test opaque); its worker reported the functions it ran (what
    # its imports ran is left to the import digests of the actor module's closure, "@...");
    # test_describe sent nothing anywhere. Python 3.12+ (sys.monitoring) also sees the worker
    # run the modules' bodies as it imports them ("::<module>": import-time code, so only
    # import digests count for it); the 3.11 profiler pauses during imports.
    expected = ["@mylib/worker.py", "mylib/helper.py::scale", "mylib/worker.py::Doubler.run"]
    if sys.version_info >= (3, 12):
        expected += [f"mylib/{name}.py::<module>" for name in ("__init__", "helper", "worker")]
    assert reach == {RUN: sorted(expected), DESCRIBE: []}
    # The later runs join the helper's cluster. A joiner sends Ray's token only when told to
    # (as in xdist_project.env_for), and reads it under its HOME, which pytester moved.
    monkeypatch.setenv("RAY_ADDRESS", shared_head.address)
    monkeypatch.setenv("RAY_AUTH_MODE", "token")
    monkeypatch.setenv("RAY_TMPDIR", shared_head.ray_tmpdir)
    monkeypatch.setenv("RAY_AUTH_TOKEN_PATH", str(RAY_TOKEN))

    # A body edit in code that runs only in the actor: testmon alone misses it; the reach
    # adds exactly the test that sent the worker (test_describe's static closure has it too).
    proj.edit("mylib/helper.py", "return x * SCALE", "return SCALE * x")
    _, ran = proj.run(plugin=False)
    assert ran == {}
    result, ran = proj.run()
    assert ran == {RUN: "PASSED"}, result.stdout.str()

    # A body edit in the actor's module, in a function the actor never ran: only the test
    # that runs it in the pytest process (testmon's choice).
    proj.edit("mylib/worker.py", 'return "doubler"', 'return "doub" + "ler"')
    result, ran = proj.run()
    assert ran == {DESCRIBE: "PASSED"}, result.stdout.str()

    # A body edit in a module the test imports but never sent to a worker: nothing runs.
    proj.edit("mylib/unrelated.py", 'return "t"', 'return "u"')
    result, ran = proj.run()
    assert ran == {}, result.stdout.str()

    # Import-time code (a module constant) counts for every test whose imports reach it.
    proj.edit("mylib/helper.py", "SCALE = 2", "SCALE = 3")
    result, ran = proj.run()
    assert ran == {RUN: "FAILED", DESCRIBE: "PASSED"}, result.stdout.str()
