"""Which test files get upstream's Ray fixtures unasked: those that import Ray at module level,
directly or through the modules they import, or that use a fixture defined in a file of the suite
that does (conftest's `needs_ray`).

Its own file, apart from test_upstream_fixtures.py: importing library modules by name here
puts them in this file's static closure, and that file's distributed_test_runner tests start
processes, so a change anywhere in that closure selects them.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

LIBRARY_FILES = {  # module -> source: which of these does importing them import Ray through?
    "lib.__init__": "",
    "lib.cluster": "import ray\n",
    "lib.actors": "from ray.util import placement_group\n",
    "lib.pure": "import os\nimport torch\n",
    "lib.policy": "from lib.cluster import Cluster\n",
    "lib.relative": "from .cluster import Cluster\n",
    "lib.deeper": "import lib.pure\nfrom lib import policy\n",
    "lib.typed": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import ray\nelse:\n    import os\n",
    "lib.lazy": "def start():\n    import ray\n\n\nclass Actor:\n    import ray\n",
    "lib.guarded": "try:\n    import ray\nexcept ImportError:\n    ray = None\n",
    "lib.cycle_a": "import lib.cycle_b\n",
    "lib.cycle_b": "import lib.cycle_a\nimport lib.pure\n",
}


@pytest.mark.parametrize(
    "module, imports_it",
    [
        ("lib.cluster", True),
        ("lib.actors", True),  # a submodule of ray is ray
        ("lib.pure", False),
        ("lib.policy", True),  # through a module that does
        ("lib.relative", True),
        ("lib.deeper", True),  # `from lib import policy`: lib.policy is a module
        ("lib.typed", False),  # only for the type checker
        ("lib.lazy", False),  # when called, not when imported
        ("lib.guarded", True),
        ("lib.cycle_a", False),
    ],
)
def test_a_file_imports_ray_directly_or_through_the_modules_it_imports(
    tmp_path: Path, module: str, imports_it: bool
) -> None:
    from tests.unit.conftest import imports_ray

    sources = {}
    for name, text in LIBRARY_FILES.items():
        path = tmp_path / f"{name.replace('.', '/')}.py"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        sources[name.removesuffix(".__init__")] = path
    assert imports_ray(module, sources[module], source_of=sources.get) is imports_it


@pytest.mark.parametrize(
    "module, imports_it",
    [
        ("nemo_rl.distributed.virtual_cluster", True),
        ("nemo_rl.algorithms.utils", True),  # its Policy runs workers in Ray
        ("nemo_rl.algorithms.loss_functions", False),
        ("nemo_rl.config", False),
    ],
)
def test_the_library_modules_that_import_ray(module: str, imports_it: bool) -> None:
    import importlib

    from tests.unit.conftest import _source_of, imports_ray

    importlib.import_module(module)  # as a test file's import would: what it imports is in sys.modules
    assert imports_ray(module, _source_of(module)) is imports_it


def test_this_file_does_not_import_ray_so_it_gets_no_cluster_unasked() -> None:
    from tests.unit.conftest import module_imports_ray

    assert not module_imports_ray(sys.modules[__name__])


# ------------------------------------------------ a fixture of a sub-folder's conftest.py that uses Ray

# As upstream's data_plane/conftest.py: a session fixture that uses the session's cluster, in a
# conftest that imports Ray (here directly; upstream's through its library), requested by a test
# file that imports nothing of Ray.
SUB_CONFTEST = """\
import pytest
import ray


@pytest.fixture(scope="session")
def _session_client():
    assert ray.is_initialized()  # Ray's API calls would start a cluster of their own, some
    return ray.cluster_resources()["CPU"] > 0  # raise "Ray has not been started yet" instead


@pytest.fixture
def client(_session_client):
    return _session_client
"""
USES_THE_FIXTURE = """\
import sys


def test_the_fixture_found_the_cluster(client):
    assert client is True


def test_a_test_of_that_folder_without_it():
    assert "ray" in sys.modules  # the conftest imported it; the cluster is the session's
"""


def test_a_fixture_of_a_sub_folders_conftest_that_uses_ray_gets_the_sessions_cluster(tmp_path: Path) -> None:
    import os
    import shutil
    import subprocess
    import tempfile

    unit = tmp_path / "tests" / "unit"
    (unit / "data_plane").mkdir(parents=True)
    for package in (tmp_path / "tests", unit, unit / "data_plane"):
        (package / "__init__.py").touch()
    shutil.copy(Path(__file__).with_name("conftest.py"), unit / "conftest.py")
    (unit / "data_plane" / "conftest.py").write_text(SUB_CONFTEST)
    (unit / "data_plane" / "test_client.py").write_text(USES_THE_FIXTURE)
    ray_tmp = Path(tempfile.mkdtemp(prefix="rt", dir="/tmp"))  # Ray's socket paths must stay short
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "COVERAGE_")) and k != "RAY_ADDRESS"}
    env.update(RAY_TMPDIR=str(ray_tmp), TESTHARNESS_NO_DISCOVERY="1")
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:randomly", "-q", "tests/unit"],
            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300,
        )  # fmt: skip
    finally:
        shutil.rmtree(ray_tmp, ignore_errors=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "2 passed" in proc.stdout


def test_which_tests_need_ray_the_file_or_a_fixture_of_the_suite() -> None:
    """`needs_ray` on this session's own items: this file imports no Ray, nor does a fixture it uses."""
    from tests.unit.conftest import needs_ray

    class Item:  # what needs_ray reads of a pytest Function
        module = sys.modules[__name__]
        _fixtureinfo = None

    assert not needs_ray(Item())  # type: ignore[arg-type]
