"""The `tracker` fixture: metrics of one test, stored in the run's record (testharness.record,
kept by testharness.recorder, loaded with this plugin) and written to unit_results.json with
it, and `session_record`, the record read live.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from types import MappingProxyType
from typing import Any

import pytest

from testharness import gpu, metrics, results
from testharness.contract import record_of, settings_of
from testharness.record import Record

pytest_plugins = ["testharness.recorder"]  # `-p testharness.tracker` brings the recorder too


def _record(config: pytest.Config) -> Record:
    record = record_of(config)
    if record is None:
        raise RuntimeError("session_record: the testharness tracker plugin is not active in this run")
    return record


# --- the fixture -------------------------------------------------------------------------


class Tracker:
    """Records metrics for one test under `<file stem>::<test name[param id]>`."""

    def __init__(self, record: Record, key: str) -> None:
        self._record = record
        self._key = key
        record.open_metrics(key)  # a rerun replaces the earlier attempt's metrics

    @property
    def key(self) -> str:
        return self._key

    def track(self, name: str, value: Any) -> None:
        """Record a JSON-serialisable value; anything else raises MetricError naming `name`."""
        self._record.put_metric(self._key, name, metrics.check_metric(name, value))

    def get_max_mem(self) -> float:
        """Largest GPU memory in use (MiB) on any GPU of any node; without GPUs, the peak RSS
        (MiB) of the test process and the Ray workers."""
        reading = gpu.max_memory()
        self._record.read_memory(reading.source, reading.gpu_names)
        return reading.mib

    def log_max_mem(self, name: str) -> float:
        """track(name, get_max_mem()); returns the value."""
        value = self.get_max_mem()
        self.track(name, value)
        return value


@pytest.fixture
def tracker(request: pytest.FixtureRequest) -> Iterator[Tracker]:
    """Metrics for this test, written to unit_results.json; `_elapsed` is recorded for you."""
    record = _record(request.config)
    t = Tracker(record, record.key(request.node.nodeid))
    start = time.perf_counter()
    try:
        yield t
    finally:
        record.put_metric(t.key, "_elapsed", time.perf_counter() - start)


class SessionRecord(Mapping[str, Any]):
    """What this session's unit_results.json will hold, read live (upstream NeMo RL's
    `session_data`): the keys of the results schema, `metrics` as every tracker of this
    process recorded it so far (a read-only view: record through `tracker`, which checks the
    value and carries it from an xdist worker). `exit_status` is "was not set" until the
    session ends, as upstream's."""

    KEYS = ("exit_status", "git_commit", "start_time", "metrics", "gpu_types", "coverage",
            "memory_unit", "memory_source", "tests")  # fmt: skip

    def __init__(self, config: pytest.Config) -> None:
        self._config = config
        self._state = _record(config)
        self._commit: str | None = None

    def __getitem__(self, key: str) -> Any:
        st = self._state
        if key == "exit_status":
            return st.document["exit_status"] if st.document is not None else "was not set"
        if key == "git_commit":
            if self._commit is None:
                self._commit = results.git_commit(st.root)
            return self._commit
        if key == "start_time":
            return st.start_time()
        if key == "metrics":
            return MappingProxyType(st.metrics)
        if key == "gpu_types":
            return sorted(st.gpu_names)
        if key == "coverage":
            plugin = self._config.pluginmanager.getplugin("_cov")
            return results.coverage_of(plugin, settings_of(self._config).source_packages)
        if key == "memory_unit":
            return results.MEMORY_UNIT
        if key == "memory_source":
            return st.memory_source
        if key == "tests":
            return {nodeid: rec.as_json() for nodeid, rec in st.tests.items()}
        raise KeyError(key)

    def __iter__(self) -> Iterator[str]:
        return iter(self.KEYS)

    def __len__(self) -> int:
        return len(self.KEYS)


def session_record(config: pytest.Config) -> SessionRecord:
    """The live record of this session (see SessionRecord); a clear error without the tracker."""
    return SessionRecord(config)
