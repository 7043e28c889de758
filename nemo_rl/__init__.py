"""nemo_rl: a compact Ray-based post-training library."""

import os

# Under `uv run`, Ray's uv hook (on by default) starts every worker from a re-packaged copy
# of the checkout, in a virtual environment of its own. Workers here run the driver's
# interpreter and environment instead. Ray reads the switch once, when `ray` is imported,
# so it is set here, before any nemo_rl module imports Ray.
os.environ.setdefault("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0")
