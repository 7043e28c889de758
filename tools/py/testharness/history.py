"""The results history: every dated results file (`<results_dir>/unit_results/*.json`), in order.

Pure: no pytest, no Ray. Both the shard planner and the report command read history
through here, and every file through `results.read_results_file`, so a malformed or
half-written file is skipped the same way everywhere: with a one-line warning, never a
traceback, never losing the other runs. Where the history lives comes from the settings:
a pytest run passes the ones it read once (`contract.settings_of`); a command line tool
lets `settings.load_settings` read them (a bad `results_dir` is its one-line SettingsError,
not a silent fallback).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from testharness.results import DATED_DIR, START_TIME_FORMAT, ResultsFileError, Run, read_results_file
from testharness.settings import Settings, load_settings

#: Environment variable that overrides where the history files are read from.
HISTORY_ENV = "TESTHARNESS_HISTORY_DIR"
#: Environment variable that sends a run's results elsewhere (as `--unit-results-dir`).
RESULTS_DIR_ENV = "TESTHARNESS_RESULTS_DIR"
HISTORY_SUBDIR = DATED_DIR


@dataclass
class History:
    """Runs ordered oldest first, plus one warning per file that could not be used."""

    directory: Path
    runs: list[Run] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def configured_results_dir(project_root: Path) -> Path:
    """`[tool.testharness] results_dir` of `project_root` (SettingsError when it is malformed)."""
    return load_settings(project_root).results_dir


def resolve_history_dir(
    explicit: str | os.PathLike[str] | None,
    project_root: Path,
    environ: Mapping[str, str] | None = None,
    results_dir: str | os.PathLike[str] | None = None,
    *,
    settings: Settings | None = None,
) -> Path:
    """Where history lives: --history-dir, else $TESTHARNESS_HISTORY_DIR, else where the runs'
    results are sent when sent elsewhere (`results_dir`: --unit-results-dir, else
    $TESTHARNESS_RESULTS_DIR), else the config's results_dir. A run that writes its record
    somewhere plans (`-n`'s file order, shards) with the records written there before it.
    `settings`: the project's, where the caller has read them already (else read here)."""
    env = os.environ if environ is None else environ
    if explicit:
        return Path(explicit)
    if env.get(HISTORY_ENV):
        return Path(env[HISTORY_ENV])
    sent = sent_results_dir(results_dir, env)
    if sent is not None:
        return sent / HISTORY_SUBDIR
    configured = settings.results_dir if settings is not None else configured_results_dir(project_root)
    return configured / HISTORY_SUBDIR


def sent_results_dir(option: str | os.PathLike[str] | None, environ: Mapping[str, str] | None = None) -> Path | None:
    """Where a run's results go when sent elsewhere: `option` (--unit-results-dir), else
    $TESTHARNESS_RESULTS_DIR, made absolute; None: where the settings say."""
    sent = option or (os.environ if environ is None else environ).get(RESULTS_DIR_ENV)
    return Path(sent).resolve() if sent else None


def _sort_key(run: Run) -> tuple[int, str, str]:
    # Runs with a parseable start time sort by it; the file name breaks ties (and orders the
    # rest), so every machine given the same files sees the same order.
    stamp = run.started.strftime(START_TIME_FORMAT) if run.started else ""
    return (0 if run.started else 1, stamp, run.path.name)


def load_history(directory: Path, last: int | None = None) -> History:
    """Read every `*.json` in `directory`, oldest first; keep only the `last` runs if given.

    A missing directory is an empty history (first run ever), not an error.
    """
    history = History(directory=directory)
    if not directory.is_dir():
        return history
    runs: list[Run] = []
    for path in sorted(directory.glob("*.json")):
        try:
            run = read_results_file(path)
        except ResultsFileError as exc:
            history.warnings.append(f"skipped {path}: {exc}")
            continue
        if run.tests or run.metrics:  # a run that executed no test says nothing about any
            runs.append(run)
    runs.sort(key=_sort_key)
    if last is not None and last > 0:
        runs = runs[-last:]
    history.runs = runs
    return history


def planning_durations(runs: Iterable[Run]) -> dict[str, float]:
    """`recorded_durations` of the unsharded runs: what shards and `-n`'s file order plan with.

    A shard's run records only its part of the suite, in the order of that plan.
    """
    return recorded_durations(r for r in runs if r.shard is None)


def recorded_durations(runs: Iterable[Run], window: int = 5) -> dict[str, float]:
    """Per nodeid, the median duration over its last `window` recorded runs.

    The median of a few recent runs follows real changes within a few runs while one slow
    outlier (a cold cache, a busy machine) does not move a test to another shard.
    """
    import statistics  # deferred: only planning (--shard, -n) needs it (~3 ms of every pytest's start)

    per_test: dict[str, list[float]] = {}
    for run in runs:  # oldest first, so the tail of each list is the most recent
        for nodeid, record in run.tests.items():
            if record.duration is not None:
                per_test.setdefault(nodeid, []).append(record.duration)
    return {nodeid: statistics.median(values[-window:]) for nodeid, values in per_test.items()}
