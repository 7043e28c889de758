"""Every file a usage text names exists: the --help of each entry point (bash and Python).

A path with a folder must exist from the repository root, from tests/ (where upstream-style
`functional/sft.sh` and `unit/...` are relative to), or from the script's own folder; a bare
file name must be a file of the repository. Placeholders (`functional/<test>.sh`,
`tests/functional/sft/{logs/,run.log}`) and metavars (`FILE.py`) are not paths and are skipped.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from testharness import __main__ as cli
from testharness import unit_runner
from testharness.settings import load_settings

REPO = Path(__file__).resolve().parents[2]
SCRIPTS = sorted(
    {
        *REPO.glob("tests/*.sh"),
        *(p for p in REPO.glob("tests/functional/*.sh") if p.name != "common.sh"),
        REPO / "docker" / "build.sh",
    }
)
# Words that only look like files: run_all.sh's "(name, name.sh or path)".
PLACEHOLDERS = {"name.sh"}
PATH = re.compile(r"(?<![\w/.<>{}$-])((?:\.{0,2}/)?(?:[\w.-]+/)*[\w-]+\.(?:sh|py|md|toml|ya?ml))(?![\w/<>{}])")


def named_paths(text: str) -> list[str]:
    """File-like words, metavars (`FILE.py`, `OUT.json`) left out."""
    return [p for p in PATH.findall(text) if not Path(p).stem.isupper()]


def test_the_pattern_finds_paths_and_skips_placeholders() -> None:
    text = (
        "Usage: bash tests/run_unit.sh [run_unit.sh args] e.g. functional/sft.sh, see docs/docker.md). "
        "functional/<test>.sh tests/functional/sft/{logs/,run.log,metrics.json} FILE.py::TEST $X/y.sh"
    )
    assert named_paths(text) == ["tests/run_unit.sh", "run_unit.sh", "functional/sft.sh", "docs/docker.md"]


def _missing(text: str, script_dir: Path) -> list[str]:
    tracked = set(subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True).stdout.split())
    names = {Path(p).name for p in tracked} or {p.name for p in REPO.rglob("*") if ".venv" not in p.parts}
    missing = []
    for path in named_paths(text):
        if path in PLACEHOLDERS:
            continue
        if "/" not in path:
            found = path in names
        else:
            found = any((base / path).exists() for base in (REPO, REPO / "tests", script_dir))
        if not found:
            missing.append(path)
    return missing


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: str(p.relative_to(REPO)))
def test_bash_usage_names_existing_files(script: Path) -> None:
    if script.name == "run_unit.sh":
        settings = load_settings(REPO)
        text = unit_runner.usage(settings.marker_groups)
    else:
        env = {k: v for k, v in os.environ.items() if k != "CONTAINER"}
        proc = subprocess.run(
            ["bash", str(script), "--help"], cwd=REPO, env=env, capture_output=True, text=True, timeout=60
        )
        assert proc.returncode == 0, proc.stderr
        text = proc.stdout
    assert named_paths(text), f"{script.name} --help names no file: is the pattern still right?"
    assert _missing(text, script.parent) == []


@pytest.mark.parametrize("command", ["", "report", "check-metrics", "tb-dump", "explain"])
def test_python_usage_names_existing_files(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        cli.main([command, "--help"] if command else ["--help"])
    text = capsys.readouterr().out + (sys.modules["testharness.__main__"].__doc__ or "")
    assert _missing(text, REPO / "tests") == []
