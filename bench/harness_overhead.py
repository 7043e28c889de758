"""Overhead of the harness's pytest plugin and `tracker` fixture over plain pytest.

Generates trivial test suites (1,000 tests in 20 files, and a 1-test suite) in a temporary
directory laid out like the project (`tests/unit/...`, so the results file is written as in a
real run) and times, in fresh pytest processes, interleaved, several repetitions each:

    plain            pytest, no harness plugin
    plain + fixture  pytest, tests take a no-op `tracker` fixture from a conftest (fixture cost)
    plugin           pytest -p testharness.plugin, tests take no fixture
    plugin + tracker pytest -p testharness.plugin, every test takes the real `tracker`
    run_unit + tracker  the same through run_unit's supervisor (python -m testharness.unit_runner,
                     no Ray discovery): its journal, breadcrumbs and end-of-run sweep

per-session overhead = median wall(1 test, variant) - median wall(1 test, plain)
per-test overhead    = [(wall(1000) - wall(1)) of the variant - the same for plain] / 999
Targets: <= 2 ms per test and <= 0.5 s per session for "plugin + tracker".

    uv run --group test python bench/harness_overhead.py              # 5 repetitions
    uv run --group test python bench/harness_overhead.py --profile    # + cProfile of the harness
"""

from __future__ import annotations

import argparse
import os
import pstats
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _bench_common import ROOT, machine, md_table, print_table, today, update_section  # noqa: E402

SECTION = "harness-overhead"
TARGET_TEST_MS = 2.0
TARGET_SESSION_S = 0.5
VARIANTS = {  # name: (load the plugin, tests take `tracker`, dummy fixture conftest)
    "plain": (False, False, False),
    "plain + fixture": (False, True, True),
    "plugin": (True, False, False),
    "plugin + tracker": (True, True, False),
    "run_unit + tracker": (True, True, False),
}
SUPERVISED = "run_unit + tracker"
DUMMY_CONFTEST = "import pytest\n\n\n@pytest.fixture\ndef tracker():\n    yield None\n"


