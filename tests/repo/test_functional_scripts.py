"""tests/functional/run_all.sh and common.sh, driven with fake functional scripts.

The real scripts are copied into a temporary tree next to fake experiments, so nothing
here starts Ray or trains a model.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
FUNCTIONAL = REPO_ROOT / "tests" / "functional"

pytestmark = pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")


def fake_script(directory: Path, name: str, body: str, gpus: int | None = 0) -> Path:
    header = f"# num-gpus: {gpus}\n" if gpus is not None else ""
    path = directory / f"{name}.sh"
    path.write_text(f"#!/usr/bin/env bash\n# A fake functional test.\n{header}{body}\n")
    return path


@pytest.fixture
def fdir(tmp_path: Path) -> Path:
    d = tmp_path / "functional"
    d.mkdir()
    shutil.copy(FUNCTIONAL / "run_all.sh", d / "run_all.sh")
    # common.sh sits next to the scripts and must never be run as a test.
    shutil.copy(FUNCTIONAL / "common.sh", d / "common.sh")
    return d


def run_all(fdir: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    full_env = {**os.environ, **(env or {})}
    return subprocess.run(
        ["bash", str(fdir / "run_all.sh"), *args],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
        env=full_env,
    )


def summary_rows(stdout: str) -> dict[str, list[str]]:
    lines = stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("NAME")) + 1
    rows = {}
    for line in lines[start:]:
        parts = line.split(None, 3)
        rows[parts[0]] = parts[1:]
    return rows


def test_summary_table_pass_fail_skip_error(fdir: Path) -> None:
    fake_script(fdir, "good", "echo good-ran; exit 0")
    fake_script(fdir, "bad", "echo bad-ran; exit 3")
    fake_script(fdir, "bigjob", "echo must-not-run; exit 0", gpus=8)
    fake_script(fdir, "undeclared", "echo must-not-run; exit 0", gpus=None)
    proc = run_all(fdir, "--gpus", "0")
    assert proc.returncode == 1
    assert "good-ran" in proc.stdout and "bad-ran" in proc.stdout
    assert "must-not-run" not in proc.stdout
    rows = summary_rows(proc.stdout)
    # Not common.sh / run_all.sh.
    assert set(rows) == {"good", "bad", "bigjob", "undeclared"}
    assert rows["good"][0] == "PASS"
    assert rows["bad"][0] == "FAIL" and "exit status 3" in rows["bad"][2]
    assert rows["bigjob"][0] == "SKIP" and "needs 8 GPU(s), 0 available" in rows["bigjob"][2]
    assert rows["undeclared"][0] == "ERROR" and "num-gpus" in rows["undeclared"][2]
    assert rows["good"][1].endswith("s")  # wall time, e.g. 0.0s
    assert rows["bigjob"][1] == "-"


def test_all_passing_exits_0_and_gpu_scripts_run_with_enough_gpus(fdir: Path) -> None:
    fake_script(fdir, "a", "exit 0")
    fake_script(fdir, "b", "exit 0", gpus=2)
    proc = run_all(fdir, "--gpus", "2")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = summary_rows(proc.stdout)
    assert rows["a"][0] == rows["b"][0] == "PASS"


def test_names_select_scripts_and_pass_overrides_after_double_dash(fdir: Path, tmp_path: Path) -> None:
    record = tmp_path / "args.txt"
    fake_script(fdir, "one", f'printf "%s\\n" "$@" > {record}; exit 0')
    fake_script(fdir, "two", "echo two-ran; exit 1")
    proc = run_all(fdir, "one.sh", "--gpus=0", "--", "policy.optimizer.lr=0", "x.y=a b")
    assert proc.returncode == 0, proc.stderr
    assert "two-ran" not in proc.stdout
    assert record.read_text().splitlines() == ["policy.optimizer.lr=0", "x.y=a b"]
    assert set(summary_rows(proc.stdout)) == {"one"}


def test_scripts_run_in_the_given_order(fdir: Path, tmp_path: Path) -> None:
    order = tmp_path / "order.txt"
    for name in ("x", "y"):
        fake_script(fdir, name, f"echo {name} >> {order}")
    assert run_all(fdir, "y", str(fdir / "x.sh"), "--gpus", "0").returncode == 0
    assert order.read_text().split() == ["y", "x"]


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["nope"], "no functional test 'nope'"),
        (["common"], "no functional test 'common'"),
        (["--frobnicate"], "unknown option '--frobnicate'"),
        (["--gpus"], "--gpus needs a number"),
        (["--gpus", "many"], "--gpus needs a number"),
    ],
)
def test_usage_errors_exit_2_before_running_anything(fdir: Path, args: list[str], needle: str) -> None:
    fake_script(fdir, "good", "echo good-ran")
    proc = run_all(fdir, *args)
    assert proc.returncode == 2
    assert needle in proc.stderr
    assert "good-ran" not in proc.stdout


def test_nothing_ran_is_a_failure(fdir: Path) -> None:
    fake_script(fdir, "gpuonly", "exit 0", gpus=1)
    proc = run_all(fdir, env={"CUDA_VISIBLE_DEVICES": ""})  # detected: 0 GPUs
    assert proc.returncode == 1
    assert "no functional test ran" in proc.stderr
    assert summary_rows(proc.stdout)["gpuonly"][0] == "SKIP"


def test_list_and_help(fdir: Path) -> None:
    fake_script(fdir, "cpu", "exit 0")
    fake_script(fdir, "gpu", "exit 0", gpus=4)
    proc = run_all(fdir, "--list")
    assert proc.returncode == 0
    assert "cpu" in proc.stdout and "gpu" in proc.stdout and "4" in proc.stdout
    help_proc = run_all(fdir, "--help")
    assert help_proc.returncode == 0 and "--gpus N" in help_proc.stdout


def test_real_scripts_declare_their_gpus() -> None:
    scripts = [p for p in FUNCTIONAL.glob("*.sh") if p.name not in ("common.sh", "run_all.sh")]
    assert scripts, "no functional test scripts"
    for script in scripts:
        assert "\n# num-gpus: " in script.read_text(), script


# ------------------------------------------------------------------ common.sh


@pytest.fixture
def fake_repo(tmp_path: Path) -> Path:
    """A repo layout with the real common.sh and entry points, and a fake asset builder."""
    repo = tmp_path / "repo"
    (repo / "tests" / "functional").mkdir(parents=True)
    (repo / "tests" / "unit").mkdir(parents=True)
    shutil.copy(FUNCTIONAL / "common.sh", repo / "tests" / "functional" / "common.sh")
    for entry in ("check_metrics.py", "json_dump_tb_logs.py"):
        shutil.copy(REPO_ROOT / "tests" / entry, repo / "tests" / entry)
    (repo / "tests" / "unit" / "prepare_unit_test_assets.py").write_text(
        "from pathlib import Path\n"
        "p = Path(__file__).parent / 'test_assets' / 'marker'\n"
        "p.parent.mkdir(parents=True, exist_ok=True)\n"
        "p.write_text('built')\n"
        "print('assets built')\n"
    )
    (repo / "train.py").write_text(
        "import sys\n"
        "from torch.utils.tensorboard import SummaryWriter\n"
        "args = dict(a.split('=', 1) for a in sys.argv[1:])\n"
        "lr = float(args.get('lr', '1'))\n"
        "w = SummaryWriter(args['log_dir'])\n"
        "for step in range(1, 11):\n"
        "    w.add_scalar('train/loss', 10.0 - lr * step * 0.9, step)\n"
        "w.close()\n"
        "if args.get('damage'):  # an event file that is not one\n"
        "    from pathlib import Path\n"
        "    for p in Path(args['log_dir']).rglob('events.*'): p.write_bytes(b'garbage')\n"
        "print('trained with', sys.argv[1:])\n"
        "sys.exit(int(args.get('exit', '0')))\n"
    )
    script = repo / "tests" / "functional" / "toy.sh"
    script.write_text(
        "#!/usr/bin/env bash\n"
        "# num-gpus: 0\n"
        'source "$(dirname "${BASH_SOURCE[0]}")/common.sh"\n'
        "run_experiment() {\n"
        "    functional_require_assets tests/unit/test_assets/marker\n"
        '    mkdir -p "$CKPT_DIR" && echo weights > "$CKPT_DIR/step_5.pt"\n'
        '    functional_python train.py log_dir="$LOG_DIR" "$@"\n'
        "}\n"
        "check_experiment() {\n"
        '    functional_check \'data["train/loss"]["10"] < 0.5 * data["train/loss"]["1"]\'\n'
        "}\n"
        'functional_main "$@"\n'
    )
    return repo


def run_toy(repo: Path, *overrides: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHON": sys.executable}
    return subprocess.run(
        ["bash", str(repo / "tests" / "functional" / "toy.sh"), *overrides],
        check=False,
        capture_output=True,
        text=True,
        timeout=180,
        env=env,
        cwd=cwd,
    )


def test_common_runs_dumps_checks_and_cleans_up(fake_repo: Path, tmp_path: Path) -> None:
    exp = fake_repo / "tests" / "functional" / "toy"
    exp.mkdir()
    (exp / "stale.txt").write_text("from a previous run")
    proc = run_toy(fake_repo, cwd=tmp_path)  # from another directory
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "assets built" in proc.stdout
    assert "Metric Checks" in proc.stdout and "toy: PASS" in proc.stdout
    assert sorted(p.name for p in exp.iterdir()) == [
        "checks.json",
        "logs",
        "metrics.json",
        "reach",  # what the run reached, for run_all.sh --affected
        "run.log",
    ]
    assert "trained with" in (exp / "run.log").read_text()
    metrics = json.loads((exp / "metrics.json").read_text())
    assert len(metrics["train/loss"]) == 10
    assert json.loads((exp / "checks.json").read_text())["passed"] is True


def test_common_checks_bite_and_overrides_pass_through(fake_repo: Path) -> None:
    proc = run_toy(fake_repo, "lr=0")
    assert proc.returncode == 1
    assert "trained with ['log_dir=" in proc.stdout and "'lr=0']" in proc.stdout
    assert "condition evaluated to False" in proc.stdout
    assert "toy: FAIL" in proc.stdout
    assert not (fake_repo / "tests" / "functional" / "toy" / "checkpoints").exists()


def test_common_unreadable_logs_fail_without_blaming_the_checks(fake_repo: Path) -> None:
    exp = fake_repo / "tests" / "functional" / "toy"
    exp.mkdir()
    (exp / "checks.json").write_text('{"passed": true}')  # a previous run's
    proc = run_toy(fake_repo, "damage=1")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "events." in proc.stdout + proc.stderr  # the dump names the damaged file
    assert "toy: FAIL (the metrics could not be read or checked" in proc.stdout
    assert "Metric Checks" not in proc.stdout and not (exp / "checks.json").exists()


def test_common_failed_run_propagates_its_status_and_skips_checks(
    fake_repo: Path,
) -> None:
    proc = run_toy(fake_repo, "exit=7")
    assert proc.returncode == 7
    assert "Metric Checks" not in proc.stdout
    assert "the run itself failed" in proc.stdout
    assert not (fake_repo / "tests" / "functional" / "toy" / "checkpoints").exists()


def test_common_precheck_failure_stops_before_the_experiment_dir_is_touched(fake_repo: Path) -> None:
    script = fake_repo / "tests" / "functional" / "toy.sh"
    body = script.read_text().replace(
        "check_experiment() {",
        'precheck_experiment() {\n    echo "checked: $*"\n    [[ "$*" != *lr=-1* ]] || { echo "error: lr must be > 0" >&2; return 2; }\n}\n'
        "check_experiment() {",
    )
    script.write_text(body)
    exp = fake_repo / "tests" / "functional" / "toy"
    exp.mkdir()
    (exp / "previous.txt").write_text("a previous run's results")
    proc = run_toy(fake_repo, "lr=-1")
    assert proc.returncode == 2
    assert proc.stderr == "error: lr must be > 0\n"
    assert "trained with" not in proc.stdout
    assert sorted(p.name for p in exp.iterdir()) == ["previous.txt"]
    good = run_toy(fake_repo, "lr=1")
    assert good.returncode == 0, good.stdout + good.stderr
    assert "checked: lr=1" in good.stdout and "toy: PASS" in good.stdout


@pytest.mark.parametrize("flag", ["--help", "-h"])
def test_common_help_prints_the_header(fake_repo: Path, flag: str) -> None:
    script = fake_repo / "tests" / "functional" / "toy.sh"
    script.write_text(
        script.read_text().replace(
            "# num-gpus: 0\n", "# A toy experiment.\n#\n#   bash toy.sh [k=v ...]\n# num-gpus: 0\n"
        )
    )
    proc = run_toy(fake_repo, "lr=1", flag)
    assert (proc.returncode, proc.stderr) == (0, "")
    assert proc.stdout.startswith("A toy experiment.\n\n  bash toy.sh [k=v ...]\nnum-gpus: 0\n")
    assert "-h, --help" in proc.stdout and "trained with" not in proc.stdout
    assert not (fake_repo / "tests" / "functional" / "toy").exists()


# ------------------------------------------------ the real scripts: usage and refusals, no training

REAL_SCRIPTS = ["sft.sh", "grpo.sh", "sft_megatron.sh", "sft_resume.sh", "sft_two_workers.sh", "eval.sh"]


@pytest.fixture
def real(tmp_path: Path) -> Path:
    """The real scripts in a checkout of their own, each with a previous run's results beside
    it: what they write, or must leave alone, is there, never in this checkout, where another
    run may be writing at the same time (CI's functional step runs grpo.sh while a container
    runs this suite on the same checkout). The rest of the repository is linked."""
    functional = tmp_path / "repo" / "tests" / "functional"
    functional.mkdir(parents=True)
    for script in FUNCTIONAL.glob("*.sh"):
        shutil.copy2(script, functional / script.name)
    for name in ("examples", "tests/unit"):
        (tmp_path / "repo" / name).symlink_to(REPO_ROOT / name)
    for script in (*REAL_SCRIPTS, "run_all.sh"):
        previous = functional / Path(script).stem
        previous.mkdir()
        (previous / "run.log").write_text("a previous run\n")
    return tmp_path / "repo"


def run_real(repo: Path, script: str, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(repo / "tests" / "functional" / script), *args],
        check=False,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "PYTHON": sys.executable},
    )


def _dir_state(repo: Path, script: str) -> list[tuple[str, str]]:
    """The script's experiment folder: every file and its text."""
    exp = repo / "tests" / "functional" / Path(script).stem
    return sorted((str(p.relative_to(exp)), p.read_text() if p.is_file() else "") for p in exp.rglob("*"))


