"""Small helpers shared by the bench/ scripts: markdown tables, the machine line, and the
atomic update of one marked section of docs/benchmarks.md.

A section is the text between `<!-- NAME:start -->` and `<!-- NAME:end -->`; only that text
is replaced, so each script owns its section and never touches the others'.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
try:
    import testharness  # noqa: F401
except ImportError:  # run without the package installed: use the checkout
    sys.path.insert(0, str(ROOT / "tools" / "py"))
from testharness.atomic_io import write_text_atomic  # noqa: E402

DOCS = ROOT / "docs" / "benchmarks.md"
PHASE_PROBE = ROOT / "bench" / "phase_probe"  # a sitecustomize that times every process of a run
LONG_TEST_PROBE = ROOT / "bench" / "long_test_probe"  # the same, call by call (imports, Ray, actors)
TEST_PHASE = "test (setup to teardown)"  # its record of one test's protocol: the run's timeline


def checkout_env(**extra: str) -> dict[str, str]:
    """os.environ with this checkout's packages first on PYTHONPATH (prepended, not replaced):
    they must win over editable installs of another checkout, in subprocesses and Ray workers."""
    path = [str(ROOT), str(ROOT / "tools" / "py"), os.environ.get("PYTHONPATH", "")]
    return {**os.environ, **extra, "PYTHONPATH": os.pathsep.join(p for p in path if p)}


def markers(name: str) -> tuple[str, str]:
    return f"<!-- {name}:start -->", f"<!-- {name}:end -->"


def update_section(name: str, body: str, path: Path = DOCS) -> None:
    """Replace (or append) the `name` section of `path`; the file is written atomically."""
    start, end = markers(name)
    section = f"{start}\n{body.rstrip()}\n{end}"
    text = path.read_text(encoding="utf-8") if path.exists() else "# Benchmarks\n"
    if start in text and end in text and text.index(start) < text.index(end):
        text = text[: text.index(start)] + section + text[text.index(end) + len(end) :]
    else:
        text = text.rstrip() + "\n\n" + section + "\n"
    write_text_atomic(path, text)


def md_table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(out)


def print_table(title: str, header: Sequence[str], rows: Sequence[Sequence[object]]) -> None:
    """A rich table when rich is importable (it is in the test group), else the markdown."""
    try:
        from rich.console import Console
        from rich.table import Table
    except ImportError:
        print(f"{title}\n{md_table(header, rows)}")
        return
    table = Table(title=title)
    for h in header:
        table.add_column(str(h), justify="right")
    for row in rows:
        table.add_row(*(str(c) for c in row))
    console = Console()
    if not console.is_terminal:  # piped to a log: do not squeeze the columns to 80
        console = Console(width=200)
    console.print(table)


def cpu_count_usable() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def machine() -> str:
    """One line: CPU model, usable cores, load, GPUs (from nvidia-smi when present)."""
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    gpus = "no GPU"
    try:
        proc = subprocess.run(
            ["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=20,
            check=False,
        )
        names = [n.strip() for n in proc.stdout.splitlines() if n.strip()]
        if names:
            gpus = f"{len(names)} x {names[0]}"
    except (OSError, subprocess.SubprocessError):
        pass
    load = ""
    try:
        load = f", load {os.getloadavg()[0]:.1f}"
    except OSError:
        pass
    return f"{cpu}, {cpu_count_usable()} usable cores{load}, {gpus}, Python {sys.version.split()[0]}"


def today() -> str:
    return datetime.now().strftime("%Y-%m-%d %H:%M")


def read_probe(path: Path) -> list[dict[str, Any]]:
    """PHASE_PROBE's records of a run, one per line of its log ([] without a log)."""
    out = []
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError:
        return []
    for line in lines:
        try:
            out.append(json.loads(line))
        except ValueError:
            continue  # a process killed mid-write
    return out
