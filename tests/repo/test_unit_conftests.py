"""The library suite's conftest files import no heavy library at module level (issue 36).

pytest loads every conftest.py of a folder it walks, also in a `--testmon` run that collects
none of that folder's test files. tests/unit/models/megatron/conftest.py imported torch, so
the no-change run paid the torch import for nothing: 5.3 s of wall on the 2-core box, 1.4 s
without it (5.4 s for torch alone on the H200).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CONFTESTS = sorted(REPO.glob("tests/unit/**/conftest.py"))
HEAVY = ("torch", "transformers", "megatron", "ray", "nemo_rl")


def test_the_library_suite_has_conftests_to_check() -> None:
    assert REPO / "tests" / "unit" / "models" / "megatron" / "conftest.py" in CONFTESTS


@pytest.mark.parametrize("conftest", CONFTESTS, ids=lambda p: p.relative_to(REPO).as_posix())
def test_loading_a_conftest_imports_no_heavy_library(conftest: Path) -> None:
    module = ".".join(conftest.relative_to(REPO).with_suffix("").parts)
    probe = f"import sys, {module}; print(','.join(m for m in {HEAVY!r} if m in sys.modules))"
    proc = subprocess.run([sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "", f"{module} imports {proc.stdout.strip()} when pytest loads it"
