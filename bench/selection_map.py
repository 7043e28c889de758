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

Every time is wall seconds with the CPU seconds beside it (this process and its reader
processes): on a shared, loaded box the CPU seconds are the figure to compare. The cold
build in one process is the best of three (by CPU). The "before" columns are fixed figures,
measured at 25fe156 (2026-12-02) before issue 21's cold-build work.

    uv run --group test python bench/selection_map.py
    uv run --group test python bench/selection_map.py --ast --docs   # also update docs/benchmarks.md
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import random
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _bench_common import md_table, print_table, today, update_section  # noqa: E402

from testharness.remote_select import lexical, parsing, store  # noqa: E402
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
    parsing.parse_file falls back to `ast` (the reader before lexical.py)."""
    original, threshold = lexical.read, parsing.PARALLEL_MIN_FILES
    parsing.PARALLEL_MIN_FILES = 1 << 60
    if ast_only:
        lexical.read = lambda source: None
    try:
        yield
    finally:
        lexical.read, parsing.PARALLEL_MIN_FILES = original, threshold


def _cpu() -> float:
    """CPU seconds of this process and of its waited-for children (the reader processes)."""
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + kids.ru_utime + kids.ru_stime


def _timed(fn: Callable[[], object]) -> tuple[float, float]:
    w, c = time.perf_counter(), _cpu()
    fn()
    return time.perf_counter() - w, _cpu() - c


# Measured at 25fe156 (2026-12-02, load 7.9 / 7.3 / 6.4), before issue 21's cold-build work:
# (cold with ast, its CPU), (cold in one process, its CPU), cold with reader processes (wall).
BEFORE = {
    "transformers, first 550 files": ((15.10, 10.71), (2.40, 1.54), 3.35),
    "transformers": ((98.58, 61.08), (12.89, 7.54), 15.77),
    "megatron.core": ((6.54, 3.25), (0.77, 0.55), 0.99),
}


def time_tree(root: Path, cfg: SelectConfig, with_ast: bool) -> dict[str, tuple[float, float]]:
    """(wall, cpu) seconds of each step, plus ("files", "mb") as (count, MB)."""
    files = store.StateFiles(root / "map.json", root / "state.json")
    cache = store.parse_cache_file(files.map_file)
    sel = RemoteSelector(root, cfg, files)
    out: dict[str, tuple[float, float]] = {}
    if with_ast:
        with serial(ast_only=True):
            out["ast_cold"] = _timed(sel.plan)
    with serial():  # no map and no parse cache are written by plan(): each run is cold
        out["serial_cold"] = min((_timed(sel.plan) for _ in range(3)), key=lambda t: t[1])
    plans = []
    out["cold"] = _timed(lambda: plans.append(sel.plan()))
    plan = plans[-1]
    out["size"] = (len(plan.digests), sum(os.path.getsize(p) for p in plan.files.values()) / 1e6)
    outcomes = {f"{t}::test_a": "passed" for t in plan.test_files}
    out["write"] = _timed(lambda: sel.finish(plan, outcomes, {}))
    files.map_file.unlink()
    out["cached"] = _timed(lambda: plans.append(sel.plan()))  # map gone, parse cache kept
    sel.finish(plans[-1], outcomes, {})
    time.sleep(2.1)  # past hash_files' racy window, so the stat signatures are kept
    sel.finish(sel.plan(), outcomes, {})
    out["warm"] = _timed(sel.plan)
    target = sorted(p for p in (root / "src").rglob("*.py") if p.stat().st_size > 2000)[0]
    text = target.read_text()
    target.write_text(text.replace("\ndef ", "\ndef _bench_added():\n    return 1\n\n\ndef ", 1) + "\n")
    out["one_edit"] = _timed(sel.plan)
    target.write_text(text)
    assert cache.exists()
    return out


def _fmt(wall: float, cpu: float, digits: int = 2) -> str:
    return f"{wall:.{digits}f} s (cpu {cpu:.{digits}f})"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ast", action="store_true", help="also time the cold build through `ast`")
    ap.add_argument("--docs", action="store_true", help="update the selection-map part of docs/benchmarks.md")
    args = ap.parse_args(argv)
    load_start = os.getloadavg()
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
        n_files, mb = t["size"]
        warm_wall, warm_cpu = t["warm"]
        ast_before, serial_before, cold_before = BEFORE.get(label, (None, None, None))
        rows.append(
            [
                label,
                f"{int(n_files):,}",
                f"{mb:.1f}",
                _fmt(*t["ast_cold"]) if "ast_cold" in t else (_fmt(*ast_before) if ast_before else "-"),
                _fmt(*serial_before) if serial_before else "-",
                _fmt(*t["serial_cold"]),
                f"{cold_before:.2f} s" if cold_before else "-",
                _fmt(*t["cold"]),
                _fmt(*t["write"]),
                _fmt(*t["cached"]),
                f"{_fmt(warm_wall, warm_cpu, 3)}; {warm_wall / n_files * 1000:.3f} per 1,000",
                _fmt(*t["one_edit"]),
            ]
        )
        print(label, t, flush=True)
    header = [
        "tree",
        "files",
        "MB",
        "cold, ast" + ("" if args.ast else " (before)"),
        "cold, one process, before",
        "cold, one process (best of 3)",
        "cold, before",
        "cold",
        "write",
        "cold, parse cache kept",
        "warm, no change",
        "one edit",
    ]
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False)
    note = (
        f"Measured {today()} at {commit.stdout.strip() or '?'} on {os.cpu_count()} CPUs, load average"
        f" {_load(load_start)} at the start and {_load(os.getloadavg())} at the end. Wall seconds, with"
        " the CPU seconds of this process and its reader processes beside them (the figure to compare"
        " on a loaded box). The before columns: 25fe156, 2026-12-02, load 7.9 / 7.3 / 6.4."
    )
    print_table("Map build on real trees", header, rows)
    print(note)
    print(FINDINGS)
    if args.docs:
        update_section("selection-map", md_table(header, rows) + f"\n\n{note}\n\n{FINDINGS}")
    return 0


# Printed under the table (and written with it by --docs): where a cold build's time went.
FINDINGS = """\
Where a cold build's time went before (py-spy and cProfile, CPU seconds, 2026-12-02): on
transformers whole (plan and finish: 6.75 s), reading the files with lexical.py 5.5 s, building
the graph 0.4, encoding the parse cache 0.4, hashing 0.15; in its first 605 files,
generation/utils.py (247 KB) went to `ast` for tabs in a docstring: 0.12 s (lexical.py: 0.01). Inside
lexical.py the two largest costs were `re` trying every position: a named group around the
comment branch of the token pattern hid its first characters from `re` (2.5x that pattern's time;
the `\\b` starting the import_module pattern did the same), and the called-names pattern started
with one of three characters, which `re` tests one position at a time (a single literal character
is found by a fast loop). What changed (issue 21):

- lexical.py: the token pattern without the group; the reversed text for called names read with
  `,` and `)` as `(` (one literal first character), once per file, each function body in place;
  tabs refused only in code (not in strings and comments); brackets counted on the bytes left after
  one `bytes.translate`; multi-line strings blanked by `bytes.translate`; fewer steps per string and
  per function. Same ParsedFile as before on 7,553 files (transformers, megatron.core, this
  repository, _pytest, jinja2, huggingface_hub, matplotlib, ray, numpy, torch.distributed,
  torch._dynamo); 4 with tabs in strings are now read here, each a superset of what `ast` finds.
- A cold build parses the bytes `hash_files` read (each file read once, parsed as hashed).
- The parse cache writes function facts as the tuples they are (the same JSON)."""


def _load(avg: tuple[float, float, float]) -> str:
    return " / ".join(f"{x:.1f}" for x in avg)


if __name__ == "__main__":
    sys.exit(main())
