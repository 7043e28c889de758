"""State files kept between runs: damaged ones are moved aside, updates happen under a lock.

The core (testharness.state_files) is tested on real SQLite files; the pytest hooks
(testharness.testmon_data) with real pytest-testmon in inner pytest runs (subprocesses, so
that testmon's coverage never nests in this process's).
"""

from __future__ import annotations

import json
import os
import re
import sqlite3
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from testharness import state_files
from testharness.state_files import (
    TESTMON_SCHEMA,
    JsonFormat,
    Unusable,
    exclusive,
    move_aside,
    recover_sqlite,
    sqlite_problem,
)

# -- core ------------------------------------------------------------------------------------


def _make_db(path: Path, rows: int = 2000) -> None:
    """A real database of several pages, in WAL mode (as pytest-testmon keeps its own),
    checkpointed into the main file."""
    con = sqlite3.connect(path)
    con.execute("PRAGMA journal_mode = WAL")
    con.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, name TEXT)")
    con.execute("CREATE INDEX t_name ON t (name)")
    con.executemany("INSERT INTO t (name) VALUES (?)", ((f"tests/test_{i}.py::test_{i}",) for i in range(rows)))
    con.commit()
    con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    con.close()


def _damage(path: Path, how: str) -> None:
    if how == "garbage":
        path.write_bytes(os.urandom(3000))
    elif how == "truncated":
        data = path.read_bytes()
        path.write_bytes(data[: len(data) // 2])
    elif how == "directory":
        path.unlink()
        path.mkdir()
        (path / "inside").write_text("x")
    elif how == "wal-directory":
        wal = path.with_name(path.name + "-wal")
        wal.unlink(missing_ok=True)  # an empty log: what a read-only connection leaves
        wal.mkdir()
    elif how == "missing-table":  # a sound database that is not testmon's: testmon's queries fail
        con = sqlite3.connect(path)
        con.execute("DROP TABLE test_execution_file_fp")
        con.commit()
        con.close()
    elif how == "bad-page":
        data = bytearray(path.read_bytes())
        data[4096 * 3 : 4096 * 3 + 600] = b"\xa5" * 600
        path.write_bytes(bytes(data))
    else:
        raise AssertionError(how)


@pytest.mark.parametrize(
    ("how", "problem"),
    [
        ("garbage", "is damaged (file is not a database)"),
        ("truncated", "is damaged (database disk image is malformed)"),
        ("directory", "is a directory"),
        ("wal-directory", "has a wal side file that is a directory"),
        ("bad-page", None),  # any message: SQLite's own words
    ],
)
def test_sqlite_problem_says_what_is_wrong(tmp_path: Path, how: str, problem: str | None) -> None:
    db = tmp_path / "data.db"
    _make_db(db)
    assert sqlite_problem(db) is None
    _damage(db, how)
    got = sqlite_problem(db)
    assert got is not None and "\n" not in got
    if problem is not None:
        assert got == problem


def test_sqlite_problem_leaves_absent_empty_and_busy_files_alone(tmp_path: Path) -> None:
    assert sqlite_problem(tmp_path / "absent.db") is None
    (tmp_path / "empty.db").write_bytes(b"")  # what sqlite3.connect makes: a valid empty database
    assert sqlite_problem(tmp_path / "empty.db") is None
    busy = tmp_path / "busy.db"
    writer = sqlite3.connect(busy, isolation_level=None)
    writer.execute("CREATE TABLE t (x)")
    writer.execute("BEGIN EXCLUSIVE")  # rollback-journal mode: readers get SQLITE_BUSY
    writer.execute("INSERT INTO t VALUES (1)")
    try:
        assert sqlite_problem(busy, busy_timeout=0.1) is None  # in use, not damaged
    finally:
        writer.execute("COMMIT")
        writer.close()


def test_move_aside_takes_the_side_files_and_never_overwrites(tmp_path: Path) -> None:
    db = tmp_path / ".data"
    for suffix in ("", "-wal", "-shm"):
        (tmp_path / f".data{suffix}").write_text(f"first{suffix}")
    first = move_aside(db, "STAMP", state_files.SQLITE_SIDE_FILES)
    assert first.name == ".data.corrupt-STAMP"
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        ".data.corrupt-STAMP",
        ".data.corrupt-STAMP-shm",
        ".data.corrupt-STAMP-wal",
    ]
    db.mkdir()  # a directory moves too, and the same stamp gets a free name
    second = move_aside(db, "STAMP", state_files.SQLITE_SIDE_FILES)
    assert second.name == ".data.corrupt-STAMP-2" and second.is_dir()
    assert (tmp_path / ".data.corrupt-STAMP-wal").read_text() == "first-wal"


def test_recover_sqlite_moves_a_damaged_database_aside_with_one_line(tmp_path: Path) -> None:
    db = tmp_path / "sub" / ".data"
    db.parent.mkdir()
    _make_db(db)
    assert recover_sqlite(db, tmp_path) is None
    assert db.is_file()
    _damage(db, "garbage")
    db.with_name(".data-wal").write_bytes(b"stale log")
    warning = recover_sqlite(db, tmp_path, stamp="STAMP")
    assert warning == (
        "sub/.data is damaged (file is not a database); "
        "moved it to .data.corrupt-STAMP and starting afresh (every test is selected)"
    )
    names = {p.name for p in db.parent.iterdir()}  # (and the -shm the first check left)
    assert {".data.corrupt-STAMP", ".data.corrupt-STAMP-wal"} <= names
    assert all(name.startswith(".data.corrupt-STAMP") for name in names)
    _make_db(db)  # a fresh database where the old one was
    assert sqlite_problem(db) is None


def _testmon_db(path: Path) -> None:
    """A database as pytest-testmon creates it (its own code), closed."""
    from testmon.db import DB

    DB(str(path)).con.close()


def test_testmon_schema_is_the_installed_testmons(tmp_path: Path) -> None:
    from testmon.db import DATA_VERSION

    db = tmp_path / ".testmondata"
    _testmon_db(db)
    con = sqlite3.connect(db)
    tables = {row[0] for row in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    con.close()
    assert (DATA_VERSION, tables) == (TESTMON_SCHEMA.user_version, TESTMON_SCHEMA.tables)
    assert sqlite_problem(db, schema=TESTMON_SCHEMA, exact=True) is None


def test_a_testmon_database_without_one_of_its_tables_is_damaged(tmp_path: Path) -> None:
    db = tmp_path / ".testmondata"
    _testmon_db(db)
    con = sqlite3.connect(db)
    con.execute("DROP TABLE test_execution_file_fp")  # testmon's next query would raise
    con.commit()
    con.close()
    assert sqlite_problem(db) is None  # a sound database: only its schema says it is not testmon's
    assert sqlite_problem(db, schema=TESTMON_SCHEMA) == "lacks its table 'test_execution_file_fp'"
    other = tmp_path / "other"
    _make_db(other)  # user_version 0: testmon re-creates a file of another version itself
    assert sqlite_problem(other, schema=TESTMON_SCHEMA) is None
    assert sqlite_problem(other, schema=TESTMON_SCHEMA, exact=True) == "has format version 0, expected 14"


def _parse_entries(data: dict[str, object]) -> dict[str, int]:
    entries = data["entries"]
    if not isinstance(entries, dict):
        raise ValueError("'entries' must be an object")
    return {str(k): int(v) for k, v in entries.items()}  # int(): a value of any other kind raises


FMT = JsonFormat("test.state", 2, _parse_entries)


def _doc(entries: object, version: int = 2) -> bytes:
    return json.dumps({"format": "test.state", "version": version, "entries": entries}).encode()


@pytest.mark.parametrize(
    "content, why",
    [
        (b"[" * 100_000 + b"]" * 100_000, "is corrupted (JSON nested too deep)"),
        (b'{"format": "test.state", "v": [' * 50_000, "is corrupted (JSON nested too deep)"),
        (b"{not json", "is corrupted (not JSON)"),
        (b"1" * 5000, "is corrupted (not JSON)"),  # past Python's int-digits limit: a ValueError of its own
        (b"", "is corrupted (not JSON)"),
        (b"\x00\xff garbage", "is corrupted (not UTF-8 text)"),
        (b"[]", "is not a test.state file"),
        (_doc([]), "has an unexpected structure ('entries' must be an object)"),
        (_doc({"a": "x"}), "has an unexpected structure (invalid literal for int() with base 10: 'x')"),
        (_doc({"a": None}), "has an unexpected structure (TypeError: int() argument must be a string"),
        (_doc({"a": 1e400}), "has an unexpected structure (OverflowError: cannot convert float infinity to integer)"),
        (json.dumps({"format": "test.state", "version": 2}).encode(), "has an unexpected structure (KeyError: 'entries')"),
    ],
    ids=["nested", "nested-object", "not-json", "int-digits", "empty", "binary", "other-format", "list", "value",
         "none", "overflow", "missing"],
)  # fmt: skip
def test_a_json_state_file_that_cannot_be_used_is_one_line_and_moved_aside(
    tmp_path: Path, content: bytes, why: str
) -> None:
    path = tmp_path / "state.json"
    path.write_bytes(content)
    with pytest.raises(Unusable) as raised:  # strict: what `testharness state load` checks with
        FMT.read(path)
    assert raised.value.why.startswith(why) and not raised.value.outdated
    assert path.read_bytes() == content  # read never moves anything
    data, warning = FMT.load(path, then="starting afresh")
    assert data is None and warning is not None and "\n" not in warning
    aside = [p for p in tmp_path.iterdir() if p.name.startswith("state.json.corrupt-")]
    assert len(aside) == 1 and aside[0].read_bytes() == content  # kept for a post-mortem
    assert warning.startswith(f"state.json {why}") and warning.endswith(
        f"; moved it to {aside[0].name}; starting afresh"
    )
    assert not path.exists()
    assert FMT.load(path) == (None, None)  # as on a first run


def test_a_json_state_file_that_is_a_directory_is_moved_aside(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    path.mkdir()
    (path / "inside").write_text("x")
    data, warning = FMT.load(path)
    assert data is None and warning is not None
    assert warning.startswith("state.json is a directory; moved it to state.json.corrupt-")
    assert warning.endswith("; rebuilding it")
    (aside,) = tmp_path.iterdir()
    assert (aside / "inside").read_text() == "x"


def test_a_json_state_file_of_another_version_is_left_for_the_next_save(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    path.write_bytes(_doc({"a": 1}, version=1))
    assert FMT.load(path) == (None, "state.json has format version 1, expected 2; rebuilding it")
    assert [p.name for p in tmp_path.iterdir()] == ["state.json"]
    path.write_bytes(_doc({"a": 1}))
    assert FMT.load(path) == ({"a": 1}, None)


def test_exclusive_lock_excludes_and_leaves_no_file(tmp_path: Path) -> None:
    counter = tmp_path / "counter"
    counter.write_text("0")

    def bump() -> None:
        for _ in range(20):
            with exclusive(counter):
                value = int(counter.read_text())
                time.sleep(0.0005)
                counter.write_text(str(value + 1))

    threads = [threading.Thread(target=bump) for _ in range(6)]  # flock: one open file each
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert counter.read_text() == str(6 * 20)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["counter"]


def test_exclusive_lock_waits_for_another_process_then_times_out(tmp_path: Path) -> None:
    target = tmp_path / "state.json"
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            (
                "import sys, time; from pathlib import Path; from testharness.state_files import exclusive\n"
                "with exclusive(Path(sys.argv[1])):\n    print('held', flush=True); time.sleep(float(sys.argv[2]))"
            ),
            str(target),
            "30",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        with (
            pytest.raises(TimeoutError, match=r"state\.json\.lock held by another process"),
            exclusive(target, timeout=0.2),
        ):
            pass
    finally:
        holder.kill()
        holder.wait()
    with exclusive(target, timeout=5):  # the dead holder's lock went with its process
        pass


# -- pytest-testmon's database, with real testmon --------------------------------------------
PLUGIN = "testharness.plugin"  # every harness plugin, as the repository's conftest loads them
_PASSED = re.compile(r"^(tests/\S+::\S+) PASSED")
WARNING = "testmon-data: warning:"


@pytest.fixture
def tm_project(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makefile(".toml", pyproject='[tool.pytest.ini_options]\ntestpaths = ["tests"]\n')
    for name in ("a", "b"):
        path = pytester.path / "tests" / f"test_{name}.py"
        path.parent.mkdir(exist_ok=True)
        path.write_text(textwrap.dedent(f"def test_{name}():\n    assert True\n"))
    return pytester


def _run(pytester: pytest.Pytester, *args: str) -> tuple[pytest.RunResult, set[str]]:
    result = pytester.runpytest_subprocess("-p", PLUGIN, "--testmon", "-v", *args, timeout=120)
    passed = {m.group(1) for line in result.outlines if (m := _PASSED.match(line))}
    return result, passed


def _checkpointed(db: Path) -> None:
    """testmon leaves its data in the write-ahead log: fold it into the main file."""
    con = sqlite3.connect(db)
    con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    con.close()
    for suffix in ("-wal", "-shm"):
        db.with_name(db.name + suffix).unlink(missing_ok=True)


ALL = {"tests/test_a.py::test_a", "tests/test_b.py::test_b"}


@pytest.mark.parametrize("how", ["garbage", "truncated", "directory", "wal-directory", "missing-table"])
def test_damaged_testmon_data_is_moved_aside_and_rebuilt(tm_project: pytest.Pytester, how: str) -> None:
    result, passed = _run(tm_project)
    assert passed == ALL, result.stdout.str()
    db = tm_project.path / ".testmondata"
    _checkpointed(db)
    _damage(db, how)

    result, passed = _run(tm_project)
    out = result.stdout.str() + result.stderr.str()
    assert result.ret == 0, out
    assert "INTERNALERROR" not in out
    warnings = [line for line in result.outlines + result.errlines if WARNING in line]
    assert len(warnings) == 1, out
    assert ".testmondata" in warnings[0] and "moved it to .testmondata.corrupt-" in warnings[0]
    assert passed == ALL  # as on a first run
    aside = [p.name for p in tm_project.path.iterdir() if ".corrupt-" in p.name]
    assert aside and all(name.startswith(".testmondata.corrupt-") for name in aside), aside
    if how == "wal-directory":
        assert any(name.endswith("-wal") for name in aside)

    # Rebuilt: the next run knows every test passed and selects nothing, without a warning.
    result, passed = _run(tm_project)
    assert result.ret == 0 and passed == set(), result.stdout.str()
    assert WARNING not in result.stdout.str() + result.stderr.str()


def test_damaged_testmon_data_warns_with_q_too_and_follows_testmon_datafile(
    tm_project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TESTMON_DATAFILE", "custom.tmdata")
    (tm_project.path / "custom.tmdata").write_bytes(b"\x00garbage" * 300)
    result = tm_project.runpytest_subprocess("-p", PLUGIN, "--testmon", "-q", timeout=120)
    assert result.ret == 0, result.stdout.str()
    lines = [line for line in result.outlines if WARNING in line]
    assert len(lines) == 1 and lines[0].startswith(f"{WARNING} custom.tmdata is damaged"), result.stdout.str()
    assert any(p.name.startswith("custom.tmdata.corrupt-") for p in tm_project.path.iterdir())
    assert not (tm_project.path / ".testmondata").exists()


@pytest.mark.parametrize("value", ["", "tests", "."])
def test_testmon_datafile_naming_a_directory_is_a_usage_error(
    tm_project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    monkeypatch.setenv("TESTMON_DATAFILE", value)
    result = tm_project.runpytest_subprocess("-p", PLUGIN, "--testmon", "-q", timeout=120)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert f"ERROR: TESTMON_DATAFILE={value!r} names a directory" in result.stderr.str()
    assert "Traceback" not in result.stdout.str() + result.stderr.str()
    assert (tm_project.path / "tests" / "test_a.py").is_file()  # nothing was moved
    assert not [p for p in tm_project.path.iterdir() if ".corrupt-" in p.name]


def test_testmon_data_is_not_touched_without_testmon(tm_project: pytest.Pytester) -> None:
    db = tm_project.path / ".testmondata"
    db.write_bytes(b"garbage")
    result = tm_project.runpytest_subprocess("-p", PLUGIN, "-q", timeout=120)
    assert result.ret == 0
    assert WARNING not in result.stdout.str()
    assert db.read_bytes() == b"garbage"


def test_sessions_started_together_share_one_fresh_database(tm_project: pytest.Pytester) -> None:
    """testmon re-creates a database it does not know (deleting the file): two sessions that
    both create it at once used to end one of them in "disk I/O error" now and then (a
    smoke test: the race is rare)."""
    for round_ in range(2):
        for p in tm_project.path.glob(".testmondata*"):
            p.unlink()
        procs = [
            subprocess.Popen(
                [sys.executable, "-m", "pytest", "-p", PLUGIN, "--testmon", "-q", f"tests/test_{name}.py"],
                cwd=tm_project.path,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
            for name in ("a", "b")
        ]
        outs = [p.communicate(timeout=120)[0] for p in procs]
        assert [p.returncode for p in procs] == [0, 0], (round_, outs)
        result, _ = _run(tm_project)  # the database both made is usable
        assert result.ret == 0 and "INTERNALERROR" not in result.stdout.str(), result.stdout.str()
