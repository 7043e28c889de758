"""run_all.sh --affected on a toy git repository: the real run_all.sh, common.sh, coverage,
probe and git; a toy package whose two scripts reach different functions."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from toy_functional import ENV, edit, git, run_all, verdicts, write_toy

pytestmark = pytest.mark.skipif(
    shutil.which("bash") is None or shutil.which("git") is None, reason="needs bash and git"
)


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The toy repository, committed, after one recording run_all.sh (both scripts pass)."""
    repo = tmp_path_factory.mktemp("toy")
    write_toy(repo)
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", ".")
    git(repo, "commit", "-q", "-m", "toy")
    done = run_all(repo)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.count("[functional] reach recorded in .toy_reach.json") == 2, done.stdout
    return repo


@pytest.fixture
def toy(recorded: Path) -> Iterator[Path]:
    """The recorded repository; every edit a test makes is undone after it."""
    yield recorded
    git(recorded, "checkout", "-q", "--", ".")
    git(recorded, "clean", "-q", "-f", "-e", "tests/functional/*/", "-e", ".toy_reach.json")


SKIPPED = "skipped: nothing it reached changed"


def test_no_change_runs_nothing_and_says_so(toy: Path, tmp_path: Path) -> None:
    assert verdicts(toy) == {"first": SKIPPED, "second": SKIPPED}
    summary = tmp_path / "step.md"
    done = run_all(toy, "--affected", GITHUB_STEP_SUMMARY=str(summary))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "=== [run_all]" not in done.stdout
    assert "nothing to run: no script this machine can run is selected" in done.stdout
    assert "not selected: nothing it reached changed" in done.stdout
    assert "| first | SKIP | - | not selected: nothing it reached changed |" in summary.read_text()


@pytest.mark.parametrize(
    "rel, old, new, first, second",
    [
        ("toypkg/model.py", "def first_loss(step):\n    return 10.0", "def first_loss(step):\n    return 10.5",
         "runs: changed toypkg/model.py::first_loss", SKIPPED),
        ("toypkg/model.py", "SCALE = 1.0", "SCALE = 1.01",
         "runs: changed toypkg/model.py (import-time code)", "runs: changed toypkg/model.py (import-time code)"),
        ("settings.txt", "a setting", "another", "runs: changed settings.txt", "runs: changed settings.txt"),
        ("tests/functional/second.sh", "num-gpus: 0", "num-gpus: 0 ", SKIPPED, "runs: changed tests/functional/second.sh"),
        ("uv.lock", "lock", "new lock", "runs: uv.lock changed", "runs: uv.lock changed"),
        ("docs/guide.md", "guide", "more guide", SKIPPED, SKIPPED),
        ("tests/functional/common.sh", "set -euo pipefail", "set -euo pipefail  # edited",
         "runs: tests/functional/common.sh changed (the functional harness)",
         "runs: tests/functional/common.sh changed (the functional harness)"),
    ],
    ids=["one function", "import-time code", "a file the driver read", "the script", "environment", "unrelated", "harness"],
)  # fmt: skip
def test_an_edit_runs_the_scripts_that_reached_it(
    toy: Path, rel: str, old: str, new: str, first: str, second: str
) -> None:
    edit(toy, rel, old, new)
    assert verdicts(toy) == {"first": first, "second": second}


def test_a_file_no_run_read_runs_everything(toy: Path) -> None:
    (toy / "data.json").write_text("{}")
    why = "runs: changed data.json, which no recorded run reads (the reach cannot see it)"
    assert verdicts(toy) == {"first": why, "second": why}


def test_since_a_revision_judges_the_difference_from_it(toy: Path) -> None:
    edit(toy, "toypkg/model.py", "def second_loss(step):\n    return 10.0", "def second_loss(step):\n    return 10.5")
    git(toy, "commit", "-q", "-am", "second changes")
    try:
        assert verdicts(toy) == {"first": SKIPPED, "second": "runs: changed toypkg/model.py::second_loss"}
        assert verdicts(toy, "--since", "HEAD") == {"first": SKIPPED, "second": SKIPPED}
        assert verdicts(toy, "--since", "HEAD~1") == {
            "first": SKIPPED,
            "second": "runs: changed toypkg/model.py::second_loss",
        }
        bad = run_all(toy, "--affected", "--since", "no-such-branch")
        assert bad.returncode == 2 and "'no-such-branch' names no commit" in bad.stderr
        assert run_all(toy, "--since", "HEAD").returncode == 2  # --since without --affected
    finally:
        git(toy, "reset", "-q", "--hard", "HEAD~1")


