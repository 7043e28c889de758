"""What the example entry points share: the command line, config checks, test assets, and
how a run ends.

    PROG [--config FILE] [--check-config] [key=value ...]

The config is loaded with its overrides, missing tiny test assets are built (when the config
points into tests/unit/test_assets), then every value is checked (`nemo_rl.config.validate`
with the algorithm's table) before torch, transformers or Ray is imported. What the user sees:

  exit 0    trained; with --check-config: the config passed every check, nothing started
  exit 2    refused before anything started (a bad flag, override or value): ONE line
            `error: ...` on stderr, in about a second
  exit 1    the run failed: ONE line on stderr naming where and why, e.g.
            `error: policy worker (DTensorPolicyWorker.__init__) failed: ValueError: ... (traceback: LOG)`
            where LOG is `<logger.log_dir>/error.log` (a temporary file when that directory
            cannot be written); it holds the full traceback, the worker's frames included.
            Ray's own copy of a worker's output stays on the terminal as Ray prints it,
            every line prefixed with "(ActorName pid=N)".
  exit 130  Ctrl-C: one line `interrupted: ...` on stderr, the workers are stopped and the
            Ray cluster is shut down when this process started it (a joined cluster is left
            running); no traceback. A second Ctrl-C skips the graceful stop of the workers.
"""

from __future__ import annotations

import argparse
import re
import signal
import subprocess
import sys
import tempfile
import threading
import traceback
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import FrameType
from typing import Any, NoReturn

from nemo_rl.config import ConfigError, load_config, summarize

ROOT = Path(__file__).resolve().parents[1]
ERROR_LOG = "error.log"

Validator = Callable[[Mapping[str, Any]], list[str]]


class _Parser(argparse.ArgumentParser):
    """argparse, with a usage error as one line (`error: ... (see --help)`), exit 2."""

    def error(self, message: str) -> NoReturn:
        print(f"error: {message} (see {self.prog} --help)", file=sys.stderr)
        sys.exit(2)


def ensure_test_assets(paths: list[str]) -> None:
    """If any of `paths` lies in tests/unit/test_assets and does not exist, build the assets."""
    wanted = [Path(p) for p in paths if isinstance(p, str) and p and "test_assets" in Path(p).parts]
    if wanted and not all((p if p.is_absolute() else Path.cwd() / p).exists() for p in wanted):
        print("[assets] the tiny test assets are missing: building them (offline, about 10 s)", flush=True)
        subprocess.run([sys.executable, str(ROOT / "tests" / "unit" / "prepare_unit_test_assets.py")], check=True)


# ---------------------------------------------------------------- failures as one line

_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_RAY_PLACE = re.compile(r"ray::([\w.]+)\(\)")  # "ray::DTensorPolicyWorker.train()"
_RAY_CLASS = re.compile(r"class_name: (\w+)")  # an actor that died without an error of its own


def _first_line(text: str) -> str:
    lines = [line.strip() for line in _ANSI.sub("", text).splitlines() if line.strip()]
    return lines[0] if lines else ""


def _exception_line(exc: BaseException) -> str:
    message = _first_line(str(exc))
    return f"{type(exc).__name__}: {message}" if message else type(exc).__name__


def _root(exc: BaseException, ray_error: type[BaseException]) -> BaseException:
    """A Ray error raised while another one was propagating (stopping workers that had died
    in a `finally`) is a casualty: the error underneath is the cause."""
    while (
        isinstance(exc, ray_error)
        and exc.__context__ is not None
        and exc.__cause__ is None
        and not exc.__suppress_context__
    ):
        exc = exc.__context__
    return exc


def _role(place: str) -> str:
    """`DTensorPolicyWorker.train` -> "policy worker (DTensorPolicyWorker.train)",
    `MathEnvironment.score` -> "math environment (...)", `some_task` -> "Ray task some_task"."""
    cls = place.split(".")[0]
    if not cls[:1].isupper():  # a function: a Ray task, not an actor
        return f"Ray task {place}"
    if cls.endswith("PolicyWorker"):
        return f"policy worker ({place})"
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])", " ", cls).lower() + f" ({place})"


