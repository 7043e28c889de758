"""`testharness state save/load` checks an artifact before it is used (issue 57, item 2): every
damaged or hostile artifact is refused with one line and exit 0, the checkout left with no
selection state (so everything runs), never half loaded.

A real git checkout, real state files (pytest-testmon's database made by testmon's own code,
the remote-select and functional files by their writers) and the real command in a
subprocess; the size limits are lowered in-process where a real bomb would take a minute to
make. The CI recipe end to end (a pull request selects against its base branch):
tests/repo/test_selection_state.py.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import re
import sqlite3
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from testharness import selection_state, state_artifact
from testharness.functional import store as functional_store
from testharness.remote_select import store as remote_store
from testharness.settings import Settings, load_settings
from testharness.state_files import TESTMON_SCHEMA, sqlite_problem

PYPROJECT = """[project]
name = "proj"
version = "0"

[tool.testharness]
remote_map_file = ".p_map.json"
remote_state_file = ".p_state.json"

[tool.testharness.functional]
reach_file = ".p_reach.json"
environment = ["uv.lock"]
"""
STATE_FILES = [".testmondata", ".p_map.json", ".p_map.parse-cache.json", ".p_state.json", ".p_reach.json"]
NESTED = b"[" * 100_000 + b"]" * 100_000
GIT_ENV = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}


def _git(root: Path, *args: str) -> str:
    env = {**os.environ, **GIT_ENV}
    return subprocess.run(["git", "-C", str(root), *args], check=True, capture_output=True, text=True, env=env).stdout


def _testmon_db(path: Path) -> None:
    from testmon.db import DB  # pytest-testmon's own code makes it

    DB(str(path)).con.close()


def _write_state(root: Path) -> None:
    """Every selection file, as its writer writes it."""
    _testmon_db(root / ".testmondata")
    state = remote_store.State({"g1": {"pkg/a.py": "d1"}}, {"tests/test_a.py::test_a": "g1"})
    remote_store.save_state(root / ".p_state.json", state)
    map_data = remote_store.MapData("cfg", {"pkg/a.py": "d1"}, None, {"pkg/a.py": []}, {}, {})
    remote_store.save_map(root / ".p_map.json", map_data)
    cache = {"format": remote_store.PARSE_CACHE_FORMAT, "version": remote_store.MAP_VERSION, "entries": {}}
    (root / ".p_map.parse-cache.json").write_text(json.dumps(cache))
    functional_store.save(root / ".p_reach.json", {"sft": functional_store.ScriptRecord(result="failed")})


@pytest.fixture
def checkout(tmp_path: Path) -> Settings:
    """A committed checkout with every selection file; its settings."""
    root = tmp_path / "checkout"
    root.mkdir()
    (root / "pyproject.toml").write_text(PYPROJECT)
    (root / "uv.lock").write_text("lock\n")
    (root / ".gitignore").write_text(".p_*\n.testmondata*\n")
    _git(root, "init", "-q", "-b", "main")
    _git(root, "add", ".")
    _git(root, "commit", "-q", "-m", "first")
    _write_state(root)
    return load_settings(root)


@pytest.fixture
def saved(checkout: Settings, tmp_path: Path) -> Path:
    artifact = tmp_path / "state.tgz"
    said = selection_state.save(checkout, artifact)
    assert said.startswith("testharness state: saved ") and "left out" not in said, said
    return artifact


def _cli(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "testharness", "state", *args], cwd=root, capture_output=True, text=True, timeout=120
    )


def _present(root: Path) -> list[str]:
    return [name for name in STATE_FILES if os.path.lexists(root / name)]


def _unpacked(artifact: Path) -> tuple[dict[str, object], dict[str, bytes]]:
    with tarfile.open(artifact, "r:gz") as tar:
        blobs = {info.name: tar.extractfile(info).read() for info in tar.getmembers()}  # type: ignore[union-attr]
    return json.loads(blobs.pop("manifest.json")), blobs


def _sealed(manifest: dict[str, object], blobs: dict[str, bytes]) -> dict[str, object]:
    """The manifest with the digests and the list of these members."""
    return {**manifest, "files": sorted(blobs), "sha256": {n: hashlib.sha256(b).hexdigest() for n, b in blobs.items()}}


def _packed(artifact: Path, entries: list[tuple[str, bytes]]) -> None:
    with tarfile.open(artifact, "w:gz") as tar:
        for name, data in entries:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))


def _repacked(artifact: Path, manifest: dict[str, object], blobs: dict[str, bytes]) -> None:
    _packed(artifact, [("manifest.json", json.dumps(manifest).encode()), *sorted(blobs.items())])


def _sqlite_without(table: str, data: bytes, tmp: Path) -> bytes:
    db = tmp / "copy.sqlite"
    db.write_bytes(data)
    con = sqlite3.connect(db)
    con.execute(f"DROP TABLE {table}")
    con.commit()
    con.close()
    return db.read_bytes()


def test_save_then_load_restores_every_file_with_its_digest(checkout: Settings, saved: Path) -> None:
    root = checkout.root
    before = {name: (root / name).read_bytes() for name in STATE_FILES if name != ".testmondata"}
    manifest, blobs = _unpacked(saved)
    assert manifest["sha256"] == {n: hashlib.sha256(b).hexdigest() for n, b in blobs.items()}
    assert re.fullmatch(r"[0-9a-f]{40}", str(manifest["commit"])) and len(blobs) == 5
    for name in STATE_FILES:
        (root / name).unlink()
    done = _cli(root, "load", str(saved))
    assert done.returncode == 0 and done.stderr == "", done.stderr
    assert done.stdout.startswith("testharness state: loaded state.tgz, made at "), done.stdout
    assert {name: (root / name).read_bytes() for name in before} == before
    assert sqlite_problem(root / ".testmondata", schema=TESTMON_SCHEMA, exact=True) is None
    assert not [p for p in root.iterdir() if p.name.startswith(".") and p.name.endswith(".tmp")]


def _hostile(case: str, artifact: Path, checkout: Settings) -> None:
    """Turn the good artifact into the `case` one."""
    manifest, blobs = _unpacked(artifact)
    if case == "2 GiB member":  # a tar header that claims it: refused before a byte is read
        info = tarfile.TarInfo("testmondata.sqlite")
        info.size = 2 * 2**30
        head = json.dumps(manifest).encode()
        minfo = tarfile.TarInfo("manifest.json")
        minfo.size = len(head)
        body = minfo.tobuf() + head + b"\0" * (-len(head) % 512) + info.tobuf() + b"\0" * 4096
        artifact.write_bytes(gzip.compress(body))
    elif case == "not gzip":
        artifact.write_bytes(b"PK\x03\x04 a zip file")
    elif case == "truncated":
        data = artifact.read_bytes()
        artifact.write_bytes(data[: len(data) // 2])
    elif case == "manifest not first":
        _packed(artifact, [*sorted(blobs.items()), ("manifest.json", json.dumps(manifest).encode())])
    elif case == "manifest nested":
        _packed(artifact, [("manifest.json", NESTED), *sorted(blobs.items())])
    elif case == "version 1":
        _repacked(artifact, {**manifest, "version": 1}, blobs)
    elif case in ("environment", "commit HEAD", "commit short", "files", "sha256 missing", "sha256 short"):
        bad: dict[str, object] = {
            "environment": {"environment": ["uv.lock"]},
            "commit HEAD": {"commit": "HEAD"},
            "commit short": {"commit": str(manifest["commit"])[:12]},
            "files": {"files": [["testmondata.sqlite"]]},
            "sha256 missing": {"sha256": {}},
            "sha256 short": {"sha256": {n: "abc" for n in blobs}},
        }[case]
        _repacked(artifact, {**manifest, **bad}, blobs)
    elif case == "commit elsewhere":
        _repacked(artifact, {**manifest, "commit": "0123456789abcdef0123456789abcdef01234567"}, blobs)
    elif case == "another lock":
        (checkout.root / "uv.lock").write_text("another lock\n")
    elif case == "digest":
        _repacked(artifact, manifest, {**blobs, "remote_state.json": blobs["remote_state.json"].replace(b"g1", b"g2")})
    elif case == "unexpected entry":
        _repacked(artifact, manifest, {**blobs, "../outside.json": b"{}"})
    elif case == "unknown member listed":
        _repacked(artifact, _sealed(manifest, {**blobs, "extra.json": b"{}"}), {**blobs, "extra.json": b"{}"})
    elif case == "listed, missing":
        smaller = {n: b for n, b in blobs.items() if n != "remote_map.json"}
        _repacked(artifact, _sealed(manifest, blobs), smaller)
    elif case.startswith("member "):  # sealed: only the member's own check can refuse it
        name, content = {
            "member reach nested": ("functional_reach.json", NESTED),
            "member state malformed": ("remote_state.json", b'{"format": "testharness.remote_select.state", "version": 3}'),
            "member map not json": ("remote_map.json", b"{not json"),
            "member cache other version": ("remote_parse_cache.json", b'{"format": "testharness.remote_select.parse_cache", "version": 1}'),
            "member db garbage": ("testmondata.sqlite", b"not a database" * 100),
            "member db table": ("testmondata.sqlite", _sqlite_without("file_fp", blobs["testmondata.sqlite"], artifact.parent)),
        }[case]  # fmt: skip
        _repacked(artifact, _sealed(manifest, {**blobs, name: content}), {**blobs, name: content})
    elif case == "target directory":
        (checkout.root / ".testmondata").unlink()
        (checkout.root / ".testmondata").mkdir()
    else:
        raise AssertionError(case)


HOSTILE = {
    "2 GiB member": r"its testmondata\.sqlite is 2048 MiB, more than the 512 MiB limit",
    "not gzip": r"state\.tgz is damaged \(BadGzipFile: Not a gzipped file",
    "truncated": r"state\.tgz is damaged \(",
    "manifest not first": r"state\.tgz does not start with its manifest\.json",
    "manifest nested": r"state\.tgz has no readable manifest\.json",
    "version 1": r"state\.tgz has format version 1, expected 2",
    "environment": r"state\.tgz's manifest\.json is malformed: 'environment' must be an object of paths and digests",
    "commit HEAD": r"state\.tgz's manifest\.json is malformed: 'commit' must be a full commit id \(40 hex digits\)",
    "commit short": r"state\.tgz's manifest\.json is malformed: 'commit' must be a full commit id",
    "files": r"state\.tgz's manifest\.json is malformed: 'files' must be a list of its members",
    "sha256 missing": r"state\.tgz's manifest\.json is malformed: 'sha256' must be a digest of each member",
    "sha256 short": r"state\.tgz's manifest\.json is malformed: 'sha256' must be a digest of each member",
    "commit elsewhere": r"its commit 0123456789ab is not an ancestor of HEAD",
    "another lock": r"it was made under another uv\.lock",
    "digest": r"its remote_state\.json does not match the sha256 digest in its manifest\.json",
    "unexpected entry": r"state\.tgz holds an unexpected entry '\.\./outside\.json'",
    "unknown member listed": r"state\.tgz's manifest\.json is malformed: 'files' must be a list of its members",
    "listed, missing": r"state\.tgz lacks its remote_map\.json, which its manifest\.json lists",
    "member reach nested": r"its functional_reach\.json is corrupted \(JSON nested too deep\)",
    "member state malformed": r"its remote_state\.json has an unexpected structure \(",
    "member map not json": r"its remote_map\.json is corrupted \(not JSON\)",
    "member cache other version": r"its remote_parse_cache\.json has format version 1, expected \d+",
    "member db garbage": r"its testmondata\.sqlite is damaged \(file is not a database\)",
    "member db table": r"its testmondata\.sqlite lacks its table 'file_fp'",
    "target directory": r"\.testmondata is a directory, not a file",
}


@pytest.mark.parametrize("case", list(HOSTILE))
def test_an_artifact_that_cannot_be_trusted_is_refused_with_one_line_and_everything_runs(
    checkout: Settings, saved: Path, case: str
) -> None:
    _hostile(case, saved, checkout)
    root = checkout.root
    assert len(_present(root)) == 5  # the checkout's own state: stale once a load is asked for
    done = _cli(root, "load", str(saved))
    assert done.returncode == 0 and done.stderr == "", done.stderr  # refusing must not fail CI
    assert done.stdout.count("\n") == 1, done.stdout
    assert re.match(rf"testharness state: not loaded, everything runs: {HOSTILE[case]}", done.stdout), done.stdout
    # Nothing stale, nothing half loaded (a directory is left for the run that finds it to move aside).
    assert _present(root) == ([".testmondata"] if case == "target directory" else [])
    assert not [p for p in root.iterdir() if p.name.endswith(".tmp")]


def test_a_decompression_bomb_stops_at_the_limits_read_as_a_stream(
    checkout: Settings, saved: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    manifest, blobs = _unpacked(saved)
    cache = {"format": remote_store.PARSE_CACHE_FORMAT, "version": remote_store.MAP_VERSION, "entries": {}}
    big = json.dumps({**cache, "pad": " " * (3 * 2**20)}).encode()  # 3 MiB, ~3 KiB compressed
    _repacked(
        saved, _sealed(manifest, {**blobs, "remote_parse_cache.json": big}), {**blobs, "remote_parse_cache.json": big}
    )
    assert saved.stat().st_size < 64 * 1024
    monkeypatch.setattr(state_artifact, "JSON_LIMIT", 2 * 2**20)
    said = selection_state.load(checkout, saved)
    assert (
        said
        == "testharness state: not loaded, everything runs: its remote_parse_cache.json is 3 MiB, more than the 2 MiB limit"
    )
    monkeypatch.setattr(state_artifact, "JSON_LIMIT", 64 * 2**20)
    monkeypatch.setattr(state_artifact, "TOTAL_LIMIT", 2 * 2**20)  # the whole stream, headers and all
    said = selection_state.load(checkout, saved)
    assert said == "testharness state: not loaded, everything runs: state.tgz expands to more than 2 MiB (the limit)"
    assert _present(checkout.root) == []


def test_a_write_that_fails_midway_leaves_no_state(checkout: Settings, saved: Path) -> None:
    root = checkout.root
    (root / ".p_state.json").unlink()  # no longer where the settings put it
    (root / "pyproject.toml").write_text(PYPROJECT.replace('".p_state.json"', '"blocked/.p_state.json"'))
    (root / "blocked").write_text("a file where the state's directory would be")
    _git(root, "commit", "-qam", "state elsewhere")  # (pyproject.toml is not in the environment)
    settings = load_settings(root)
    said = selection_state.load(settings, saved)
    assert said.startswith("testharness state: not loaded, everything runs: could not write blocked/.p_state.json ("), (
        said
    )
    assert _present(root) == []  # the members written before it are gone too


def test_save_leaves_out_a_file_its_owner_could_not_use(checkout: Settings, tmp_path: Path) -> None:
    (checkout.root / ".p_reach.json").write_bytes(NESTED)
    said = selection_state.save(checkout, tmp_path / "state.tgz")
    assert said.endswith("; left out .p_reach.json is corrupted (JSON nested too deep)"), said
    manifest, blobs = _unpacked(tmp_path / "state.tgz")
    assert "functional_reach.json" not in blobs and manifest["files"] == sorted(blobs)
    assert selection_state.load(checkout, tmp_path / "state.tgz").startswith("testharness state: loaded ")
    assert not (checkout.root / ".p_reach.json").exists()  # the functional reach starts afresh
