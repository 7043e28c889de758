"""Test paths as upstream NeMo RL's run_unit.sh takes them (it runs from tests/: `unit/...`),
mapped to this project's test roots, for the pytest command run-unit builds (pure: no
pytest, no Ray). Options' values are told apart from paths, so `-k unit` stays as it is.
"""

from __future__ import annotations

import glob
import os
from collections.abc import Iterator, Sequence
from pathlib import Path

# pytest options whose value is a test path (`--ignore`, `--ignore-glob`: resolved from the
# current directory) or a node id prefix (`--deselect`: relative to pytest's rootdir), which
# upstream's scripts write as `unit/...`; either `--opt=VALUE` or `--opt VALUE`.
PATH_OPTIONS = ("--ignore", "--ignore-glob", "--deselect")
# Options (pytest's and its plugins') that take the next argument as their value, which is
# therefore never a test path even where a file of that name exists (`-k unit` in tests/).
VALUE_OPTIONS = frozenset({
    *PATH_OPTIONS, "-k", "-m", "-p", "-c", "-o", "-n", "-W", "-r", "--rootdir", "--confcutdir",
    "--basetemp", "--config-file", "--override-ini", "--durations", "--durations-min",
    "--maxfail", "--tb", "--import-mode", "--junitxml", "--junit-xml", "--log-level",
    "--log-file", "--cov-report", "--cov-config", "--reruns", "--timeout", "--dist",
    "--shard", "--shard-id", "--num-shards", "--unit-results-dir",
})  # fmt: skip
_GLOB_CHARS = frozenset("*?[")


def _exists(path: Path, pattern: bool) -> bool:
    return bool(glob.glob(str(path))) if pattern else path.exists()


def _upstream_target(path: str, cwd: Path, test_roots: Sequence[Path], pattern: bool = False) -> Path | None:
    """Where a relative `path` that names nothing from `cwd` names something from the parent
    of a test root whose name it starts with (`unit/x.py` -> tests/unit/x.py), else None."""
    if not path or Path(path).is_absolute() or _exists(cwd / path, pattern):
        return None
    first = Path(path).parts[0]
    for root in test_roots:
        if root.name == first and _exists(root.parent / path, pattern):
            return root.parent / path
    return None


def _relative(target: Path, start: Path, original: str) -> str:
    rel = Path(os.path.relpath(target, start)).as_posix()
    return rel + "/" if original.endswith("/") and not rel.endswith("/") else rel


def _map_option_value(option: str, value: str, cwd: Path, test_roots: Sequence[Path], rootdir: Path) -> str:
    path, sep, node = value.partition("::")
    if option == "--deselect":
        # a node id prefix: pytest compares it with node ids, which are relative to its rootdir
        target = cwd / path if path and (cwd / path).exists() else _upstream_target(path, cwd, test_roots)
        if target is None:
            return value
        rel = _relative(target, rootdir, path)
        return value if rel.startswith("../") or rel == ".." else rel + sep + node
    target = _upstream_target(value, cwd, test_roots, pattern=option == "--ignore-glob")
    return value if target is None else _relative(target, cwd, value)


def _map_positional(arg: str, cwd: Path, test_roots: Sequence[Path]) -> list[str]:
    path, sep, node = arg.partition("::")
    if not path or ("/" not in path and not sep):
        return [arg]  # only arguments with a / or :: are candidates
    target = _upstream_target(path, cwd, test_roots)
    if target is not None:
        return [os.path.relpath(target, cwd) + sep + node]
    if not sep and _GLOB_CHARS & set(path) and not (cwd / path).exists():
        # upstream's run_unit.sh passes its arguments unquoted, so bash expands a quoted
        # glob ("unit/models/generation/test_vllm*.py"): expand it the same way.
        found = sorted(glob.glob(path, root_dir=cwd))
        if not found:
            target = _upstream_target(path, cwd, test_roots, pattern=True)
            found = sorted(os.path.relpath(m, cwd) for m in glob.glob(str(target))) if target else []
        return found or [arg]
    return [arg]


def map_upstream_paths(
    args: list[str], cwd: Path, test_roots: Sequence[Path], rootdir: Path | None = None
) -> list[str]:
    """Accept test paths written relative to a test root's parent, as upstream NeMo RL's
    run_unit.sh takes them (it runs from tests/: `unit/models/...`): an argument that names
    no file from `cwd`, but does from the parent of a test root whose name it starts with,
    becomes that path relative to `cwd` (`::node` ids kept). Only arguments with a `/` or
    `::` are candidates, so an option's value such as `-k unit` stays as it is.

    The values of `--ignore`, `--ignore-glob` and `--deselect` (`=VALUE` or the next
    argument) are mapped the same way; a `--deselect` value that names a file from `cwd`
    becomes relative to `rootdir` (default `cwd`), as pytest matches it against node ids.
    A path with a glob pattern that matches nothing as given is expanded, as upstream's
    unquoted `pytest $pytest_args` lets bash do."""
    rootdir = cwd if rootdir is None else rootdir
    mapped: list[str] = []
    for arg, value in _with_values(args):
        option, eq, inline = arg.partition("=")
        if value is not None:
            mapped += [arg, _map_option_value(arg, value, cwd, test_roots, rootdir) if arg in PATH_OPTIONS else value]
        elif option in PATH_OPTIONS and eq:
            mapped.append(f"{option}={_map_option_value(option, inline, cwd, test_roots, rootdir)}")
        elif arg.startswith("-"):
            mapped.append(arg)
        else:
            mapped += _map_positional(arg, cwd, test_roots)
    return mapped


def _with_values(args: list[str]) -> Iterator[tuple[str, str | None]]:
    """(argument, the next argument when it is this option's value, else None)."""
    i = 0
    while i < len(args):
        if args[i] in VALUE_OPTIONS and i + 1 < len(args):
            yield args[i], args[i + 1]
            i += 2
        else:
            yield args[i], None
            i += 1


def has_path_arg(args: list[str], cwd: Path) -> bool:
    """Whether the pytest arguments name a test path (a non-option that exists on disk; the
    value of an option such as `-k unit` or `--ignore PATH` is not one)."""
    return any(
        value is None and not arg.startswith("-") and (cwd / arg.split("::", 1)[0]).exists()
        for arg, value in _with_values(args)
    )
