"""`python -m testharness.report`: the report command on its own (same as `testharness report`)."""

import sys

from testharness.report.cli import main

sys.exit(main())
