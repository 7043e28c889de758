"""Per-test overhead of the leak check (testharness.hygiene), with and without Ray.

Runs one generated project of N trivial tests several ways, each with the leak check on and
off (--no-leak-check), and times every test's whole protocol (setup + call + teardown, the
hooks included) from an outermost hook wrapper in the project's conftest; the first test of
each run (Ray's start, imports) is left out. Overhead = median(on) - median(off), and the
mean difference too. Scenarios:

  no Ray        plain tests: the check reads /proc (children) and NVML only
  Ray           a Ray cluster in a session fixture, 4 actors alive in a module fixture,
                each test calls one actor: the check also reads this job's actors and
                placement groups from the GCS, before and after every test
  Ray, -n 2     the same under two xdist workers sharing one cluster (GPU reading off)

    uv run --group test python bench/hygiene_overhead.py [--tests 150] [--skip-xdist]

Prints a markdown table (docs/benchmarks.md, "hygiene-overhead" section).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CONFTEST = """
import json, os, time
import pytest

TIMES = []

@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_protocol(item, nextitem):
    start = time.perf_counter()
    try:
        return (yield)
    finally:
        TIMES.append(time.perf_counter() - start)

def pytest_sessionfinish(session):
    out = os.environ["BENCH_TIMES"]
    worker = getattr(session.config, "workerinput", {}).get("workerid", "main")
    with open(f"{out}.{worker}", "w") as fh:
        json.dump(TIMES[1:], fh)  # the first test pays for Ray's start and the imports

@pytest.fixture(scope="session")
def ray_session():
    import ray
    if os.environ.get("RAY_ADDRESS"):
        ray.init(address=os.environ["RAY_ADDRESS"], log_to_driver=False)
    else:
        ray.init(num_cpus=4, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()

@pytest.fixture(scope="module")
def actors(ray_session):
    import ray

    @ray.remote(num_cpus=0)
    class Echo:
        def ping(self):
            return 1

    group = [Echo.remote() for _ in range(4)]
    ray.get([a.ping.remote() for a in group])
    yield group
    for a in group:
        ray.kill(a)
"""

PLAIN = """
import pytest

@pytest.mark.parametrize("i", range({n}))
def test_plain(i):
    assert i >= 0
"""

WITH_RAY = """
import pytest
import ray

@pytest.mark.parametrize("i", range({n}))
def test_ray(actors, i):
    assert ray.get(actors[i % 4].ping.remote()) == 1
"""


def _run(project: Path, test_file: str, check: bool, xdist: bool) -> list[float]:
    times = project / "times"
    for old in project.glob("times.*"):
        old.unlink()
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", test_file, "--unit-results-dir", "out"]
    if not check:
        cmd.append("--no-leak-check")
    if xdist:
        cmd += ["-n", "2"]
    env = dict(os.environ, BENCH_TIMES=str(times), RAY_ENABLE_UV_RUN_RUNTIME_ENV="0", RAY_worker_niceness="0")
    env.pop("RAY_ADDRESS", None)
    proc = subprocess.run(cmd, cwd=project, env=env, capture_output=True, text=True, timeout=1800, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"inner run failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-2000:]}")
    out: list[float] = []
    for path in project.glob("times.*"):
        out.extend(json.loads(path.read_text()))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tests", type=int, default=150, help="tests per run")
    ap.add_argument("--skip-xdist", action="store_true", help="leave out the -n 2 scenario")
    args = ap.parse_args()
    scenarios = [("no Ray", "test_plain.py", False), ("Ray, 4 actors alive", "test_ray.py", False)]
    if not args.skip_xdist:
        scenarios.append(("Ray, 4 actors alive, -n 2", "test_ray.py", True))
    load = os.getloadavg()[0]
    print(f"{os.cpu_count()} CPUs, load average {load:.1f} at start, {args.tests} tests per run\n")
    print("| scenario | median off (ms) | median on (ms) | overhead, median (ms/test) | overhead, mean (ms/test) |")
    print("|---|---:|---:|---:|---:|")
    with tempfile.TemporaryDirectory(prefix="hygiene_bench_") as tmp:
        project = Path(tmp)
        (project / "conftest.py").write_text(CONFTEST)
        (project / "test_plain.py").write_text(PLAIN.format(n=args.tests))
        (project / "test_ray.py").write_text(WITH_RAY.format(n=args.tests))
        for name, test_file, xdist in scenarios:
            start = time.monotonic()
            off = _run(project, test_file, check=False, xdist=xdist)
            on = _run(project, test_file, check=True, xdist=xdist)
            m_off, m_on = statistics.median(off) * 1e3, statistics.median(on) * 1e3
            mean = (statistics.mean(on) - statistics.mean(off)) * 1e3
            print(f"| {name} | {m_off:.1f} | {m_on:.1f} | {m_on - m_off:.1f} | {mean:.1f} |", flush=True)
            print(f"<!-- {name}: {time.monotonic() - start:.0f} s -->", file=sys.stderr)
    print(f"\nload average {os.getloadavg()[0]:.1f} at the end")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