@pytest.mark.parametrize("script", [*REAL_SCRIPTS, "run_all.sh"])
@pytest.mark.parametrize("flag", ["--help", "-h"])
def test_real_scripts_help(real: Path, script: str, flag: str) -> None:
    before = _dir_state(real, script)
    proc = run_real(real, script, "policy.optimizer.lr=1e-3", flag)
    assert (proc.returncode, proc.stderr) == (0, "")
    first_comment = (FUNCTIONAL / script).read_text().splitlines()[1].removeprefix("# ")
    assert proc.stdout.startswith(first_comment + "\n")
    assert "-h, --help" in proc.stdout
    assert "[functional]" not in proc.stdout and "Metric Checks" not in proc.stdout  # nothing ran
    assert _dir_state(real, script) == before == [("run.log", "a previous run\n")]  # left alone


@pytest.mark.parametrize(
    "script, args, message",
    [
        *[
            (
                s,
                ["--bogus"],
                (f"error: unknown option '--bogus'; arguments are key=value config overrides (see {s} --help)"),
            )
            for s in REAL_SCRIPTS
        ],
        ("sft.sh", ["sft.max_num_steps=3", "-x"], "error: unknown option '-x'"),
        ("run_all.sh", ["--bogus"], "error: unknown option '--bogus' (see --help)"),
        ("run_all.sh", ["sft", "--", "--bogus"], "error: '--bogus' after -- is not a key=value config override"),
        ("run_all.sh", ["sft", "--", "nonsense"], "error: 'nonsense' after -- is not a key=value config override"),
    ],
)
def test_real_scripts_refuse_unknown_flags_at_once(real: Path, script: str, args: list[str], message: str) -> None:
    before = _dir_state(real, script)
    proc = run_real(real, script, *args)
    assert proc.returncode == 2
    assert proc.stderr.splitlines() == [proc.stderr.strip()] and proc.stderr.startswith(message)
    assert proc.stdout == ""
    assert _dir_state(real, script) == before


