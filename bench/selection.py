"""Benchmark of remote-aware test selection (prints a table, updates docs/benchmarks.md).

1. Map build: time the import-graph build on generated trees of 600 and 6,000 Python files
   (cold: no map; warm: no change; one-file edit).
2. Mutation benchmark over the real library and its unit tests: for functions found in the
   source packages, insert `raise RuntimeError(...)` at the top of the body, and compare
   selectors: remote-select (testmon + this plugin), testmon alone, and run everything.
     safety = share of failing mutants for which at least one failing test was selected
     cost   = baseline time of the selected tests / baseline time of the full suite
   For each mutant we run the tests the union selector picked; only if none fails do we run
   the rest, to learn whether the mutant fails anything at all (exact for all selectors,
   because testmon's selection is a subset of the union). Beside them, an ideal oracle:
   only the tests that run the changed function, in any process; the mutant raises first
   thing, so those are the tests that fail (the union's failing tests).

    uv run --group test python bench/selection.py                     # everything
    uv run --group test python bench/selection.py --max-mutants 20    # a sample
    uv run --group test python bench/selection.py --skip-mutants      # timings only
    uv run --group test python bench/selection.py -x --mutant nemo_rl/config.py::load_config tests/unit/algorithms
                                      # chosen mutants, library tests only, stop at first failure
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import random
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools" / "py"))

from testharness.remote_select import store  # noqa: E402
from testharness.remote_select.config import SelectConfig, select_config  # noqa: E402
from testharness.remote_select.engine import RemoteSelector  # noqa: E402
from testharness.settings import load_settings  # noqa: E402
from testharness.state_files import SQLITE_SIDE_FILES  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _bench_common import checkout_env, update_section  # noqa: E402

PLUGIN = "testharness.remote_select.plugin"
MARK = "# selection-bench mutant"


# -- 1. generated trees --------------------------------------------------------------------
def generate_tree(root: Path, n_files: int, seed: int = 0) -> SelectConfig:
    """A layered package (2/3 of the files) and tests (1/3) with realistic imports."""
    rng = random.Random(seed)
    n_tests = n_files // 3
    n_src = n_files - n_tests
    per_pkg = 20
    mods: list[str] = []
    for i in range(n_src):
        pkg = f"p{i // per_pkg}"
        if i % per_pkg == 0:
            (root / "gen" / pkg).mkdir(parents=True, exist_ok=True)
            mods.append(f"gen.{pkg}")
            (root / "gen" / pkg / "__init__.py").write_text(f'"""package {pkg}."""\n')
            continue
        mods.append(f"gen.{pkg}.m{i}")
    (root / "gen" / "__init__.py").write_text("")
    for i, mod in enumerate(mods):
        if mod.count(".") == 1:
            continue
        # Locality, as in real code: imports come from the last few packages below.
        lower = mods[max(i - 60, 0) : max(i - 1, 1)]
        lines = ["import os", "from typing import Any", ""]
        for dep in rng.sample(lower, min(len(lower), 4)):
            if dep.count(".") == 2 and rng.random() < 0.5:
                base, name = dep.rsplit(".", 1)
                lines.append(f"from {base} import {name}")
            else:
                lines.append(f"import {dep}")
        if rng.random() < 0.2 and i > 1:
            lines.append(f'ACTOR = "{rng.choice(lower)}.Worker"')
        body = "\n".join(f"def f{j}(x: Any) -> Any:\n    return x + {j}\n" for j in range(8))
        path = root / Path(*mod.split(".")).with_suffix(".py")
        path.write_text("\n".join(lines) + "\n\n" + body + "\nclass Worker:\n    pass\n")
    (root / "tests").mkdir()
    (root / "tests" / "conftest.py").write_text("import pytest\n")
    for t in range(n_tests):
        deps = rng.sample(mods, 3)
        text = "\n".join(f"import {d}" for d in deps) + "\n\n"
        text += "\n".join(f"def test_{j}():\n    assert True\n" for j in range(3))
        (root / "tests" / f"test_g{t}.py").write_text(text)
    return SelectConfig(source_packages=("gen",), test_roots=("tests",))


def time_tree(n_files: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="selbench_") as tmp:
        root = Path(tmp)
        cfg = generate_tree(root, n_files)
        sel = RemoteSelector(root, cfg, store.StateFiles(root / "map.json", root / "state.json"))
        t0 = time.perf_counter()
        plan = sel.plan()
        t1 = time.perf_counter()
        outcomes = {f"{t}::test_{j}": "passed" for t in plan.test_files for j in range(3)}
        sel.finish(plan, outcomes, {})
        t2 = time.perf_counter()
        sel.plan()
        t3 = time.perf_counter()
        target = sorted(root.glob("gen/p0/m*.py"))[0]
        target.write_text(target.read_text() + "\nY = 1\n")
        plan = sel.plan()
        t4 = time.perf_counter()
        n_nodes = len(plan.records)
        return {
            "files": n_files,
            "tests": n_nodes,
            "cold_plan": t1 - t0,
            "cold_write": t2 - t1,
            "warm_nochange": t3 - t2,
            "one_edit": t4 - t3,
            "affected": len(plan.affected_tests),
        }


# -- 2. mutants ----------------------------------------------------------------------------
def discover_mutants(cfg: SelectConfig) -> list[tuple[str, str, int, int]]:
    """(path, qualified name, line to insert before, indent) for every mutable function."""
    out = []
    for src in cfg.source_roots:
        for pkg in cfg.source_packages:
            base = ROOT / src / pkg if src else ROOT / pkg
            for path in sorted(base.rglob("*.py")):
                rel = path.relative_to(ROOT).as_posix()
                tree = ast.parse(path.read_text(encoding="utf-8"))
                stack: list[tuple[ast.AST, str]] = [(tree, "")]
                while stack:
                    node, prefix = stack.pop()
                    for child in ast.iter_child_nodes(node):
                        if isinstance(child, ast.ClassDef):
                            stack.append((child, f"{prefix}{child.name}."))
                        elif isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                            body = child.body
                            if (
                                body
                                and isinstance(body[0], ast.Expr)
                                and isinstance(getattr(body[0], "value", None), ast.Constant)
                            ):
                                body = body[1:]
                            if not body or all(isinstance(b, (ast.Pass, ast.Expr)) for b in body):
                                continue  # abstract / protocol stubs
                            decos = {ast.unparse(d) for d in child.decorator_list}
                            if any("overload" in d or "abstractmethod" in d for d in decos):
                                continue
                            first = body[0]
                            if first.lineno == child.lineno:
                                continue
                            out.append((rel, prefix + child.name, first.lineno, first.col_offset))
    return out


def library_tests(nodeids: set[str], harness_dir: str) -> set[str]:
    """The tests of the library: all but the harness's own (which a library edit rarely
    concerns; their static closures reach nemo_rl only through the shared conftest)."""
    prefix = harness_dir.rstrip("/") + "/"
    return {n for n in nodeids if not n.startswith(prefix)}


def pytest_cmd(*args: str) -> list[str]:
    # No `-p no:cacheprovider`: pytest-testmon 2.2 crashes without the cache plugin.
    return [sys.executable, "-m", "pytest", *args]


def run(cmd: list[str], env: dict[str, str], timeout: int) -> subprocess.CompletedProcess[str]:
    """The command's result; one that runs past `timeout` is killed and answers what it printed
    (a test run that timed out writes no results: its tests count as failing)."""
    try:
        return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        out, err = (x.decode(errors="replace") if isinstance(x, bytes) else (x or "") for x in (exc.stdout, exc.stderr))
        print(f"selection bench: timed out after {timeout} s: {' '.join(cmd[-3:])}", file=sys.stderr, flush=True)
        return subprocess.CompletedProcess(cmd, -9, out, err)


def collected_ids(output: str) -> set[str]:
    return {line.strip() for line in output.splitlines() if "::" in line and not line.startswith(("ERROR", "FAILED"))}


def run_tests(
    ids: list[str], env: dict[str, str], timeout: int, out: Path, workers: list[str], first_failure: bool = False
) -> dict[str, list[object]]:
    if not ids:
        return {}
    args_file = out.with_suffix(".args")
    args_file.write_text("\n".join(ids))
    env = dict(env, SELECTION_BENCH_OUT=str(out))
    stop = ["-x"] if first_failure else []
    run(
        pytest_cmd("-p", "no:testmon", "-p", "bench.selection_durations", "-q", *stop, *workers, f"@{args_file}"),
        env,
        timeout,
    )
    try:
        return dict(json.loads(out.read_text()))
    except (OSError, json.JSONDecodeError):
        return {i: ["failed", 0.0] for i in ids}  # the run crashed: count as failing


def drop_state(path: Path) -> None:
    for p in (path, *(Path(f"{path}{side}") for side in SQLITE_SIDE_FILES)):
        p.unlink(missing_ok=True)


def copy_state(src: Path, dst: Path) -> None:
    """Copy a state file. An SQLite database (pytest-testmon's) goes through SQLite's backup:
    its last writes may still be in its `-wal` side file (after an `-n` run, all of them),
    which a plain copy would leave behind; the destination's side files are dropped."""
    drop_state(dst)
    with open(src, "rb") as fh:
        sqlite = fh.read(16) == b"SQLite format 3\x00"
    if not sqlite:
        shutil.copy2(src, dst)
        return
    source, target = sqlite3.connect(src), sqlite3.connect(dst)
    try:
        source.backup(target)
    finally:
        source.close()
        target.close()


def mutation_benchmark(args: argparse.Namespace, cfg: SelectConfig) -> dict[str, object]:
    env = checkout_env(RAY_TMPDIR=os.environ.get("RAY_TMPDIR", "/tmp/ray_selbench"))
    work = Path(tempfile.mkdtemp(prefix="selbench_run_"))
    keep = [ROOT / ".testmondata", *store.StateFiles.of(load_settings(ROOT))]
    saved = work / "saved"
    saved.mkdir()
    for p in keep:  # the user's own files come back at the end
        if p.exists():
            copy_state(p, saved / p.name)
    tests = args.tests
    try:
        for p in keep:
            drop_state(p)
        # Baseline: a full green run seeds testmon and remote-select and gives durations.
        t0 = time.perf_counter()
        env_b = dict(env, SELECTION_BENCH_OUT=str(work / "base.json"))
        workers = ["-n", args.workers] if args.workers else []
        run(pytest_cmd("--testmon", "-p", "bench.selection_durations", "-q", *workers, *tests), env_b, args.timeout)
        full_wall = time.perf_counter() - t0
        base = json.loads((work / "base.json").read_text())
        passing = {n for n, (o, _) in base.items() if o == "passed"}
        dur = {n: float(d) for n, (o, d) in base.items()}
        # Mutant runs keep the baseline's execution order: some tests rely on an earlier test
        # of their module (a module-scoped fixture's state), so a reordered run fails spuriously.
        order = {n: k for k, n in enumerate(base)}

        def in_order(ids: set[str]) -> list[str]:
            return sorted(ids, key=lambda n: (order.get(n, len(order)), n))

        total = sum(dur[n] for n in passing) or 1.0
        # Second denominator: the library's tests alone, without the harness's own tests.
        lib_tests = library_tests(passing, args.harness_tests)
        lib_total = sum(dur[n] for n in lib_tests) or 1.0
        snap = work / "snap"
        snap.mkdir()
        for p in keep:
            if p.exists():
                copy_state(p, snap / p.name)

        def restore_snapshot() -> None:  # each selection starts from the baseline's state
            for p in keep:
                if (snap / p.name).exists():
                    copy_state(snap / p.name, p)

        mutants = discover_mutants(cfg)
        rng = random.Random(args.seed)
        rng.shuffle(mutants)
        if args.mutants:  # an explicit list, in the order given, then --random more
            by_name = {f"{rel}::{name}": m for m in mutants for rel, name in [m[:2]]}
            unknown = [m for m in args.mutants if m not in by_name]
            if unknown:
                raise SystemExit(f"selection bench: unknown mutant(s): {', '.join(unknown)}")
            chosen = [by_name[m] for m in args.mutants]
            mutants = chosen + [m for m in mutants if m not in chosen][: args.random]
        elif args.max_mutants:
            mutants = mutants[: args.max_mutants]
        rows = []
        for i, (rel, name, line, indent) in enumerate(mutants):
            path = ROOT / rel
            original = path.read_text(encoding="utf-8")
            t_mutant = time.perf_counter()
            lines = original.splitlines(keepends=True)
            lines.insert(line - 1, " " * indent + f'raise RuntimeError("mutant") {MARK}\n')
            try:
                path.write_text("".join(lines), encoding="utf-8")
                restore_snapshot()
                union = collected_ids(
                    run(pytest_cmd("--testmon", "--collect-only", "-q", *tests), env, args.timeout).stdout
                )
                restore_snapshot()
                tm = collected_ids(
                    run(
                        pytest_cmd("--testmon", "--collect-only", "-q", "-p", f"no:{PLUGIN}", *tests), env, args.timeout
                    ).stdout
                )
                union &= passing
                tm &= passing
                # The union runs whole: its failing tests are the oracle's selection (the mutant
                # raises first thing, so a test that runs the function, in any process, fails),
                # and testmon's picks are a subset of it (the plugin only adds), so both safety
                # values are exact. Only when the union fails nothing is the rest run, to learn
                # whether the mutant fails anything (with -x: up to its first failure).
                res = run_tests(in_order(union), env, args.timeout, work / f"m{i}u.json", workers)
                failing: set[str] = {n for n, (o, _) in res.items() if o == "failed"}
                oracle = set(failing)
                if not failing:
                    rest = in_order(passing - union)
                    res = run_tests(
                        rest, env, args.timeout, work / f"m{i}r.json", workers, first_failure=args.first_failure
                    )
                    failing = {n for n, (o, _) in res.items() if o == "failed"}
                    oracle = set(failing)  # missed by the union: at least these (all, without -x)
                row = {
                    "mutant": f"{rel}::{name}",
                    "fails": len(failing),
                    "failed": sorted(failing)[:2],
                    "ours_safe": bool(failing & union),
                    "tm_safe": bool(failing & tm),
                    "ours_cost": sum(dur.get(n, 0.0) for n in union) / total,
                    "tm_cost": sum(dur.get(n, 0.0) for n in tm) / total,
                    "ours_cost_lib": sum(dur.get(n, 0.0) for n in union) / lib_total,
                    "tm_cost_lib": sum(dur.get(n, 0.0) for n in tm) / lib_total,
                    "oracle_cost": sum(dur.get(n, 0.0) for n in oracle) / total,
                    "oracle_cost_lib": sum(dur.get(n, 0.0) for n in oracle) / lib_total,
                }
                rows.append(row)
                print(f"[{i + 1}/{len(mutants)}] {time.perf_counter() - t_mutant:.0f} s {row}", flush=True)
            finally:
                path.write_text(original, encoding="utf-8")
        return {
            "rows": rows,
            "full_wall": full_wall,
            "n_tests": len(passing),
            "suite_time": total,
            "n_lib_tests": len(lib_tests),
            "lib_time": lib_total,
        }
    finally:
        for p in keep:
            drop_state(p)
            if (saved / p.name).exists():
                copy_state(saved / p.name, p)
        shutil.rmtree(work, ignore_errors=True)


# -- report --------------------------------------------------------------------------------
def render(timings: list[dict[str, float]], mut: dict[str, object] | None, note: str) -> str:
    out = [
        "### Map build (generated trees)",
        "",
        "| files | test ids | cold build | cold write | warm, no change | one edit |",
        "|---|---|---|---|---|---|",
    ]
    for t in timings:
        out.append(
            f"| {t['files']:,} | {int(t['tests']):,} | {t['cold_plan']:.3f} s | {t['cold_write']:.3f} s "
            f"| {t['warm_nochange']:.3f} s | {t['one_edit']:.3f} s |"
        )
    if mut is not None:
        rows = mut["rows"]
        assert isinstance(rows, list)
        failing = [r for r in rows if r["fails"]]
        n = len(failing) or 1
        out += ["", "### Mutation benchmark (real library)", ""]
        out.append(
            f"{len(rows)} mutants tried, {len(failing)} fail at least one test; suite: "
            f"{mut['n_tests']} passing tests, {float(mut['suite_time']):.1f} s of test time "  # type: ignore[arg-type]
            f"({mut['n_lib_tests']} of them, {float(mut['lib_time']):.1f} s, outside the harness's own tests)."  # type: ignore[arg-type]
        )
        out += [
            "",
            "Cost = baseline time of the selected tests / time of the whole suite (and, in the last two "
            "columns, / time of the library's tests alone, without the harness's own tests); means over the failing mutants.",
            "",
            "| selector | safety | mean cost | max cost | mean cost, library tests | max cost, library tests |",
            "|---|---|---|---|---|---|",
        ]
        for label, s_key, c_key in (
            ("remote-select (testmon + this)", "ours_safe", "ours_cost"),
            ("testmon alone", "tm_safe", "tm_cost"),
            ("oracle (the tests that run the function)", "", "oracle_cost"),
        ):
            safety = sum(1 for r in failing if r[s_key]) / n if s_key else 1.0
            costs = [float(r[c_key]) for r in failing] or [0.0]
            lib = [float(r[c_key + "_lib"]) for r in failing] or [0.0]
            out.append(
                f"| {label} | {safety:.0%} | {sum(costs) / len(costs):.0%} | {max(costs):.0%} "
                f"| {sum(lib) / len(lib):.0%} | {max(lib):.0%} |"
            )
        out.append("| run everything | 100% | 100% | 100% | 100% | 100% |")
        ours = sum(float(r["ours_cost"]) for r in failing) / n
        ideal = sum(float(r["oracle_cost"]) for r in failing) / n
        if ideal:
            out += ["", f"Mean cost of remote-select / the oracle's: {ours / ideal:.2f}x."]
        out += [
            "",
            "Per mutant (cost over the whole suite; `missed` = no failing test selected):",
            "",
            "| mutant | failing tests | oracle | remote-select | testmon alone |",
            "|---|---|---|---|---|",
        ]
        for r in rows:
            name = str(r["mutant"]).removeprefix("nemo_rl/")
            ours_cell = f"{float(r['ours_cost']):.0%}" + ("" if r["ours_safe"] or not r["fails"] else " missed")
            tm_cell = f"{float(r['tm_cost']):.0%}" + ("" if r["tm_safe"] or not r["fails"] else " missed")
            out.append(f"| `{name}` | {r['fails']} | {float(r['oracle_cost']):.0%} | {ours_cell} | {tm_cell} |")
        missed = [r["mutant"] for r in failing if not r["tm_safe"]]
        if missed:
            out += ["", "Failing mutants testmon alone misses: " + ", ".join(f"`{m}`" for m in missed[:12])]
    if note:
        out += ["", note]
    return "\n".join(out) + "\n"


def update_docs(text: str) -> None:
    update_section("selection", f"## Test selection (bench/selection.py)\n\n{text}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default="600,6000", help="generated tree sizes (comma separated)")
    ap.add_argument("--max-mutants", type=int, default=0, help="sample this many mutants (0 = all)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--timeout", type=int, default=900, help="seconds per pytest run")
    ap.add_argument("--skip-mutants", action="store_true")
    ap.add_argument(
        "--mutant",
        dest="mutants",
        action="append",
        default=[],
        metavar="PATH::QUALNAME",
        help="mutate exactly these functions (repeatable), e.g. nemo_rl/config.py::load_config",
    )
    ap.add_argument(
        "--harness-tests",
        default="tools/py/tests",
        help="the harness's own tests, left out of the second cost denominator",
    )
    ap.add_argument(
        "--random",
        type=int,
        default=0,
        metavar="N",
        help="with --mutant: also try N more mutants drawn at random (--seed)",
    )
    ap.add_argument(
        "-x",
        "--first-failure",
        action="store_true",
        help="when the union fails nothing, stop the run of the other tests at the first failure (faster)",
    )
    ap.add_argument(
        "-n",
        "--workers",
        default="",
        metavar="N",
        help="run the baseline and each mutant's tests with pytest-xdist -n N (durations are then those of a parallel run)",
    )
    ap.add_argument("--no-docs", action="store_true", help="print only; do not touch docs/benchmarks.md")
    ap.add_argument("tests", nargs="*", default=["tests/unit"], help="test paths (default tests/unit)")
    args = ap.parse_args(argv)
    try:
        sizes = [int(s) for s in args.sizes.split(",") if s]
    except ValueError:
        ap.error(f"--sizes: expected integers, got {args.sizes!r}")
    timings = [time_tree(n) for n in sizes]
    mut = None
    note = ""
    if not args.skip_mutants:
        cfg = select_config(load_settings(ROOT))
        if not cfg.source_packages:
            print("selection bench: [tool.testharness] source_packages is not set; skipping mutants", file=sys.stderr)
        else:
            mut = mutation_benchmark(args, cfg)
            if args.mutants:
                extra = f" and {args.random} drawn at random (seed {args.seed})" if args.random else ""
                note = f"{len(args.mutants)} chosen mutants{extra}; tests: {' '.join(args.tests)}."
            elif args.max_mutants:
                note = f"Sample of {args.max_mutants} mutants (seed {args.seed}); tests: {' '.join(args.tests)}."
    text = render(timings, mut, note)
    print(text)
    if not args.no_docs:
        update_docs(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
