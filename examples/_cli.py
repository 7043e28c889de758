"""What the example entry points share: the command line, config checks, test assets, and
how a run ends.

    PROG [--config FILE] [--check-config] [key=value ...]

The config is loaded with its overrides, missing tiny test assets are built (when the config
points into tests/unit/test_assets), upstream NeMo RL's keys are given their meaning here
(`nemo_rl.config_upstream`: e.g. cluster.gpus_per_node=2 is two policy workers), then every
value is checked (`nemo_rl.config.validate` with the algorithm's table) before torch,
transformers or Ray is imported. What the user sees:

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
import os
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
from nemo_rl.config_upstream import resolve_upstream_keys

# Under `uv run`, Ray's uv hook (on by default) would start every worker from a re-packaged copy
# of the checkout, in a virtual environment of its own; the workers run this interpreter and
# environment instead (and coverage follows them only then). Ray reads the switch once, when
# `ray` is imported: the examples import it only after their config checks, below.
os.environ.setdefault("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0")

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
_RAY_PLACE = re.compile(r"ray::([\w.]+)")  # "ray::DTensorPolicyWorker.train()", a worker's process title
_RAY_CLASS = re.compile(r"class_name: (\w+)")  # an actor that died without an error of its own
_FRAME = re.compile(r'\s*File "[^"]*", line \d+(?:, in .+)?')  # a traceback frame: `File "x.py", line 3, in f`
_RAISED = re.compile(r"\s*(?:[A-Za-z_]\w*\.)*([A-Z]\w*)(?:: (.*))?")  # `pkg.mod.SomeError: message`


def _lines(text: str) -> list[str]:
    return [line.rstrip() for line in _ANSI.sub("", text).splitlines() if line.strip()]


def _first_line(text: str) -> str:
    lines = _lines(text)
    return lines[0].strip() if lines else ""


def exception_line_in(text: str) -> str | None:
    """The `Type: message` line of the exception a traceback text reports, the module path
    dropped (`safetensors_rust.SafetensorError: x` -> `SafetensorError: x`); None if it has none.

    It is the first such line after a frame (`File "...", line N, in f`, its source and caret
    lines skipped); of several (chained exceptions), the last. A text cut short inside a
    frame gives the one before; a text without frames gives None: nothing raised there."""
    found, frame_indent = None, None
    for line in _lines(text):
        indent = len(line) - len(line.lstrip())
        if _FRAME.fullmatch(line):
            frame_indent = indent
        elif frame_indent is not None and indent > frame_indent:
            continue  # the frame's source line, or a caret line under it
        elif frame_indent is not None and (m := _RAISED.fullmatch(line)):
            found, frame_indent = (f"{m[1]}: {m[2].strip()}" if m[2] else m[1]), None
    return found


def summary_line(text: str, skip: Sequence[str] = ()) -> str:
    """The first line of a Ray error text that says something: not part of a traceback, not
    an indented `key: value` detail, not one of `skip` (Ray's generic headers); else the first."""
    lines = _lines(text)
    for line in lines:
        if not (
            line[:1].isspace()
            or line.strip() in skip
            or _FRAME.fullmatch(line)
            or line.startswith(("Traceback ", "ray::"))
            or not line.strip("^~ ")
        ):
            return line.strip()
    return lines[0].strip() if lines else ""


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


def _describe_ray_error(exc: BaseException, rayexc: Any) -> str:
    """Where and why, from the error's own fields first and its text only when they lack it.

    RayTaskError (also as `as_instanceof_cause()`): `.proctitle` and `.cause`. An actor whose
    constructor raised: ActorDiedError whose argument is that RayTaskError. An actor whose
    process died: ActorDiedError whose argument is Ray's ActorDiedErrorContext (`class_name`,
    `error_message`). Anything else (an unpicklable cause, an error Ray could not deserialize):
    the traceback in its text."""
    arg = exc.args[0] if isinstance(exc, rayexc.RayActorError) and exc.args else None
    task = exc if isinstance(exc, rayexc.RayTaskError) else arg if isinstance(arg, rayexc.RayTaskError) else None
    if task is not None:
        cause = getattr(task, "cause", None)
        if isinstance(cause, (rayexc.RayTaskError, rayexc.RayActorError)):  # it called one that failed
            return _describe_ray_error(cause, rayexc)
        text = str(task)  # its traceback under a `ray::Class.method()` header (as_instanceof_cause keeps only this)
        place = _RAY_PLACE.match(str(getattr(task, "proctitle", "") or "")) or _RAY_PLACE.search(text)
        if isinstance(cause, BaseException) and type(cause) is not rayexc.RayError:
            why = _exception_line(cause)
        else:  # Ray put its own RayError in place of a cause it could not pickle
            why = exception_line_in(text) or summary_line(str(cause or text))
        return f"{_role(place[1]) if place else 'Ray task'} failed: {why}"
    text = str(exc)
    details = str(getattr(arg, "error_message", "") or "") or text  # ActorDiedErrorContext
    place = _RAY_PLACE.search(text) or _RAY_CLASS.search(text)
    name = place[1] if place else str(getattr(arg, "class_name", "") or "")
    actor = isinstance(exc, rayexc.RayActorError)
    where = _role(name) if name else "Ray actor" if actor else ""
    why = exception_line_in(text)
    if why is None and actor:  # died without an error of its own: why, in Ray's words
        why = summary_line(details, skip=(rayexc.ActorDiedError.BASE_ERROR_MSG, rayexc.RayActorError.BASE_ERROR_MSG))
    if why is None:  # another Ray error (a lost object, a crashed task): its own first line
        return _exception_line(exc)
    return f"{where} failed: {why}" if where else why


def describe_failure(exc: BaseException) -> str:
    """One line naming where a run failed and why; Ray's wrapped errors are unwrapped."""
    rayexc = sys.modules.get("ray.exceptions")  # a Ray error implies Ray is imported
    if rayexc is None:
        return _exception_line(exc)
    exc = _root(exc, rayexc.RayError)
    if isinstance(exc, rayexc.RayError):
        return _describe_ray_error(exc, rayexc)
    return _exception_line(exc)


def failure_line(exc: BaseException, log: str) -> str:
    """What a failed run prints: `error: <where> failed: <Type>: <message> (traceback: LOG)`."""
    return f"error: {describe_failure(exc)} (traceback: {log})"


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
        line = failure_line(exc, log)
        # Ray's log thread forwards the workers' output (their traceback too) to stderr, writing a
        # line's text and its newline separately: a line printed now could land between the two.
        # Stop our own Ray first (its forwarding ends with it); on a joined cluster, whose
        # forwarding goes on, start on a fresh line.
        _set_sigint(signal.SIG_IGN)  # stopping Ray must not be cut short
        if not ray_was_up:
            _stop_ray()
        sys.stderr.write(("" if not _ray_is_up() else "\n") + line + "\n")
        sys.stderr.flush()
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
            for section, key in (
                ("policy", "model_name"),
                ("data", "train_path"),
                ("data", "val_path"),
                ("data", "math_path"),
            )
        ]
        paths.append(((cfg.get("policy") or {}).get("tokenizer") or {}).get("name"))
        ensure_test_assets([p for p in paths if isinstance(p, str)])
        # Upstream NeMo RL's keys first: cluster.gpus_per_node sets the worker count that the rules check.
        problems = resolve_upstream_keys(cfg)
        problem = summarize(problems + validate(cfg))
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
