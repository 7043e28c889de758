"""`python -m testharness.remote_select TEST_FILE...`: why tests of these files get selected.

Prints each file's static import closure (what import-time edits are checked against) and,
per test, the run-time reach recorded at its last passing `--testmon` run (what body edits
are checked against; see reach.py). Run from the repository root (or pass --root).

`add_arguments` and `run` are the subcommand's two halves, for `testharness explain`.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import NoReturn

from testharness.settings import SettingsError, load_settings

from .config import select_config
from .graph import build_graph
from .parsing import parse_refs
from .records import format_reach
from .scan import hash_files, scan_files
from .store import load_state

DESCRIPTION = "Why the tests of these files get selected under --testmon: static closure and recorded reach."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("test_files", nargs="+", metavar="TEST_FILE", help="a test file, relative to the root")
    parser.add_argument("--root", type=Path, default=None, help="the project root (default: the current directory)")


def run(args: argparse.Namespace) -> int:
    root: Path = (args.root or Path.cwd()).resolve()
    try:
        settings = load_settings(root)
    except SettingsError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    cfg, state_file = select_config(settings), settings.remote_state_file
    if not cfg.source_packages:
        print(f"error: [tool.testharness] source_packages is not set in {root / 'pyproject.toml'}", file=sys.stderr)
        return 2
    files = scan_files(str(root), cfg)
    digests = hash_files(files)
    refs = {d: parse_refs(Path(files[r]).read_bytes()) for r, d in digests.items()}
    graph = build_graph(cfg, digests, refs)
    state, _ = load_state(state_file)
    status = 0
    for arg in args.test_files:
        rel = Path(arg).as_posix()
        if rel not in graph.index:
            print(f"error: {rel} is not a Python file under the test roots or source packages", file=sys.stderr)
            status = 2
            continue
        print(f"{rel}: static closure")
        for path in sorted(graph.bits_to_paths(graph.closure_bits(rel))):
            if path in digests:
                print(f"  {path}")
        for nodeid in sorted(n for n in state.tests if n.split("::", 1)[0] == rel):
            reach = state.reaches.get(nodeid)
            if reach is None:
                shown = "unknown (started a process, or recorded before): its static closure counts"
            else:
                shown = ", ".join(format_reach(reach)) or "nothing sent to Ray workers"
            print(f"  {nodeid.split('::', 1)[1]}: {shown}")
    return status


class _OneLineErrors(argparse.ArgumentParser):
    """Bad input is one line (`prog: error: ...`), exit 2; `--help` still prints the usage."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def main(argv: Sequence[str] | None = None) -> int:
    parser = _OneLineErrors(prog="python -m testharness.remote_select", description=DESCRIPTION)
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
