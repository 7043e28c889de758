"""The example entry points, also importable as modules (`from examples import run_eval`, as
upstream NeMo RL's tests import its examples); each runs as a script too: `uv run examples/run_eval.py`."""
