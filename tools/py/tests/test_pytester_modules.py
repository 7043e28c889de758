"""pytester's `sys.modules` restore leaves no gap for a thread that imports (pytester_modules.py).

Each case runs in a process of its own: the gap of pytest's restore would break the `_io` of
the process it happens in."""

import subprocess
import sys
from pathlib import Path

import pytest

# A profile function runs at every call and return, C functions included, so it stands for
# another thread taking the GIL at any of those points: where `_io` is missing, it imports it,
# as that thread's next import would. Then: does `io.BytesIO().fileno()` still raise the
# `io.UnsupportedOperation` that torch catches?
SCRIPT = """
import io, sys
sys.path.insert(0, sys.argv[2])
from _pytest.pytester import SysModulesSnapshot
import pytester_modules
if sys.argv[1] == "harness":
    pytester_modules.install()

def another_thread_imports(frame, event, arg):
    if "_io" not in sys.modules:
        import _io  # noqa: F401

snapshot = SysModulesSnapshot()
sys.setprofile(another_thread_imports)
snapshot.restore()
sys.setprofile(None)
try:
    io.BytesIO().fileno()
except io.UnsupportedOperation:
    print("caught")
except Exception as e:
    print("foreign", type(e).__module__, type(e).__name__)
"""


@pytest.mark.parametrize(("restore", "expected"), [("pytest", "foreign"), ("harness", "caught")])
def test_a_thread_importing_during_a_restore_keeps_the_io_module(restore: str, expected: str) -> None:
    # pytest's own restore shows the failure first, so that the harness's passing means something.
    run = subprocess.run(
        [sys.executable, "-c", SCRIPT, restore, str(Path(__file__).parent)],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert run.stdout.split()[0] == expected, run.stdout + run.stderr


def test_this_suite_restores_with_it() -> None:
    # Installed by this directory's conftest for every pytester run of the harness's own tests.
    from _pytest.pytester import SysModulesSnapshot
    from pytester_modules import restore_in_place

    assert SysModulesSnapshot.restore is restore_in_place
