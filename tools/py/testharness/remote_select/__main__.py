"""`python -m testharness.remote_select TEST_FILE...`: print the static closure of test files.

Run from the repository root; reads `[tool.testharness]` and scans the current tree.
"""

from __future__ import annotations

import sys
from pathlib import Path

from .config import ConfigError, load_config
from .graph import build_graph, hash_files, parse_refs, scan_files


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
    status = 0
    for arg in args:
        rel = Path(arg).as_posix()
        if rel not in graph.index:
            print(f"error: {rel} is not a Python file under the test roots or source packages", file=sys.stderr)
            status = 2
            continue
        print(f"{rel}:")
        for path in sorted(graph.bits_to_paths(graph.closure_bits(rel))):
            if path in digests:
                print(f"  {path}")
    return status


if __name__ == "__main__":
    sys.exit(main())
