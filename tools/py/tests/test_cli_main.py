"""`testharness <subcommand>`: one command, argparse, --help everywhere, same behaviour as the entry points."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from testharness import __main__ as cli
from testharness import unit_runner

REPO_ROOT = Path(__file__).resolve().parents[3]
SUBCOMMANDS = ("report", "check-metrics", "tb-dump", "explain", "run-unit", "port-check")


def test_the_top_level_help_lists_every_subcommand(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    for name in SUBCOMMANDS:
        assert f"    {name}" in out


@pytest.mark.parametrize("name", SUBCOMMANDS)
def test_every_subcommand_has_help(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    try:
        code = cli.main([name, "--help"])
    except SystemExit as exc:  # argparse's help exits; unit_runner's returns
        code = int(exc.code or 0)
    assert code == 0
    assert "usage:" in capsys.readouterr().out


def test_an_unknown_subcommand_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["nope"])
    assert exit_info.value.code == 2
    assert "invalid choice: 'nope'" in capsys.readouterr().err


def test_run_unit_forwards_its_arguments_unchanged(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[list[str]] = []

    def fake_main(argv: list[str]) -> int:
        seen.append(argv)
        return 7

    monkeypatch.setattr(unit_runner, "main", fake_main)
    argv = ["--hf-gated", "-k", "not slow", "--shard", "1/2", "-x", "tests/unit/test_a.py::test_b[p]"]
    assert cli.main(["run-unit", *argv]) == 7
    assert seen == [argv]


def test_check_metrics_is_the_same_command_as_the_entry_point(tmp_path: Path) -> None:
    metrics = tmp_path / "metrics.json"
    metrics.write_text(json.dumps({"train/loss": {"1": 2.0, "2": 1.0}}))
    checks = ['data["train/loss"]["2"] < 1.5', 'mean(data["train/loss"]) < 1', "--table-width", "120"]

    def run(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, *argv], capture_output=True, text=True, timeout=120, check=False)

    via_cli = run("-m", "testharness", "check-metrics", str(metrics), *checks)
    via_entry = run(str(REPO_ROOT / "tests" / "check_metrics.py"), str(metrics), *checks)
    assert (via_cli.returncode, via_entry.returncode) == (1, 1)
    assert via_cli.stdout == via_entry.stdout
    assert "1/2 checks passed, 1 FAILED" in via_cli.stdout


def test_check_metrics_bad_input_is_one_line_and_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["check-metrics", str(tmp_path / "missing.json"), "1 < 2"]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        f"error: metrics file not found: {tmp_path / 'missing.json'}"
    ]


def test_tb_dump_without_event_files_exits_1_and_writes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "m.json"
    assert cli.main(["tb-dump", str(tmp_path), "--output_path", str(out)]) == 1
    assert capsys.readouterr().err.startswith("error: no TensorBoard event files")
    assert not out.exists()


def test_explain_is_the_remote_select_command(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["explain", "--root", str(REPO_ROOT), "tests/unit/distributed/test_worker_group.py"]) == 0
    out = capsys.readouterr().out
    assert "nemo_rl/distributed/worker_group.py" in out  # in the test file's static closure
