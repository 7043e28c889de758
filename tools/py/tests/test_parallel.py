"""`-n N` with real pytest-xdist and real Ray: one shared cluster for the run, one results
file with every worker's metrics, memory and coverage, and GPU placement through Ray's
accounting (a GPU is a Ray resource here: a cluster started with `num_gpus=1` on a CPU
machine hands it out exactly as on a GPU machine).

Every run is a pytest subprocess in a small project (xdist_project.py). Runs that only test
selection join a Ray cluster already running (`shared_head`, RAY_ADDRESS: "or the one in
RAY_ADDRESS"); the others let the controller start and stop its own. GPU placement:
test_parallel_gpus.py; the other features under -n: test_parallel_selection.py,
test_parallel_testmon.py, test_parallel_composes.py.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

from xdist_project import (
    ACTOR_FILES,
    Head,
    env_for,
    make_project,
    ray_processes,
    results_of,
    run_pytest,
)

# --- one cluster, started while the workers start; one results file --------------------------

# The project's own start-up (it writes STARTED_BY_HOOK) waits until a worker has collected: it
# returns only if the workers start while the cluster does. A test module imports Ray and
# defines a remote class when it is collected, as the library's modules do: Ray has read its
# settings by the time the worker learns the address (a cluster that asks for its token must
# still be joined).
STARTS_BESIDE_THE_WORKERS = {
    "conftest.py": textwrap.dedent("""
        import time
        from pathlib import Path

        pytest_plugins = ["testharness.plugin"]


        def pytest_testharness_start_ray(config, workers):
            import ray

            Path("STARTED_BY_HOOK").write_text(str(workers))
            deadline = time.monotonic() + 120
            while not list(Path(".").glob("COLLECTED_*")) and time.monotonic() < deadline:
                time.sleep(0.05)
            Path("SAW_A_WORKER_COLLECT").write_text(str(bool(list(Path(".").glob("COLLECTED_*")))))
            for attempt in range(3):  # a loaded machine: Ray's own start-up waits can run out
                try:
                    ray.init(address="local", num_cpus=4, include_dashboard=False)
                    return ray.get_runtime_context().gcs_address
                except Exception:
                    ray.shutdown()
                    if attempt == 2:
                        raise
    """),
    "tests/test_joins.py": textwrap.dedent("""
        import os
        from pathlib import Path

        import ray

        Path(f"COLLECTED_{os.getpid()}").touch()


        @ray.remote
        class Echo:
            def gcs(self):
                return ray.get_runtime_context().gcs_address


        def test_joins(cluster, tracker):
            echo = Echo.remote()  # held: Ray 2.46 loses an actor whose handle is a temporary
            tracker.track("gcs", cluster.get(echo.gcs.remote()))
            tracker.track("pid", os.getpid())
    """),
    "tests/test_also.py": textwrap.dedent("""
        import os


        def test_also(cluster, tracker):
            tracker.track("gcs", cluster.get_runtime_context().gcs_address)
            tracker.track("pid", os.getpid())
    """),
}


def test_workers_share_one_cluster_that_the_controller_starts_beside_them_and_stops(tmp_path: Path) -> None:
    """One run of ACTOR_FILES and STARTS_BESIDE_THE_WORKERS: the project's start-up hook,
    the start beside the workers' collection, one cluster for both workers and the actors, one
    results file with every worker's metrics, memory and coverage, and the cluster stopped."""
    root = make_project(tmp_path, {**ACTOR_FILES, **STARTS_BESIDE_THE_WORKERS})
    env = env_for(root)
    proc = run_pytest(root, "-n", "2", "--cov=mylib", "--cov-report=json:cov.json", env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (root / "STARTED_BY_HOOK").read_text() == "2"  # the project's own start-up
    assert (root / "SAW_A_WORKER_COLLECT").read_text() == "True"
    assert "2 xdist workers share the Ray cluster started at" in proc.stdout
    assert "not the main thread" not in proc.stdout  # Ray's warning about the start's thread
    doc = results_of(root)
    metrics = doc["metrics"]
    assert len({m["pid"] for m in metrics.values()}) == 2, metrics  # two workers
    gcs = {m["gcs"] for m in metrics.values()}
    assert len(gcs) == 1 and "" not in gcs, gcs  # one cluster, joined by both workers and the actors
    sessions = [p for p in (Path(env["RAY_TMPDIR"]) / "ray").iterdir() if p.name.startswith("session_2")]
    assert len(sessions) == 1, sessions
    assert not ray_processes(env["RAY_TMPDIR"])  # stopped with the run (the start's thread outlived it)
    # One record (and one dated copy) by the controller, with what the workers measured.
    assert len(list((root / "out" / "unit_results").glob("*.json"))) == 1
    assert {k: v["outcome"] for k, v in doc["tests"].items()} == {
        f"tests/test_{name}.py::test_{name}": "passed" for name in ("actor", "local", "joins", "also")}  # fmt: skip
    assert all(m["_elapsed"] > 0 for m in metrics.values())
    if Path("/dev/nvidiactl").exists():  # NVIDIA GPUs here: the tracker reads their memory
        assert doc["memory_source"] == "gpu" and metrics["test_actor::test_actor"]["mem"] >= 0
    else:
        assert doc["memory_source"] == "rss" and metrics["test_actor::test_actor"]["mem"] > 0
    assert bool(doc["gpu_types"]) == Path("/dev/nvidiactl").exists(), doc["gpu_types"]
    # Coverage combined over the xdist workers AND the Ray worker that ran Doubler.run.
    assert isinstance(doc["coverage"], float)
    cov = json.loads((root / "cov.json").read_text())["files"]
    helper = next(v for k, v in cov.items() if k.endswith("helper.py"))
    assert 2 in helper["executed_lines"]  # `return x * 2`: only ever run inside the actor


def test_a_cluster_in_ray_address_is_joined_and_left_running(tmp_path: Path, shared_head: Head) -> None:
    root = make_project(tmp_path, ACTOR_FILES)
    proc = run_pytest(root, "-n", "2", env=env_for(root, shared_head))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "share the Ray cluster joined at" in proc.stdout and not (root / "STARTED_BY_HOOK").exists()
    assert {m["gcs"] for m in results_of(root)["metrics"].values()} == {shared_head.address}


def test_a_cluster_that_fails_to_start_ends_the_run_with_exit_3(tmp_path: Path) -> None:
    files = {**ACTOR_FILES, "conftest.py": (
        "pytest_plugins = ['testharness.plugin']\n\n"
        "def pytest_testharness_start_ray(config, workers):\n"
        "    raise RuntimeError('no cluster today')\n"
    )}  # fmt: skip
    root = make_project(tmp_path, files)
    proc = run_pytest(root, "-n", "2", env=env_for(root), timeout=120)
    assert proc.returncode == 3, proc.stdout
    assert "testharness: could not start the Ray cluster for -n: no cluster today" in proc.stdout
    assert " passed" not in proc.stdout and " failed" not in proc.stdout
