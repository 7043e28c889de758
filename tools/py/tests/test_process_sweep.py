"""Nothing outlives the run, whatever it does to its environment (issue 56): run_unit's
supervisor is a child subreaper on Linux, so a double-forked daemon with a scrubbed environment
comes back to it, and it ends and names it. Through tests/run_unit.sh on a throwaway project,
with a real double fork (setsid, sh's `&`) and a real environment of PATH alone.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from records_project import joining_under_xdist, read_results, run_unit_sh, write_project

from testharness import process_sweep

DAEMON = """
import os, subprocess, time
from pathlib import Path

def test_starts_a_daemon():
    pidfile = Path(os.environ["DAEMON_PID"])
    daemon = f"sh -c 'echo $$ > {pidfile}; exec sleep 300' > /dev/null 2>&1 < /dev/null &"
    subprocess.run(["setsid", "sh", "-c", daemon], env={"PATH": os.environ["PATH"]}, check=True)
    deadline = time.monotonic() + 10
    while not pidfile.exists() or not pidfile.read_text().strip():
        assert time.monotonic() < deadline, "the daemon never wrote its pid"
        time.sleep(0.05)

def test_b():
    pass
"""


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="a child subreaper is Linux's")
@pytest.mark.parametrize("xdist", [[], ["-n", "2"]], ids=["serial", "xdist"])
def test_a_double_forked_daemon_with_a_scrubbed_environment_is_ended_and_named(
    tmp_path: Path, xdist: list[str], request: pytest.FixtureRequest
) -> None:
    root = write_project(tmp_path, {"tests/test_a.py": DAEMON})
    pidfile = tmp_path / "daemon.pid"
    try:
        proc = run_unit_sh(root, *xdist, timeout=120, DAEMON_PID=str(pidfile), **joining_under_xdist(request, xdist))
        out = proc.stdout + proc.stderr
        pid = int(pidfile.read_text())
        assert not _alive(pid), out  # gone once run_unit.sh returned
        assert proc.returncode == 0, out
        assert f"sleep (pid {pid}) [sleep 300]" in proc.stderr, out  # named: its pid and command line
        assert {v["outcome"] for v in read_results(root)["tests"].values()} == {"passed"}
    finally:
        if pidfile.exists() and pidfile.read_text().strip() and _alive(int(pidfile.read_text())):
            os.kill(int(pidfile.read_text()), signal.SIGKILL)


SUBREAPER = """
import os, subprocess, sys, time
from testharness import process_sweep
assert process_sweep.become_subreaper() and process_sweep.is_subreaper()
subprocess.run(["sh", "-c", "sleep 30 > /dev/null 2>&1 &"], check=True)  # its parent exits at once
orphans = process_sweep.descendants()
assert [p.ppid() for p in orphans] == [os.getpid()], orphans  # re-parented to us, not to init
print(process_sweep.end(orphans, 3.0))
assert process_sweep.descendants() == []  # ended and reaped: not even a zombie left
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="a child subreaper is Linux's")
def test_a_subreaper_gets_the_orphans_of_its_descendants_and_ends_them() -> None:
    proc = subprocess.run([sys.executable, "-c", SUBREAPER], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "sleep (pid " in proc.stdout and "[sleep 30]" in proc.stdout, proc.stdout
    assert not process_sweep.is_subreaper()  # this process is not: only the one that asked