@pytest.mark.parametrize(
    "script, override, message",
    [
        ("sft.sh", "nonsense", "error: override 'nonsense' is not of the form key=value"),
        ("sft.sh", "sft.max_num_stepz=3", "error: unknown config key 'sft.max_num_stepz'"),
        ("grpo.sh", "policy.optimizer.lr=-1", "error: policy.optimizer.lr must be a finite number >= 0, got -1"),
        ("grpo.sh", "grpo.num_prompts_per_step=0", "error: grpo.num_prompts_per_step must be an integer >= 1"),
        ("sft_resume.sh", "sft.max_num_steps=8", "error: sft.max_num_steps must be an integer >= 10 here"),
        ("sft_resume.sh", "sft.val_batches=0", "error: sft.val_batches must be an integer >= 1, got 0"),
        ("sft_two_workers.sh", "sft.max_num_stepz=3", "error: unknown config key 'sft.max_num_stepz'"),
        ("eval.sh", "eval.num_prompts=-1", "error: eval.num_prompts must be an integer >= 0, got -1"),
    ],
)
def test_real_scripts_check_overrides_before_training(real: Path, script: str, override: str, message: str) -> None:
    """grpo.sh checks GRPO's overrides before its SFT warm-up, eval.sh the evaluation's before its SFT:
    seconds, not minutes."""
    before = _dir_state(real, script)
    proc = run_real(real, script, override)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.splitlines() == [proc.stderr.strip()] and proc.stderr.startswith(message)
    assert "warm-up" not in proc.stdout and "[functional]" not in proc.stdout
    assert _dir_state(real, script) == before
