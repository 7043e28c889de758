"""Root conftest: loads the harness's pytest plugins for every pytest run in this repo.

The harness lives in tools/py (installed by `uv sync`); on a machine without uv it is
enough to have this checkout, so fall back to importing it from the source tree.
"""

import sys
from pathlib import Path

try:
    import testharness  # noqa: F401
except ImportError:  # tools/py not installed: use it from the checkout
    sys.path.insert(0, str(Path(__file__).parent / "tools" / "py"))

pytest_plugins = ["testharness.plugin"]
