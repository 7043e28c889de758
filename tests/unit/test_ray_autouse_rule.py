"""Which test files get upstream's Ray fixtures unasked: those that import Ray at module level,
directly or through the modules they import (conftest's `_ray_for_files_that_import_it`).

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
