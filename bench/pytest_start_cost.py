"""CPU cost of one inner pytest start with the harness's plugin (issue 60): the harness suite
starts ~340 of them per run and CI runs it three times, beside the other suites.

A tiny project (`[tool.testharness]`, one passing test; the plugins foreign to the harness
blocked, as in the harness suite's inner runs) is run with `python -m pytest -q`. Each row is a
copy of a harness put first on PYTHONPATH: this checkout's working tree, and with `--against
REF` that commit's (e.g. main); a copy holds no bytecode until a row's own run writes it.

    plugin import    CPU ms of importing the plugin as pytest does (testharness.plugin, then
                     every module a loaded module's `pytest_plugins` names), after `import
                     pytest`, in a fresh `python -c`, from source
    pytest, cold     CPU s (user + sys) of the whole pytest process, PYTHONDONTWRITEBYTECODE=1
                     and no bytecode of the harness: as CI runs the repository and library suites
    pytest, cached   the same once one pytest wrote the harness's bytecode (assert-rewritten):
                     as the harness suite's inner runs, after its conftest's first pytest

Medians of --runs, interleaved between the rows so that a shared machine's load hits each alike.

    uv run --group test python bench/pytest_start_cost.py [--runs 10] [--against main] [--no-docs]

Prints a table and writes it to docs/benchmarks.md, section "pytest-start-cost", unless --no-docs.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _bench_common import ROOT, machine, md_table, print_table, today, update_section  # noqa: E402

sys.path.insert(0, str(ROOT / "tools" / "py" / "tests"))
from inner_plugins import blocking_addopts, foreign_plugins, installed_plugins  # noqa: E402

SECTION = "pytest-start-cost"
PYPROJECT = '[tool.testharness]\nresults_dir = "out"\ntest_roots = ["tests"]\n'
IMPORT_AS_PYTEST_DOES = """
import importlib, time
import pytest
began = time.process_time()
def load(name):
    for sub in getattr(importlib.import_module(name), "pytest_plugins", ()):
        load(sub)
load("testharness.plugin")
print((time.process_time() - began) * 1000)
"""


def harness_copy(dest: Path, ref: str | None) -> Path:
    """A copy of tools/py/testharness (the working tree's, or commit `ref`'s) without bytecode;
    returns the folder to put on PYTHONPATH."""
    if ref is None:
        shutil.copytree(
            ROOT / "tools/py/testharness", dest / "testharness", ignore=shutil.ignore_patterns("__pycache__")
        )
        return dest
    dest.mkdir(parents=True)
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", "--format=tar", ref, "tools/py/testharness"],
        capture_output=True,
        check=True,
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True)
    return dest / "tools" / "py"


def environment(harness: Path, write_bytecode: bool) -> dict[str, str]:
    """This environment with `harness` first on PYTHONPATH, the foreign plugins blocked, and
    none of the variables that would send an inner run's record elsewhere."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TESTHARNESS_") and not k.startswith("COVERAGE_")}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(harness), os.environ.get("PYTHONPATH", "")) if p)
    env["PYTEST_ADDOPTS"] = blocking_addopts(foreign_plugins(installed_plugins()))
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    if not write_bytecode:
        env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def pytest_cpu_s(project: Path, env: dict[str, str]) -> float:
    """CPU seconds (user + sys) of one pytest in `project`, which must pass."""
    before = children_cpu_s()
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:randomly", "-p", "no:cacheprovider"],
        cwd=project, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    took = children_cpu_s() - before
    if proc.returncode != 0:
        raise RuntimeError(f"pytest failed in {project} (exit {proc.returncode}):\n{proc.stdout[-2000:]}{proc.stderr}")
    return took


def import_cpu_ms(env: dict[str, str]) -> float:
    out = subprocess.run(
        [sys.executable, "-c", IMPORT_AS_PYTEST_DOES], env=env, capture_output=True, text=True, check=True
    )
    return float(out.stdout.strip().splitlines()[-1])


def make_project(path: Path) -> Path:
    (path / "tests").mkdir(parents=True)
    (path / "pyproject.toml").write_text(PYPROJECT)
    (path / "tests" / "test_one.py").write_text("def test_one():\n    assert 1 + 1 == 2\n")
    return path


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=10, help="runs of each measurement (default 10)")
    ap.add_argument("--against", metavar="REF", help="also measure the harness of this commit (e.g. main)")
    ap.add_argument("--no-docs", action="store_true", help="print only; do not touch docs/benchmarks.md")
    args = ap.parse_args()
    if args.runs < 1:
        ap.error("--runs must be >= 1")

    rows_of: dict[str, str | None] = {"this checkout": None}
    if args.against:
        sha = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", args.against], capture_output=True,
                             text=True, check=True).stdout.strip()  # fmt: skip
        rows_of[f"{args.against} ({sha})"] = args.against
    samples: dict[tuple[str, str], list[float]] = {}
    with tempfile.TemporaryDirectory(prefix="pytest_start_cost_") as tmp:
        cold: dict[str, tuple[Path, Path]] = {}  # name: (harness on PYTHONPATH, project)
        cached: dict[str, tuple[Path, Path]] = {}
        for i, (name, ref) in enumerate(rows_of.items()):
            base = Path(tmp, str(i))
            cold[name] = (harness_copy(base / "cold", ref), make_project(base / "cold_project"))
            cached[name] = (harness_copy(base / "cached", ref), make_project(base / "cached_project"))
            pytest_cpu_s(cached[name][1], environment(cached[name][0], write_bytecode=True))  # writes its bytecode
        for run in range(args.runs):
            for name in rows_of:
                harness, project = cold[name]
                samples.setdefault((name, "import"), []).append(import_cpu_ms(environment(harness, False)))
                samples.setdefault((name, "cold"), []).append(pytest_cpu_s(project, environment(harness, False)))
                harness, project = cached[name]
                samples.setdefault((name, "cached"), []).append(pytest_cpu_s(project, environment(harness, False)))
            print(f"pytest_start_cost: run {run + 1}/{args.runs} done", flush=True)

    def median(name: str, what: str) -> float:
        return statistics.median(samples[(name, what)])

    header = ["harness", "plugin import (CPU ms)", "pytest, cold (CPU s)", "pytest, cached (CPU s)"]
    rows = [
        [name, f"{median(name, 'import'):.0f}", f"{median(name, 'cold'):.2f}", f"{median(name, 'cached'):.2f}"]
        for name in rows_of
    ]
    print_table(f"One inner pytest start, medians of {args.runs} runs", header, rows)
    command = " ".join([Path(sys.executable).name, *sys.argv])
    body = (
        "## One inner pytest start (bench/pytest_start_cost.py, issue 60)\n\n"
        f"Measured {today()} on {machine()}, with `{command}`: a tiny configured project, one "
        f"passing test, medians of {args.runs} runs (CPU, user + sys).\n\n" + md_table(header, rows) + "\n"
    )
    if not args.no_docs:
        update_section(SECTION, body)
    print(body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
