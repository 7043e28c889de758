"""testharness.hygiene's pure core: snapshots, leaks, stacks and reasons (no Ray, no pytest hooks)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from testharness import results
from testharness.hygiene import core
from testharness.hygiene.core import Actor, Group, Leak, Proc, Snapshot
from testharness.settings import SettingsError, load_settings

A = Actor("a" * 32, "Policy", pid=10, node_id="n1")
B = Actor("b" * 32, "LeakyActor", pid=11, node_id="n1", name="keeper", namespace="ns", detached=True)
G = Group("c" * 36, name="pg", strategy="PACK", bundles=2)
P = Proc(99, 1234.0, "sleep 600")


def test_what_a_test_created_and_did_not_end_is_a_leak_named_by_class() -> None:
    before = Snapshot(actors={A.id: A}, ray=True)
    after = Snapshot(actors={A.id: A, B.id: B}, groups={G.id: G}, procs={(P.pid, P.start): P}, ray=True)
    leaks = core.leaks_between(before, after)
    assert [(x.kind, x.what) for x in leaks] == [
        ("actor", "LeakyActor"),
        ("placement_group", "'pg'"),
        ("process", "sleep 600"),
    ]
    assert "named 'keeper' in namespace 'ns'" in leaks[0].detail and "detached" in leaks[0].detail
    assert leaks[2].detail == "pid 99"


def test_a_broader_fixtures_resources_are_not_the_tests_until_its_scope_ends() -> None:
    owned = Snapshot(actors={B.id: B})
    after = Snapshot(actors={B.id: B}, ray=True)
    assert core.leaks_between(Snapshot(), after, owned) == []
    # its finalizer ran and the actor is still there: charged to the fixture
    (leak,) = core.still_held(owned, after, "module fixture 'policy'")
    assert leak.line().endswith("[module fixture 'policy']") and leak.what == "LeakyActor"
    assert core.still_held(owned, Snapshot(ray=True), "x") == []


def test_actors_count_only_when_ray_was_read_after_the_test() -> None:
    # Ray connected during the test: before had no job, so every actor after is new
    assert [x.what for x in core.leaks_between(Snapshot(ray=False), Snapshot(actors={A.id: A}, ray=True))] == ["Policy"]
    # Ray shut down during teardown: nothing to say about actors (they ended with the job)
    assert core.leaks_between(Snapshot(actors={}, ray=True), Snapshot(ray=False)) == []


def test_gpu_memory_above_the_level_before_by_more_than_the_threshold() -> None:
    before = {"local:0": 1000.0, "local:1": 500.0}
    after = {"local:0": 1900.0, "local:1": 2600.0, "local:2": 9000.0}  # local:2 not read before
    (leak,) = core.gpu_growth(before, after, 1024)
    assert leak.what == "GPU local:1" and leak.detail.startswith("+2100 MiB (500 -> 2600)")
    # a broader fixture took 2 GiB on GPU 1 during the test's setup: that is its memory
    assert core.gpu_growth(core.add_gpus(before, {"local:1": 2048.0}), after, 1024) == []
    assert core.gpu_delta({"g": 1.0}, {"g": 3.0, "h": 1.0}) == {"g": 2.0}


def test_leaks_round_trip_through_the_results_file_and_old_files_still_read(tmp_path: Path) -> None:
    leak = Leak("actor", "LeakyActor", "id bbbb, pid 11", "module fixture 'x'")
    assert Leak.from_json(leak.as_json()) == leak and Leak.from_json({"kind": 1}) is None
    rec = results.OutcomeRecord(key="m::t", leaks=[leak.as_json()], hang={"reason": "Timeout", "stacks": []})
    plain = results.OutcomeRecord(key="m::u")
    assert "leaks" not in plain.as_json() and "hang" not in plain.as_json()  # the old form, unchanged
    doc = {"tests": {"t.py::t": rec.as_json(), "t.py::u": plain.as_json(), "t.py::v": {"leaks": [{"x": 1}, 3]}}}
    path = tmp_path / "r.json"
    path.write_text(json.dumps(doc))
    run = results.read_results_file(path)
    assert run.tests["t.py::t"].leaks == (leak.as_json(),) and run.tests["t.py::t"].hang == rec.hang
    assert run.tests["t.py::u"].leaks == () and run.tests["t.py::u"].hang is None
    assert run.tests["t.py::v"].leaks == ()  # malformed entries are skipped, the run still reads


def test_the_summary_block_and_the_fail_on_leak_line() -> None:
    leaks = [Leak("actor", f"C{i}", "id x") for i in range(5)]
    lines = core.summary_lines({"t.py::b": leaks[:1], "t.py::a": leaks, "t.py::c": []})
    assert lines[0] == "t.py::a: 5 leak(s)" and lines[1] == "    actor C0 (id x)" and lines[6] == "t.py::b: 1 leak(s)"
    assert core.failure_line(leaks) == (
        "leaked 5 resource(s) after teardown: actor C0 (id x); actor C1 (id x); actor C2 (id x); and 2 more"
    )


PYSPY = [
    {
        "thread_name": "PythonGCThread",
        "frames": [{"name": "Condition.wait", "filename": "/usr/lib/python3.11/threading.py", "line": 327}],
    },
    {
        "thread_name": "MainThread",
        "frames": [
            {"name": "all_reduce", "filename": "/v/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py", "line": 4181},
            {"name": "_exception_logger.<locals>.wrapper", "filename": "/v/lib/python3.11/site-packages/torch/distributed/c10d_logger.py", "line": 83},
            {"name": "Rank.all_reduce", "filename": "/repo/tests/helpers.py", "line": 39},
            {"name": "actor_method_executor", "filename": "/v/lib/python3.11/site-packages/ray/_private/function_manager.py", "line": 740},
            {"name": "Worker.main_loop", "filename": "/v/lib/python3.11/site-packages/ray/_private/worker.py", "line": 1069},
            {"name": "<module>", "filename": "/v/lib/python3.11/site-packages/ray/_private/workers/default_worker.py", "line": 323},
        ],
    },
]  # fmt: skip


def test_the_stuck_actor_method_file_and_line_from_a_pyspy_dump() -> None:
    threads = core.parse_pyspy_json(json.dumps(PYSPY), root="/repo")
    assert threads[0].name == "MainThread" and threads[0].frames[2].file == "tests/helpers.py"
    stack = core.Stack("actor Rank (pid 5)", 5, threads, actor_class="Rank")
    stuck = core.actor_stuck(stack)
    assert stuck is not None and stuck.label == "actor Rank.all_reduce" and stuck.frame.where() == "tests/helpers.py:39"
    reason = core.hang_reason(60, [stuck], None)
    assert reason == (
        "Timeout: the test ran over 60 s; actor Rank.all_reduce at tests/helpers.py:39 "
        "(in all_reduce, torch/distributed/distributed_c10d.py:4181)"
    )
    record = core.hang_record(60, reason, [stuck], [stack])
    assert record["stuck"] == [{"where": "actor Rank.all_reduce", "file": "tests/helpers.py", "line": 39}]
    assert "Rank.all_reduce (tests/helpers.py:39)" in record["stacks"][0]["stack"]


def test_an_idle_actor_is_not_stuck_and_a_stack_error_is_said() -> None:
    idle = [{"thread_name": "MainThread", "frames": PYSPY[1]["frames"][-2:]}]  # type: ignore[index]
    assert core.actor_stuck(core.Stack("a", 1, core.parse_pyspy_json(json.dumps(idle)))) is None
    assert core.Stack("actor X (pid 3)", 3, error="py-spy may not attach").text() == (
        "--- actor X (pid 3): no stack (py-spy may not attach)"
    )
    with pytest.raises(ValueError, match="py-spy printed no JSON"):
        core.parse_pyspy_json("Error: Permission denied")


def test_without_a_busy_actor_the_reason_names_the_test_process_line() -> None:
    frames = core.frames_of_python(
        [("test_x", "/repo/tests/test_x.py", 12), ("sleep", "/repo/lib/util.py", 3)], "/repo"
    )
    stuck = core.driver_stuck(frames, "tests/test_x.py")
    assert core.hang_reason(5, [], stuck) == (
        "Timeout: the test ran over 5 s; no Ray actor was busy; test process at tests/test_x.py:12 (in sleep, lib/util.py:3)"
    )


def test_hygiene_settings_and_a_bad_value_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text("[tool.testharness.hygiene]\ntimeout = 30\nfail_on_leak = true\n")
    h = load_settings(tmp_path).hygiene
    assert (h.timeout, h.fail_on_leak, h.leak_check, h.gpu_threshold_mib) == (30.0, True, True, 1024.0)
    (tmp_path / "pyproject.toml").write_text('[tool.testharness.hygiene]\ngpu_threshold_mib = "big"\n')
    with pytest.raises(SettingsError, match=r"hygiene\] gpu_threshold_mib must be a number >= 0, got 'big'$"):
        load_settings(tmp_path)
    (tmp_path / "pyproject.toml").write_text("[tool.testharness.hygiene]\ntimout = 3\n")
    with pytest.raises(SettingsError, match="timout is not a known key"):
        load_settings(tmp_path)
