"""The functional reach file: what each script's last passing run reached (pure: JSON only).

    {"format": "testharness.functional.reach", "version": 1,
     "scripts": {"sft": {"result": "passed", "recorded_at": "...", "commit": "...",
                         "duration_s": 23.1, "gpus": 0, "python": "3.11.7",
                         "files": {"path": "digest", ...},      # every repository file at the start
                         "inputs": ["examples/run_sft.py", ...], # what else its driver read
                         "reach": {"nemo_rl/algorithms/sft.py":
                                   {"skeleton": "digest", "units": {"sft_train": "digest"}}}}}}

A failed run keeps the reach of the last passing one and says "failed": the script runs
again until it passes. A damaged file (not JSON, nested too deep, a field of the wrong type)
is one warning line: it is moved aside, every script runs (a script with no record always
runs), and the next record rebuilds it.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from testharness.atomic_io import write_json_atomic
from testharness.state_files import JsonFormat, exclusive

FORMAT = "testharness.functional.reach"
VERSION = 1
PASSED, FAILED = "passed", "failed"


@dataclass(frozen=True)
class FileReach:
    skeleton: str  # digest of the file's import-time code at the run
    units: dict[str, str]  # reached function -> body digest at the run


@dataclass(frozen=True)
class ScriptRecord:
    result: str  # PASSED | FAILED
    recorded_at: str = ""
    commit: str | None = None
    duration_s: float = 0.0
    gpus: int = 0
    python: str = ""
    files: dict[str, str] = field(default_factory=dict)
    inputs: list[str] = field(default_factory=list)
    reach: dict[str, FileReach] = field(default_factory=dict)

    @property
    def ever_passed(self) -> bool:
        return bool(self.files)


def _record(value: Any) -> ScriptRecord:
    """A record from JSON; ValueError when any field is not what it must be."""
    if not isinstance(value, dict) or value.get("result") not in (PASSED, FAILED):
        raise ValueError("a record needs a result")
    reach: dict[str, FileReach] = {}
    for rel, entry in dict(value.get("reach", {})).items():
        units = entry["units"]
        if not isinstance(entry["skeleton"], str) or not all(isinstance(v, str) for v in units.values()):
            raise ValueError(f"bad reach entry for {rel}")
        reach[str(rel)] = FileReach(entry["skeleton"], {str(k): v for k, v in units.items()})
    files = dict(value.get("files", {}))
    inputs = list(value.get("inputs", []))
    if not all(isinstance(v, str) for v in (*files.values(), *inputs)):
        raise ValueError("files and inputs must be strings")
    return ScriptRecord(
        result=value["result"],
        recorded_at=str(value.get("recorded_at", "")),
        commit=value.get("commit") if isinstance(value.get("commit"), str) else None,
        duration_s=float(value.get("duration_s", 0.0)),
        gpus=int(value.get("gpus", 0)),
        python=str(value.get("python", "")),
        files=files,
        inputs=inputs,
        reach=reach,
    )


def _records(data: dict[str, Any]) -> dict[str, ScriptRecord]:
    scripts = data["scripts"]
    if not isinstance(scripts, dict):
        raise ValueError("'scripts' must be an object")
    return {str(name): _record(rec) for name, rec in scripts.items()}


REACH = JsonFormat(FORMAT, VERSION, _records)


def load(path: Path) -> tuple[dict[str, ScriptRecord], str | None]:
    """The records by script name, and a warning line when the file could not be used."""
    records, warning = REACH.load(path, then="every script runs until a passing run records it again")
    return records or {}, warning


def save(path: Path, records: dict[str, ScriptRecord]) -> None:
    scripts = {name: asdict(rec) for name, rec in sorted(records.items())}
    write_json_atomic(path, {"format": FORMAT, "version": VERSION, "scripts": scripts}, compact=True)


@contextmanager
def updating(path: Path) -> Iterator[dict[str, ScriptRecord]]:
    """The records, to change in place; saved at the end of the block, under the file's lock
    (two scripts may finish at once)."""
    with exclusive(path):
        records, _ = load(path)
        yield records
        save(path, records)
