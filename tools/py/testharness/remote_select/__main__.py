"""`python -m testharness.remote_select TEST_FILE...`: why tests of these files get selected.

Prints each file's static import closure (what import-time edits are checked against) and,
per test, the run-time reach recorded at its last passing `--testmon` run (what body edits
are checked against; see reach.py). Run from the repository root.
"""

from __future__ import annotations

import sys
from pathlib import Path

from .config import ConfigError, load_config
from .graph import build_graph, hash_files, parse_refs, scan_files
from .store import load_state


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    root = Path.cwd()
    try:
        cfg = load_config(root)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if not cfg.source_packages or not args:
        print("usage: python -m testharness.remote_select TEST_FILE... (needs [tool.testharness] source_packages)", file=sys.stderr)
        return 2
    files = scan_files(str(root), cfg)
    digests = hash_files(files)
    refs = {d: parse_refs(Path(files[r]).read_bytes()) for r, d in digests.items()}
    graph = build_graph(cfg, digests, refs)
    state, _ = load_state(root)
    status = 0
    for arg in args:
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
                shown = ", ".join(reach) or "nothing sent to Ray workers"
            print(f"  {nodeid.split('::', 1)[1]}: {shown}")
    return status


if __name__ == "__main__":
    sys.exit(main())