def describe_failure(exc: BaseException) -> str:
    """One line naming where a run failed and why; Ray's wrapped errors are unwrapped."""
    rayexc = sys.modules.get("ray.exceptions")  # a Ray error implies Ray is imported
    if rayexc is None:
        return _exception_line(exc)
    exc = _root(exc, rayexc.RayError)
    if isinstance(exc, (rayexc.RayTaskError, rayexc.RayActorError)):
        text = _ANSI.sub("", str(exc))
        place = _RAY_PLACE.search(text) or _RAY_CLASS.search(text)
        where = _role(place.group(1)) if place else "Ray actor"
        cause = getattr(exc, "cause", None)
        if isinstance(exc, rayexc.RayTaskError) and isinstance(cause, BaseException):
            why = _exception_line(cause)
        else:  # a dead actor: the last unindented line (its creation error, or why it died)
            lines = [line.strip() for line in text.splitlines() if line.strip() and not line[:1].isspace()]
            why = lines[-1] if len(lines) > 1 else _first_line(text)
            why = re.sub(r"^(?:\w+\.)+(?=\w+: )", "", why)  # safetensors._rust.SafetensorError -> SafetensorError
        return f"{where} failed: {why}"
    return _exception_line(exc)


def _write_traceback(exc: BaseException, log_dir: object) -> str:
    """The full traceback into `<log_dir>/error.log` (else a temp file); its path."""
    body = "".join(traceback.format_exception(exc))
    try:
        if not isinstance(log_dir, str) or not log_dir.strip():
            raise ValueError("no log directory")
        path = Path(log_dir) / ERROR_LOG
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(body)
        return str(path)
    except (OSError, ValueError):
        with tempfile.NamedTemporaryFile("w", prefix="nemo_rl_error_", suffix=".log", delete=False) as f:
            f.write(body)
            return f.name


# ---------------------------------------------------------------- the run


class _Interrupt:
    """SIGINT -> KeyboardInterrupt, with one line on the first; remembers that it happened."""

    def __init__(self) -> None:
        self.count = 0

    def __call__(self, signum: int, frame: FrameType | None) -> None:
        self.count += 1
        if self.count == 1:
            print(
                "\ninterrupted: stopping the workers and Ray (Ctrl-C again to skip the graceful stop)",
                file=sys.stderr,
                flush=True,
            )
        raise KeyboardInterrupt


def _ray_is_up() -> bool:
    ray = sys.modules.get("ray")
    return bool(ray is not None and ray.is_initialized())


def _stop_ray() -> None:
    ray = sys.modules.get("ray")
    if ray is not None and ray.is_initialized():
        ray.shutdown()


def _set_sigint(handler: Any) -> Any:
    """Install a SIGINT handler (main thread only); the previous one, or None."""
    if threading.current_thread() is not threading.main_thread():
        return None
    return signal.signal(signal.SIGINT, handler)


def run_training(train: Callable[[Any], object], cfg: dict[str, Any]) -> int:
    """Train; map the outcome to an exit status and one line. Shuts down Ray if it started it."""
    ray_was_up = _ray_is_up()
    on_interrupt = _Interrupt()
    previous = _set_sigint(on_interrupt)
    try:
        train(cfg)
        return 0
    except BaseException as exc:
        if on_interrupt.count or isinstance(exc, KeyboardInterrupt):
            return 130
        if isinstance(exc, SystemExit):
            raise
        log = _write_traceback(exc, cfg.get("logger", {}).get("log_dir"))
        print(f"error: {describe_failure(exc)} (traceback: {log})", file=sys.stderr, flush=True)
        return 1
    finally:
        _set_sigint(signal.SIG_IGN)  # stopping Ray must not be cut short
        try:
            if not ray_was_up:
                _stop_ray()
        finally:
            if previous is not None:
                _set_sigint(previous)


def run_example(
    description: str,
    default_config: Path,
    validate: Validator,
    train: Callable[[Any], object],
    argv: Sequence[str] | None,
) -> int:
    """`PROG [--config FILE] [--check-config] [key=value ...]`: load, build assets, check, train."""
    parser = _Parser(description=description)
    parser.add_argument("--config", type=Path, default=default_config, help="YAML config (default: %(default)s)")
    parser.add_argument(
        "--check-config",
        action="store_true",
        help="check the config (and build missing test assets), then exit: 0 when it is good",
    )
    parser.add_argument("overrides", nargs="*", help="dotted key=value overrides, e.g. policy.optimizer.lr=1e-3")
    args = parser.parse_args(argv)
    try:
        cfg = load_config(args.config, args.overrides)
        paths = [
            cfg.get(section, {}).get(key)
            for section, key in (("policy", "model_name"), ("data", "train_path"), ("data", "val_path"))
        ]
        ensure_test_assets([p for p in paths if isinstance(p, str)])
        problem = summarize(validate(cfg))
    except ConfigError as e:
        problem = str(e)
    except subprocess.CalledProcessError as e:
        print(f"error: building the test assets failed (exit status {e.returncode})", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("\ninterrupted", file=sys.stderr)
        return 130
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return 2
    if args.check_config:
        print(f"config ok: {args.config} with {len(args.overrides)} override(s)")
        return 0
    return run_training(train, cfg)
