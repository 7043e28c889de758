"""`python -m testharness.functional.probe SCRIPT [ARGS...]`: run SCRIPT as `python SCRIPT ARGS`
would, and note the repository files it read (what a functional script's reach cannot get
from coverage: the example itself, its local imports, its YAML configs, data files).

At exit, the paths opened for reading (Python's `open` audit event, imports included) and
the files of every imported module, under the working directory and outside the Python
environment, are appended to $TESTHARNESS_FUNCTIONAL_READS, one absolute path a line.
Which of them are repository files is the recorder's business.
"""

from __future__ import annotations

import atexit
import os
import runpy
import sys

READS_ENV = "TESTHARNESS_FUNCTIONAL_READS"


def _note_reads(out: str) -> None:
    seen: set[str] = set()

    def hook(event: str, args: tuple[object, ...]) -> None:
        if event == "open" and isinstance(args[0], str) and not _writes(args[1]):
            seen.add(args[0])

    def write() -> None:
        files = {getattr(m, "__file__", None) for m in list(sys.modules.values())}
        paths = {os.path.abspath(p) for p in seen | {f for f in files if isinstance(f, str)}}
        # Only what may be the project's: under the working directory, outside the environment.
        here, env = os.getcwd() + os.sep, os.path.abspath(sys.prefix) + os.sep
        kept = sorted(p for p in paths if p.startswith(here) and not p.startswith(env) and "\n" not in p)
        with open(out, "a", encoding="utf-8", errors="surrogateescape") as fh:
            fh.write("".join(f"{p}\n" for p in kept))

    sys.addaudithook(hook)
    atexit.register(write)


def _writes(mode: object) -> bool:
    return isinstance(mode, str) and any(c in mode for c in "wax+")


def main() -> None:
    if len(sys.argv) < 2:
        print("usage: python -m testharness.functional.probe SCRIPT [ARGS...]", file=sys.stderr)
        raise SystemExit(2)
    script = sys.argv[1]
    sys.argv = sys.argv[1:]
    sys.path[0] = os.path.dirname(os.path.abspath(script))  # as `python SCRIPT` sets it
    out = os.environ.get(READS_ENV)
    if out:
        _note_reads(out)
    runpy.run_path(script, run_name="__main__")


if __name__ == "__main__":
    main()
