"""Map build of remote-aware selection on large real trees (prints a table).

Real code that ships in this venv is copied into a scratch tree as a source package, with
synthetic tests (one per 10 modules, each importing 3 modules at random), and timed:

  cold        no map, no state, no parse cache: every file read (plan); also in this
              process only (the readers run in a process per CPU from 400 files and 16 MB on)
  write       saving the map and the parse cache at the end of that session
  cached      no map, but the parse cache file kept (a CI job that caches it)
  warm        no change since the last session
  one edit    one module's function body edited

Trees: `transformers` (whole), `megatron.core` (whole), and transformers' first 550 files by
path (about 600 with the tests; its files are larger than this repository's). With --ast the same cold
build is also timed through `ast` (the reader before lexical.py), for comparison.

    uv run --group test python bench/selection_map.py
    uv run --group test python bench/selection_map.py --ast --docs   # also update docs/benchmarks.md
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import random
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _bench_common import md_table, print_table, update_section  # noqa: E402

from testharness.remote_select import engine, lexical, store  # noqa: E402
from testharness.remote_select.config import SelectConfig  # noqa: E402
from testharness.remote_select.engine import RemoteSelector  # noqa: E402


def _package_dir(name: str) -> Path | None:
    """Where an installed package lives (found, not imported); None when not installed."""
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def make_tree(root: Path, pkg_dir: Path, top: str, inner: str, limit: int = 0) -> SelectConfig:
    """Copy `pkg_dir` (importable as `inner`, top-level package `top`) under root/src (its
    first `limit` .py files by path, if given) and add synthetic tests."""
    files = sorted(p for p in pkg_dir.rglob("*.py") if "__pycache__" not in p.parts)
    files = files[:limit] if limit else files
    dest = root / "src" / Path(*inner.split("."))
    mods = []
    for path in files:
        rel = path.relative_to(pkg_dir)
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, dest / rel)
        mods.append(".".join([inner, *rel.with_suffix("").parts]).removesuffix(".__init__"))
    for parent in [root / "src" / top, *(root / "src" / top).rglob("*")]:
        if parent.is_dir() and not (parent / "__init__.py").exists():
            (parent / "__init__.py").write_text("")
    rng = random.Random(0)
    (root / "tests").mkdir()
    for t in range(max(len(mods) // 10, 1)):
        imports = "\n".join(f"import {m}" for m in rng.sample(mods, min(3, len(mods))))
        (root / "tests" / f"test_s{t}.py").write_text(f"{imports}\n\n\ndef test_a():\n    pass\n")
    return SelectConfig(source_packages=(top,), source_roots=("src",), test_roots=("tests",))


@contextmanager
def serial(ast_only: bool = False) -> Iterator[None]:
    """Files read in this process only; with `ast_only`, lexical.read refuses every file, so
    graph.parse_file falls back to `ast` (the reader before lexical.py)."""
    original, threshold = lexical.read, engine.PARALLEL_MIN_FILES
    engine.PARALLEL_MIN_FILES = 1 << 60
    if ast_only:
        lexical.read = lambda source: None  # type: ignore[assignment]
    try:
        yield
    finally:
        lexical.read, engine.PARALLEL_MIN_FILES = original, threshold  # type: ignore[assignment]


def _timed(fn: Callable[[], object]) -> tuple[float, float]:
    w, c = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - w, time.process_time() - c


def time_tree(root: Path, cfg: SelectConfig, with_ast: bool) -> dict[str, float]:
    files = store.StateFiles(root / "map.json", root / "state.json")
    cache = store.parse_cache_file(files.map_file)
    sel = RemoteSelector(root, cfg, files)
    out: dict[str, float] = {}
    if with_ast:
        with serial(ast_only=True):
            out["ast_cold"], out["ast_cold_cpu"] = _timed(sel.plan)
    with serial():
        out["serial_cold"], out["serial_cold_cpu"] = _timed(sel.plan)
    plans = []
    out["cold"], out["cold_cpu"] = _timed(lambda: plans.append(sel.plan()))
    plan = plans[-1]
    out["files"] = len(plan.digests)
    out["mb"] = sum(os.path.getsize(p) for p in plan.files.values()) / 1e6
    outcomes = {f"{t}::test_a": "passed" for t in plan.test_files}
    out["write"], _ = _timed(lambda: sel.finish(plan, outcomes, {}))
    files.map_file.unlink()
    out["cached"], _ = _timed(lambda: plans.append(sel.plan()))  # map gone, parse cache kept
    sel.finish(plans[-1], outcomes, {})
    time.sleep(2.1)  # past hash_files' racy window, so the stat signatures are kept
    sel.finish(sel.plan(), outcomes, {})
    out["warm"], _ = _timed(sel.plan)
    target = sorted(p for p in (root / "src").rglob("*.py") if p.stat().st_size > 2000)[0]
    text = target.read_text()
    target.write_text(text.replace("\ndef ", "\ndef _bench_added():\n    return 1\n\n\ndef ", 1) + "\n")
    out["one_edit"], _ = _timed(sel.plan)
    target.write_text(text)
    assert cache.exists()
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ast", action="store_true", help="also time the cold build through `ast`")
    ap.add_argument("--docs", action="store_true", help="update the selection-map part of docs/benchmarks.md")
    args = ap.parse_args(argv)
    trees = []
    tf, mc = _package_dir("transformers"), _package_dir("megatron.core")
    if tf is not None:
        trees.append(("transformers, first 550 files", tf, "transformers", "transformers", 550))
        trees.append(("transformers", tf, "transformers", "transformers", 0))
    if mc is not None:
        trees.append(("megatron.core", mc, "megatron", "megatron.core", 0))
    rows = []
    for label, pkg_dir, top, inner, limit in trees:
        with tempfile.TemporaryDirectory(prefix="selmap_") as tmp:
            root = Path(tmp)
            cfg = make_tree(root, pkg_dir, top, inner, limit)
            t = time_tree(root, cfg, args.ast)
        per_k = t["warm"] / t["files"] * 1000
        rows.append(
            [
                label,
                f"{int(t['files']):,}",
                f"{t['mb']:.1f}",
                f"{t['ast_cold']:.2f} s (cpu {t['ast_cold_cpu']:.2f})" if "ast_cold" in t else "-",
                f"{t['serial_cold']:.2f} s (cpu {t['serial_cold_cpu']:.2f})",
                f"{t['cold']:.2f} s",
                f"{t['write']:.2f} s",
                f"{t['cached']:.2f} s",
                f"{t['warm']:.3f} s ({per_k:.3f} per 1,000)",
                f"{t['one_edit']:.2f} s",
            ]
        )
        print(label, t, flush=True)
    header = [
        "tree",
        "files",
        "MB",
        "cold, ast (before)",
        "cold, one process",
        "cold",
        "write",
        "cold, parse cache kept",
        "warm, no change",
        "one edit",
    ]
    load = os.getloadavg()
    note = f"load average {load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f} on {os.cpu_count()} CPUs at the end"
    print_table(f"Map build on real trees ({note})", header, rows)
    if args.docs:
        update_section("selection-map", md_table(header, rows) + f"\n\n{note.capitalize()}.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