def generate(root: Path, n_tests: int, use_fixture: bool, dummy: bool) -> None:
    """`n_tests` trivial tests under root/tests/unit, 50 per file."""
    tests = root / "tests" / "unit"
    tests.mkdir(parents=True)
    (root / "pytest.ini").write_text("[pytest]\n")  # rootdir here, not the repository
    if dummy:
        (tests / "conftest.py").write_text(DUMMY_CONFTEST)
    arg = "tracker" if use_fixture else ""
    per_file = 50
    for f in range(max(1, (n_tests + per_file - 1) // per_file)):
        count = min(per_file, n_tests - f * per_file)
        body = "".join(f"def test_{i}({arg}):\n    assert {i} == {i}\n\n\n" for i in range(count))
        (tests / f"test_gen_{f:03d}.py").write_text(body)


def pytest_cmd(plugin: bool, extra: list[str] | None = None) -> list[str]:
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly"]
    if plugin:
        cmd += ["-p", "testharness.plugin"]
    return cmd + (extra or []) + ["tests/unit"]


def env() -> dict[str, str]:
    e = dict(os.environ)
    e.pop("TESTHARNESS_RESULTS_DIR", None)  # results go where a real run puts them: tests/unit
    e["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT / "tools" / "py"), e.get("PYTHONPATH", "")]))
    e["RAY_ADDRESS"] = ""  # never join a cluster: the tracker does not call Ray unless connected
    return e


def time_once(cwd: Path, plugin: bool, supervised: bool = False) -> float:
    cmd, run_env = pytest_cmd(plugin), env()
    if supervised:  # run_unit's own flags are none of these: everything goes to pytest as above
        cmd = [sys.executable, "-m", "testharness.unit_runner", *cmd[3:]]
        run_env.update(TESTHARNESS_NO_DISCOVERY="1", TESTHARNESS_ROOT=str(cwd))
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=cwd, env=run_env, capture_output=True, text=True, timeout=600)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise RuntimeError(
            f"pytest failed in {cwd} (exit {proc.returncode}):\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}"
        )
    return wall


def measure(base: Path, n_tests: int, reps: int) -> dict[tuple[str, int], list[float]]:
    dirs: dict[tuple[str, int], Path] = {}
    for name, (_plugin, fixture, dummy) in VARIANTS.items():
        for n in (1, n_tests):
            d = base / f"{name.replace(' + ', '_')}_{n}"
            generate(d, n, fixture, dummy)
            dirs[(name, n)] = d
    times: dict[tuple[str, int], list[float]] = {k: [] for k in dirs}
    for key, d in dirs.items():  # one untimed run each: .pyc files and the OS cache
        time_once(d, VARIANTS[key[0]][0], key[0] == SUPERVISED)
    for rep in range(reps):  # interleaved, so load drift on a shared machine hits every variant
        for key, d in dirs.items():
            times[key].append(time_once(d, VARIANTS[key[0]][0], key[0] == SUPERVISED))
        print(f"harness_overhead: repetition {rep + 1}/{reps} done", flush=True)
    return times


def profile(base: Path, n_tests: int, top: int) -> str:
    """cProfile of one 'plugin + tracker' session: the harness functions by cumulative time."""
    d = base / "profile"
    generate(d, n_tests, True, False)
    out = d / "prof.out"
    cmd = [sys.executable, "-m", "cProfile", "-o", str(out), *pytest_cmd(True)[1:]]
    subprocess.run(cmd, cwd=d, env=env(), capture_output=True, text=True, timeout=600, check=False)
    stats = pstats.Stats(str(out))
    rows = []
    for (path, line, func), (_cc, nc, tt, ct, _callers) in stats.stats.items():  # type: ignore[attr-defined]
        if "testharness" in path:
            rel = path.split("testharness", 1)[1].lstrip("/")
            rows.append((ct, tt, nc, f"{rel}:{line}({func})"))
    rows.sort(reverse=True)
    lines = ["| cumulative | own | calls | function (tools/py/testharness/...) |", "|---|---|---|---|"]
    lines += [f"| {ct * 1000:.1f} ms | {tt * 1000:.1f} ms | {nc} | `{name}` |" for ct, tt, nc, name in rows[:top]]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--tests", type=int, default=1000, help="tests in the large suite (default 1000)")
    ap.add_argument("--reps", type=int, default=5, help="timed repetitions per variant (default 5)")
    ap.add_argument("--profile", action="store_true", help="also profile the harness (cProfile)")
    ap.add_argument("--no-docs", action="store_true", help="print only; do not touch docs/benchmarks.md")
    args = ap.parse_args(argv)
    if args.tests < 2 or args.reps < 1:
        ap.error("--tests must be >= 2 and --reps >= 1")
    n = args.tests
    with tempfile.TemporaryDirectory(prefix="harness_overhead_") as tmp:
        times = measure(Path(tmp), n, args.reps)
        prof = profile(Path(tmp), n, 15) if args.profile else ""
    # min is the least-disturbed run on a shared machine (as timeit does); medians shown too.
    best = {k: min(v) for k, v in times.items()}
    med = {k: statistics.median(v) for k, v in times.items()}

    def overheads(t: dict[tuple[str, int], float], name: str) -> tuple[float, float]:
        slope = (t[(name, n)] - t[(name, 1)]) - (t[("plain", n)] - t[("plain", 1)])
        return slope / (n - 1) * 1000, t[(name, 1)] - t[("plain", 1)]

    rows: list[list[object]] = []
    verdicts: list[str] = []
    for name in VARIANTS:
        per_test_ms, session_s = overheads(best, name)
        med_test_ms, med_session_s = overheads(med, name)
        rows.append(
            [
                name,
                f"{best[(name, 1)]:.2f} / {med[(name, 1)]:.2f} s",
                f"{best[(name, n)]:.2f} / {med[(name, n)]:.2f} s",
                f"{(best[(name, n)] - best[(name, 1)]) / (n - 1) * 1000:.2f} ms",
                "-" if name == "plain" else f"{per_test_ms:+.2f} ms ({med_test_ms:+.2f})",
                "-" if name == "plain" else f"{session_s:+.3f} s ({med_session_s:+.3f})",
            ]
        )
        if name == "plugin + tracker":
            ok_t = per_test_ms <= TARGET_TEST_MS
            ok_s = session_s <= TARGET_SESSION_S
            verdicts.append(
                f"per test: {per_test_ms:+.2f} ms (target <= {TARGET_TEST_MS:g} ms: "
                f"{'met' if ok_t else f'MISSED by {per_test_ms - TARGET_TEST_MS:.2f} ms'})"
            )
            verdicts.append(
                f"per session: {session_s:+.3f} s (target <= {TARGET_SESSION_S:g} s: "
                f"{'met' if ok_s else f'MISSED by {session_s - TARGET_SESSION_S:.3f} s'})"
            )
    header = [
        "variant",
        "wall, 1 test (min / median)",
        f"wall, {n:,} tests (min / median)",
        "per test (min)",
        "per test vs plain: min (median)",
        "per session vs plain: min (median)",
    ]
    print_table(f"Harness overhead ({args.reps} repetitions)", header, rows)
    for v in verdicts:
        print("plugin + tracker " + v)
    if prof:
        print(prof)
    body = [
        "## Harness overhead (bench/harness_overhead.py)",
        "",
        f"Measured {today()} on {machine()}, with "
        f"`uv run --group test python bench/harness_overhead.py{' --profile' if args.profile else ''}`: "
        f"fresh pytest processes, {args.reps} interleaved repetitions; overheads from the fastest run of "
        f"each variant (the least disturbed on a shared machine), medians in parentheses; trivial "
        f"generated tests in files of 50.",
        "",
        md_table(header, rows),
        "",
        *[f"- plugin + tracker, {v}" for v in verdicts],
    ]
    if prof:
        body += [
            "",
            f"cProfile of one 'plugin + tracker' session of {n:,} tests (harness functions, "
            "cumulative time; profiling inflates small functions):",
            "",
            prof,
        ]
    if not args.no_docs:
        update_section(SECTION, "\n".join(body) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
