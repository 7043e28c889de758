"""Ctrl-C in a terminal during an example's run: the run stops cleanly, Ray with it.

The example starts a Ray cluster of its own, as on a workstation: SIGINT reaches the whole
process group, Ray's processes included, and nothing may be left. In a file of its own (see
tests/unit/example_runs.py).
"""

from __future__ import annotations

import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil

from tests.unit.example_runs import EXAMPLES, ROOT, example_env


def _descendants(pid: int) -> list[psutil.Process]:
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []


def _group_members(pgid: int) -> list[int]:
    members = []
    for p in psutil.process_iter():
        try:
            if os.getpgid(p.pid) == pgid:
                members.append(p.pid)
        except (ProcessLookupError, psutil.Error):
            pass
    return members


def test_ctrl_c_stops_cleanly(in_repo: Path, tmp_path: Path) -> None:
    """SIGINT to the process group, as a terminal sends it, once training has started."""
    proc = subprocess.Popen(
        [
            sys.executable,
            str(EXAMPLES / "run_sft.py"),
            "sft.max_num_steps=100000",
            "sft.val_period=0",
            f"logger.log_dir={tmp_path / 'logs'}",
            "checkpointing.enabled=false",
            "logger.monitor_gpus=false",
        ],
        cwd=ROOT,
        env=example_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    lines: queue.Queue[str | None] = queue.Queue()

    def pump() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.put(line)
        lines.put(None)

    threading.Thread(target=pump, daemon=True).start()
    out: list[str] = []
    deadline = time.monotonic() + 400
    try:
        while not any(re.match(r"step\s+1\b", line) for line in out):
            line = lines.get(timeout=max(deadline - time.monotonic(), 0.1))
            assert line is not None, "".join(out)
            out.append(line)
        children = _descendants(proc.pid)
        os.killpg(proc.pid, signal.SIGINT)
        rc = proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    while (line := lines.get(timeout=30)) is not None:
        out.append(line)
    text = "".join(out)
    assert rc == 130, text
    assert "Traceback" not in text
    assert "interrupted: stopping the workers and Ray" in text
    _, alive = psutil.wait_procs(children, timeout=15)
    assert [p.pid for p in alive] == [] and _group_members(proc.pid) == [], [p.cmdline() for p in alive]