def test_a_failing_script_runs_until_it_passes_and_an_affected_run_records(toy: Path) -> None:
    edit(
        toy,
        "toypkg/model.py",
        "def first_loss(step):\n    return 10.0 - 0.9",
        "def first_loss(step):\n    return 10.0 - 0.0",
    )
    done = run_all(toy, "--affected")
    assert done.returncode == 1
    assert "=== [run_all] first" in done.stdout and "=== [run_all] second" not in done.stdout
    assert "first failed: it runs under --affected until it passes" in done.stdout
    git(toy, "checkout", "-q", "--", "toypkg/model.py")
    assert verdicts(toy)["first"] == "runs: failed at its last run"
    done = run_all(toy, "--affected")
    assert done.returncode == 0, done.stdout + done.stderr
    assert verdicts(toy) == {"first": SKIPPED, "second": SKIPPED}


def test_a_damaged_reach_file_runs_every_script_with_one_line_and_is_mended(toy: Path) -> None:
    reach = toy / ".toy_reach.json"
    nested = "[" * 100_000 + "]" * 100_000  # json.loads: RecursionError (a traceback in every run, once)
    reach.write_text(nested)
    listed = run_all(toy, "--affected", "--list")
    assert listed.returncode == 0 and "Traceback" not in listed.stdout + listed.stderr, listed.stdout + listed.stderr
    (warning,) = listed.stderr.splitlines()
    assert warning.startswith("warning: .toy_reach.json is corrupted (JSON nested too deep); moved it to "), warning
    assert warning.endswith("; every script runs until a passing run records it again"), warning
    rows = {row.split()[0]: row.split(None, 2)[2] for row in listed.stdout.splitlines()[1:]}
    assert rows == {"first": "runs: never recorded", "second": "runs: never recorded"}
    (aside,) = toy.glob(".toy_reach.json.corrupt-*")
    assert aside.read_text() == nested
    aside.unlink()
    # Every script runs, and their passing runs' records mend the file.
    done = run_all(toy, "--affected")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "=== [run_all] first" in done.stdout and "=== [run_all] second" in done.stdout
    assert verdicts(toy) == {"first": SKIPPED, "second": SKIPPED}


def test_a_run_with_overrides_records_nothing(toy: Path) -> None:
    edit(toy, "toypkg/model.py", "def first_loss(step):\n    return 10.0", "def first_loss(step):\n    return 10.5")
    done = run_all(toy, "first", "--", "unused=1")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "reach not recorded: a run with config overrides is not the script's own" in done.stdout
    assert verdicts(toy)["first"] == "runs: changed toypkg/model.py::first_loss"


def test_shards_split_the_selected_scripts_by_their_recorded_durations(toy: Path) -> None:
    edit(toy, "toypkg/model.py", "SCALE = 1.0", "SCALE = 1.01")  # both scripts affected
    one, two = verdicts(toy, "--shard", "1/2"), verdicts(toy, "--shard", "2/2")
    runs = {name for v in (one, two) for name, why in v.items() if why.startswith("runs: ")}
    assert runs == {"first", "second"}
    assert sum(why.startswith("runs: ") for why in one.values()) == 1
    assert any(why.startswith("skipped: shard 2/2 runs it") for why in one.values())
    assert all(why.endswith("; shard 1/2") for why in one.values() if why.startswith("runs: "))
    git(toy, "checkout", "-q", "--", "toypkg/model.py")
    assert verdicts(toy, "--shard", "1/2") == {"first": SKIPPED, "second": SKIPPED}  # --affected --list adds it
    plain = run_all(toy, "--list", "--shard", "2/2")  # without --affected: a shard of every script
    assert plain.returncode == 0 and plain.stdout.count("runs: selected; shard 2/2") == 1, plain.stdout
    bad = run_all(toy, "--shard", "3/2")
    assert bad.returncode == 2 and "--shard" in bad.stderr


def _as_from_a_terminal() -> None:
    """SIGINT and SIGHUP at their defaults, as a terminal user's script has them: a suite run as
    a background job of a non-interactive shell passes them on ignored (and bash cannot trap a
    signal ignored at its start)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGHUP, signal.SIG_DFL)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_an_interrupted_run_records_nothing(toy: Path, sig: signal.Signals) -> None:
    reach = toy / ".toy_reach.json"
    before = reach.read_bytes()
    edit(toy, "toypkg/model.py", "def first_loss(step):\n    return 10.0", "def first_loss(step):\n    return 10.5")
    env = {**ENV, "TOY_SLEEP": "60"}
    proc = subprocess.Popen(
        ["bash", "tests/functional/first.sh"], cwd=toy, env=env, start_new_session=True,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, preexec_fn=_as_from_a_terminal,
    )  # fmt: skip
    assert proc.stdout is not None
    for line in proc.stdout:  # interrupt once the run has trained (its TensorBoard logs exist)
        if "[functional] overrides:" in line:
            break
    deadline = time.monotonic() + 60
    while not list((toy / "tests" / "functional" / "first" / "logs").glob("events.*")):
        assert time.monotonic() < deadline, "the toy run did not start"
        time.sleep(0.2)
    os.killpg(proc.pid, sig)  # as Ctrl-C (the terminal's process group) or a job scheduler does
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode != 0, out
    assert reach.read_bytes() == before, out  # neither a record nor a "failed" mark
    assert "reach recorded" not in out and "failed: it runs" not in out
