"""Edit-to-result time with `pytest --testmon`: no edit, and an edit to a module that runs
only inside a Ray actor, against running everything.

Works on a COPY of the repository (the real tree, its .testmondata and its remote-selection
files are never touched); the copy imports its own `nemo_rl` and `testharness` (PYTHONPATH
puts it before the editable installs of the venv) and uses the same interpreter.

    1. seed:      pytest --testmon PATHS      (runs everything once: builds .testmondata + map)
    2. no edit:   pytest --testmon PATHS      (target: <= 5 s wall, no Ray start)
    3. edit:      append an unused function to --edit FILE, pytest --testmon PATHS
                  (target: only the tests whose code reaches FILE run)
    4. baseline:  pytest PATHS without testmon (running everything the ordinary way)

Ray starts are counted as the Ray session directories created in a fresh RAY_TMPDIR. The runs
record their results in the copy as a checkout does, so from the second run on, `-n` hands out
files longest first by the durations recorded before (the seed has no history).

    uv run --group test python bench/edit_to_result.py                      # tests/unit
    uv run --group test python bench/edit_to_result.py tests/unit/environments tests/unit/algorithms/test_grpo.py
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _bench_common import (  # noqa: E402
    LONG_TEST_PROBE,
    PHASE_PROBE,
    ROOT,
    TEST_PHASE,
    machine,
    md_table,
    print_table,
    read_probe,
    today,
    update_section,
)

SECTION = "edit-to-result"
TARGET_NOEDIT_S = 5.0
DEFAULT_EDIT = "nemo_rl/environments/math_environment.py"
EDIT_TEXT = "\n\ndef _edit_to_result_bench_unused() -> int:\n    return 1\n"


def edited_source(text: str, function: str | None) -> str:
    """The module with the bench's edit: an unused function appended, or with `function`
    (a qualified name, `Class.method`) a no-op first statement in that function's body, a
    one-line edit inside it (inside a Ray actor when the class is one)."""
    if not function:
        return text + EDIT_TEXT
    import ast

    node: ast.AST = ast.parse(text)
    for part in function.split("."):
        node = next(
            n for n in ast.iter_child_nodes(node)
            if isinstance(n, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == part
        )  # fmt: skip
    body = node.body  # type: ignore[attr-defined]
    first = (
        body[1]
        if len(body) > 1 and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
        else body[0]
    )
    lines = text.splitlines(keepends=True)
    indent = " " * first.col_offset
    lines.insert(first.lineno - 1, f"{indent}_edit_to_result_bench = 1  # noqa: F841\n")
    return "".join(lines)


# Not copied: environments, caches and every selection/results artifact of the real tree.
IGNORE = shutil.ignore_patterns(
    ".venv",
    ".git",
    "__pycache__",
    "*.pyc",
    ".pytest_cache",
    ".mypy_cache",
    ".ruff_cache",
    ".testmondata*",
    ".nrl_remote_map.json",
    ".nrl_remote_state.json",
    ".coverage*",
    "unit_results",
    "unit_results.json",
    "results",
    "logs",
    "checkpoints",
)


@dataclass
class Run:
    label: str
    wall_s: float
    exit_code: int
    ran: list[str] = field(default_factory=list)
    ray_starts: int = 0
    summary: str = ""
    first_test_s: float | None = None  # --phases: from the start to the first test's setup
    after_tests_s: float | None = None  # --phases: from the last test's teardown to the end


def test_span(probe_log: Path, started: float) -> tuple[float, float] | None:
    """(first test's start, last test's end) in seconds after `started`, from phase_probe's
    per-test records of every process of the run; None without any."""
    spans = [(r["start"], r["end"]) for r in read_probe(probe_log) if r.get("phase") == TEST_PHASE]
    if not spans:
        return None
    return min(s for s, _ in spans) - started, max(e for _, e in spans) - started


def copy_repo(dest: Path) -> Path:
    repo = dest / "repo"
    shutil.copytree(ROOT, repo, ignore=IGNORE, symlinks=True)
    return repo


def run_pytest(
    repo: Path,
    label: str,
    args: list[str],
    timeout: int,
    logs: Path | None = None,
    phases: bool = False,
    trace: bool = False,
) -> Run:
    ray_tmp = Path(tempfile.mkdtemp(prefix="ray_e2r_", dir="/tmp"))
    junit = Path(tempfile.mkdtemp(prefix="e2r_junit_")) / "junit.xml"
    probe_log = junit.parent / "phases.jsonl"
    # Results and their history where a checkout keeps them (the copy's tests/unit): every run
    # after the seed plans `-n`'s file order with the durations recorded before it, as a
    # developer's runs do.
    env = {k: v for k, v in os.environ.items() if k not in ("TESTHARNESS_RESULTS_DIR", "TESTHARNESS_HISTORY_DIR")}
    env["RAY_TMPDIR"] = str(ray_tmp)
    # The copy's packages first; the rest of PYTHONPATH stays (a machine without uv has its
    # test tools there).
    probe = [str(PHASE_PROBE)] if phases else []  # every process of the run times its tests (phase_probe)
    name = re.sub(r"[^A-Za-z0-9]+", "_", label).strip("_")[:60]
    if trace and logs is not None:  # every process's timeline, kept beside the run's log
        logs.mkdir(parents=True, exist_ok=True)
        probe.insert(0, str(LONG_TEST_PROBE))
        env["LONG_TEST_LOG"] = str(logs / f"{len(list(logs.glob('*.log'))):02d}_{name}.trace.jsonl")
    env["PYTHONPATH"] = os.pathsep.join(
        [*probe, str(repo), str(repo / "tools" / "py"), *filter(None, [env.get("PYTHONPATH")])]
    )
    if phases:
        env["PHASE_LOG"] = str(probe_log)
    env.pop("RAY_ADDRESS", None)
    # Keep the cache provider: testmon 2.2 reads its --lf option (KeyError 'lf' without it).
    cmd = [sys.executable, "-m", "pytest", "-q", f"--junitxml={junit}", *args]
    print(f"edit_to_result: [{label}] pytest {' '.join(args)}", flush=True)
    started = time.time()
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(cmd, cwd=repo, env=env, capture_output=True, text=True, timeout=timeout)
        code, out = proc.returncode, proc.stdout
        if code not in (0, 1, 5):  # usage or internal error: show why, the numbers are void
            print(
                f"edit_to_result: [{label}] pytest exit {code}:\n{(proc.stdout + proc.stderr)[-3000:]}", file=sys.stderr
            )
    except subprocess.TimeoutExpired:
        code, out = -1, ""
    wall = time.perf_counter() - t0
    for line in out.splitlines():  # a failure is part of the answer: name it
        if line.startswith(("FAILED ", "ERROR ")):
            print(f"edit_to_result: [{label}] {line}", flush=True)
    if logs is not None:
        logs.mkdir(parents=True, exist_ok=True)
        (logs / f"{len(list(logs.glob('*.log'))):02d}_{name}.log").write_text(out)
    run = Run(label=label, wall_s=wall, exit_code=code)
    span = test_span(probe_log, started) if phases else None
    if span is not None:
        run.first_test_s, run.after_tests_s = span[0], wall - span[1]
    lines = [ln for ln in out.splitlines() if ln.strip()]
    run.summary = lines[-1].strip("= ") if lines else ""
    try:
        root = ET.parse(junit).getroot()
        for case in root.iter("testcase"):
            skipped = case.find("skipped") is not None
            if not skipped:
                run.ran.append(f"{case.get('classname', '')}::{case.get('name', '')}")
    except (OSError, ET.ParseError):
        pass
    run.ray_starts = sum(1 for p in ray_tmp.rglob("session_2*") if p.is_dir() and not p.is_symlink())
    shutil.rmtree(ray_tmp, ignore_errors=True)
    shutil.rmtree(junit.parent, ignore_errors=True)
    return run


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("paths", nargs="*", default=["tests/unit"], help="test paths (default tests/unit)")
    ap.add_argument("--edit", default=DEFAULT_EDIT, help=f"module to edit in the copy (default {DEFAULT_EDIT}); "
                    "FILE::Class.method edits one line inside that method")  # fmt: skip
    ap.add_argument("-n", dest="workers", default=None, help="pytest-xdist workers for every run (e.g. auto)")
    ap.add_argument("--timeout", type=int, default=1800, help="seconds per pytest run")
    ap.add_argument("--no-baseline", action="store_true", help="skip the plain run without testmon")
    ap.add_argument("--keep", action="store_true", help="keep the copy (its path is printed)")
    ap.add_argument("--no-docs", action="store_true", help="print only; do not touch docs/benchmarks.md")
    ap.add_argument("--logs", type=Path, help="write each run's pytest output (with --durations=15) to this folder")
    ap.add_argument("--phases", action="store_true", help="time each run's start (to its first test) and end "
                    "(after its last test) with bench/phase_probe in every process")  # fmt: skip
    ap.add_argument("--trace", action="store_true", help="with --logs: keep every process's timeline "
                    "(bench/long_test_probe: imports, Ray, actors, pytest phases) as NN_RUN.trace.jsonl")  # fmt: skip
    args = ap.parse_args(argv)
    if args.trace and args.logs is None:
        ap.error("--trace needs --logs DIR (the timelines are kept there)")
    edit_file, _, edit_function = args.edit.partition("::")
    target = ROOT / edit_file
    if not target.is_file():
        print(f"edit_to_result: --edit {args.edit}: no such file in the repository", file=sys.stderr)
        return 2
    for p in args.paths:
        if not (ROOT / p.split("::", 1)[0]).exists():
            print(f"edit_to_result: test path {p!r} does not exist", file=sys.stderr)
            return 2
    tmp = Path(tempfile.mkdtemp(prefix="edit_to_result_"))
    runs: list[Run] = []
    try:
        repo = copy_repo(tmp)
        xdist = ["-n", args.workers] if args.workers else []
        tm = ["--testmon", *xdist, *(["--durations=15"] if args.logs else []), *args.paths]

        def run(label: str, pytest_args: list[str]) -> Run:
            return run_pytest(repo, label, pytest_args, args.timeout, args.logs, args.phases, args.trace)

        runs.append(run("seed (--testmon, first run)", tm))
        runs.append(run("no edit (--testmon)", tm))
        edited = repo / edit_file
        original = edited.read_bytes()
        edited.write_text(edited_source(original.decode(), edit_function or None))
        try:
            runs.append(run(f"edit {args.edit} (--testmon)", tm))
        finally:
            edited.write_bytes(original)  # the copy is restored exactly (and then deleted)
        runs.append(run("restored, again (--testmon)", tm))
        if not args.no_baseline:
            runs.append(run("everything (no testmon)", [*xdist, *args.paths]))
    finally:
        if args.keep:
            print(f"edit_to_result: copy kept at {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    header = ["run", "wall", "tests run", "Ray starts", "pytest summary"]
    rows = [[r.label, f"{r.wall_s:.1f} s", len(r.ran), r.ray_starts, f"{r.summary} (exit {r.exit_code})"] for r in runs]
    if args.phases:  # where the wall went outside the tests
        header[2:2] = ["to the first test", "after the last test"]
        for row, r in zip(rows, runs, strict=True):
            row[2:2] = [f"{v:.1f} s" if v is not None else "-" for v in (r.first_test_s, r.after_tests_s)]
    print_table("Edit to result", header, rows)
    noedit, edit = runs[1], runs[2]
    ok = noedit.wall_s <= TARGET_NOEDIT_S and noedit.ray_starts == 0
    edit_files = sorted({t.split("::", 1)[0] for t in edit.ran})
    notes = [
        f"no edit: {noedit.wall_s:.1f} s, {len(noedit.ran)} tests, {noedit.ray_starts} Ray start(s) "
        f"(target <= {TARGET_NOEDIT_S:g} s and no Ray start: "
        + (
            "met"
            if ok
            else f"MISSED{f' by {noedit.wall_s - TARGET_NOEDIT_S:.1f} s' if noedit.wall_s > TARGET_NOEDIT_S else ''}"
        )
        + ")",
        f"edit to `{args.edit}`: {len(edit.ran)} tests ran, from: "
        + (", ".join(f"`{f}`" for f in edit_files) or "none"),
    ]
    base = runs[-1] if not args.no_baseline else runs[0]
    notes.append(f"vs running everything: {base.wall_s:.1f} s, {len(base.ran)} tests ({base.label})")
    for n in notes:
        print(n.replace("`", ""))
    scope = " ".join(args.paths)
    body = [
        "## Edit-to-result time with testmon (bench/edit_to_result.py)",
        "",
        f"Measured {today()} on {machine()}, with `uv run --group test python bench/edit_to_result.py"
        f"{'' if args.paths == ['tests/unit'] else ' ' + scope}` on a copy of the repository "
        f"(test paths: `{scope}`{'; -n ' + args.workers if args.workers else ''}; the edit: "
        + (
            f"one line inside `{edit_function}` of `{edit_file}`)."
            if edit_function
            else f"an unused function appended to `{edit_file}`)."
        ),
        "",
        md_table(header, rows),
        "",
        *[f"- {n}" for n in notes],
    ]
    if not args.no_docs:
        update_section(SECTION, "\n".join(body) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
