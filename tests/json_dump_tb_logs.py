#!/usr/bin/env -S uv run
"""Dump TensorBoard scalars to JSON (entry point into tools/py: testharness.tb_dump).

    uv run tests/json_dump_tb_logs.py LOG_DIR [--output_path OUT.json] \
        [--require-tag-prefix PREFIX] [--error-on-conflicts] [--allow-truncated]

The same command as `testharness tb-dump` (`--help` describes it). Writes
{"metric/name": {"<step>": value, ...}, ...} from every event file under LOG_DIR to
OUT.json, or to stdout without --output_path.
Exit 0 written; 1 no event files, a --require-tag-prefix no tag matches, or a refused
conflict; 2 a damaged event file (empty, not an event file, truncated, bad CRC), unless
--allow-truncated reads it up to the damage.
"""

import sys
from pathlib import Path

try:
    import testharness.tb_dump  # noqa: F401
except ImportError:
    # tools/py not installed (plain python, no uv): use the checkout's copy.
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tools" / "py"))

from testharness.tb_dump import *  # noqa: E402,F403  (the module's __all__)
from testharness.tb_dump_cli import main, merge_tb_logs_to_json  # noqa: E402,F401  (upstream's function too)

if __name__ == "__main__":
    sys.exit(main())
