"""The example entry points (examples/run_sft.py, run_grpo_math.py, run_eval.py) and their config checks.

The tests are pure (the rule tables, the one-line description of a failure) or run the real
scripts on configs that are refused before anything starts (a second or two each). The runs
that start Ray, as a user would, are files of their own: test_example_worker_error.py (a worker
that fails while loading its model) and test_example_ctrl_c.py.
"""

from __future__ import annotations

import json
import sys
import threading
import traceback
from pathlib import Path
from typing import Any

import pytest

from nemo_rl.algorithms.config_checks import (
    count_records,
    find_sft_export,
    looks_like_hub_id,
    model_source,
    run_checkpoints,
    sft_checkpoint,
    validate_eval,
    validate_grpo,
    validate_sft,
)
from nemo_rl.config import load_config
from tests.unit.example_runs import EXAMPLES, run_example

SFT_YAML = EXAMPLES / "configs" / "sft.yaml"
GRPO_YAML = EXAMPLES / "configs" / "grpo_math.yaml"
EVAL_YAML = EXAMPLES / "configs" / "eval.yaml"

if str(EXAMPLES) not in sys.path:  # as when run as a script: the helper sits beside it
    sys.path.insert(0, str(EXAMPLES))
import _cli  # noqa: E402

# ---------------------------------------------------------------- the rule tables (pure)


def test_the_shipped_configs_pass(in_repo: Path) -> None:
    assert validate_sft(load_config(SFT_YAML)) == []
    assert validate_grpo(load_config(GRPO_YAML)) == []
    assert validate_eval(load_config(EVAL_YAML)) == []
    # The functional tests' negative control (README: "... lr=0  # must end in FAIL") still runs.
    assert validate_sft(load_config(SFT_YAML, ["policy.optimizer.lr=0"])) == []


@pytest.mark.parametrize(
    "override, problem",
    [
        ("policy.model_name=/nonexistent/model", "policy.model_name does not exist: /nonexistent/model"),
        ("data.train_path=/nonexistent/train.jsonl", "data.train_path does not exist: /nonexistent/train.jsonl"),
        ("data.val_path=tests", "data.val_path is a directory, not a file: tests"),
        ("policy.optimizer.lr=", "policy.optimizer.lr must be a finite number >= 0, got null"),
        ("policy.optimizer.lr=-1e-3", "policy.optimizer.lr must be a finite number >= 0, got -0.001"),
        ("policy.optimizer.lr=.inf", "policy.optimizer.lr must be a finite number >= 0, got inf"),
        ("sft.max_num_steps=0", "sft.max_num_steps must be an integer >= 1, got 0"),
        ("sft.max_num_steps=2.5", "sft.max_num_steps must be an integer >= 1, got 2.5"),
        ("sft.val_period=-1", "sft.val_period must be an integer >= 0, got -1"),
        ("policy.train_micro_batch_size=0", "policy.train_micro_batch_size must be an integer >= 1, got 0"),
        ("policy.precision=fp8", "policy.precision must be one of 'auto', 'float32', 'bfloat16', 'float16'"),
        ("policy.optimizer.betas=[0.9,1.0]", "policy.optimizer.betas must be a list of two items"),
        ("cluster.gpus_per_worker=-1", "cluster.gpus_per_worker must be one of 'auto' or a finite number >= 0"),
        ("logger.log_dir=", "logger.log_dir must be a directory path, got null"),
        ("cluster.num_workers=3", "policy.train_global_batch_size (32) must be a multiple of cluster.num_workers (3)"),
        ("policy.train_global_batch_size=100000", "policy.train_global_batch_size (100000) exceeds the number"),
    ],
)
def test_sft_rules_name_the_key(in_repo: Path, override: str, problem: str) -> None:
    problems = validate_sft(load_config(SFT_YAML, [override]))
    assert problems and problems[0].startswith(problem), problems


@pytest.mark.parametrize(
    "override, problem",
    [
        ("grpo.num_generations_per_prompt=1", "grpo.num_generations_per_prompt (1) must be >= 2"),
        ("policy.generation.top_p=0", "policy.generation.top_p must be a finite number > 0 and <= 1, got 0"),
        ("loss_fn.kl_coef=-0.1", "loss_fn.kl_coef must be a finite number >= 0, got -0.1"),
        ("policy.init_from_sft=/nonexistent/ckpt", "policy.init_from_sft does not exist: /nonexistent/ckpt"),
        ("grpo.max_num_steps=0", "grpo.max_num_steps must be an integer >= 1, got 0"),
    ],
)
def test_grpo_rules_name_the_key(in_repo: Path, override: str, problem: str) -> None:
    problems = validate_grpo(load_config(GRPO_YAML, [override]))
    assert problems and problems[0].startswith(problem), problems


@pytest.mark.parametrize(
    "overrides, problem",
    [
        (["eval.checkpoint_dir=/nonexistent/ckpt"], "eval.checkpoint_dir does not exist: /nonexistent/ckpt"),
        (["eval.base_model=false"], "eval.base_model is false and eval.checkpoint_dir is null: nothing to evaluate"),
        (["data.val_path=null", "eval.num_prompts=0"], "data.val_path is null, and data.math_path is"),
        (["data.math_path=/nonexistent/math.jsonl"], "data.math_path does not exist: /nonexistent/math.jsonl"),
        (["eval.loss_batch_size=0"], "eval.loss_batch_size must be an integer >= 1, got 0"),
        (["cluster.num_workers=3"], "eval.loss_batch_size (32) must be a multiple of cluster.num_workers (3)"),
        (["eval.loss_batch_size=100000"], "eval.loss_batch_size (100000) exceeds the number of records"),
        (["eval.num_prompts=1", "cluster.num_workers=2"], "eval.num_prompts (1) must be 0 or >= cluster.num_workers"),
        (["policy.megatron_cfg.enabled=true"], "eval.num_prompts (64) needs generation, which the Megatron"),
    ],
)
def test_eval_rules_name_the_key(in_repo: Path, overrides: list[str], problem: str) -> None:
    problems = validate_eval(load_config(EVAL_YAML, overrides))
    assert problems and problems[0].startswith(problem), problems


def test_eval_needs_only_one_metric(in_repo: Path) -> None:
    assert validate_eval(load_config(EVAL_YAML, ["data.val_path=null"])) == []  # accuracy alone
    assert validate_eval(load_config(EVAL_YAML, ["data.math_path=null"])) == []  # loss alone
    megatron_loss_only = ["policy.megatron_cfg.enabled=true", "eval.num_prompts=0"]
    assert validate_eval(load_config(EVAL_YAML, megatron_loss_only)) == []


def test_run_checkpoints(tmp_path: Path) -> None:
    check = run_checkpoints()
    assert check(None) is None
    assert check(str(tmp_path / "nope")) == f"does not exist: {tmp_path / 'nope'}"
    (tmp_path / "step_5" / "policy").mkdir(parents=True)  # a step that never finished
    assert check(str(tmp_path)) == f"holds no complete checkpoint (step_N/ with training_state.json): {tmp_path}"
    (tmp_path / "step_5" / "training_state.json").write_text("{}")
    assert check(str(tmp_path)) is None


def test_model_source(tmp_path: Path, tiny_llama: str, monkeypatch: pytest.MonkeyPatch) -> None:
    check = model_source()
    assert check(tiny_llama) is None
    assert check(str(tmp_path)) == f"is not a Hugging Face model folder (no config.json): {tmp_path}"
    (tmp_path / "config.json").write_text("{}")
    assert check(str(tmp_path)).startswith("has no tokenizer")  # type: ignore[union-attr]
    assert check(str(tmp_path / "config.json")).startswith("must be a model folder, not a file")  # type: ignore[union-attr]
    # A Hub id is left to transformers (cache or download), unless the Hub is off and it is not cached.
    assert looks_like_hub_id("org/name") and looks_like_hub_id("gpt2")
    assert not looks_like_hub_id("/abs/path") and not looks_like_hub_id("a/b/c") and not looks_like_hub_id("./x")
    # huggingface_hub reads HF_HUB_OFFLINE once, at import, into `constants` (what transformers
    # obeys too): both states are set here, whatever the environment running the suite says.
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    assert check("some-org/some-model-that-is-not-cached") is None
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    assert "HF_HUB_OFFLINE is set" in str(check("some-org/some-model-that-is-not-cached"))
    # Offline, a model in the Hub cache is fine: a cache of one snapshot, as a download leaves it.
    cache = tmp_path / "hub"
    repo = cache / "models--some-org--cached-model"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text("0" * 40)
    (repo / "snapshots" / ("0" * 40)).mkdir(parents=True)
    (repo / "snapshots" / ("0" * 40) / "config.json").write_text("{}")
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    assert check("some-org/cached-model") is None


def test_sft_checkpoint(tmp_path: Path) -> None:
    check = sft_checkpoint()
    assert check(None) is None
    assert check(str(tmp_path)) == f"holds no SFT checkpoint with a policy/hf/ export: {tmp_path}"
    for step in (10, 20):
        (tmp_path / f"step_{step}" / "policy" / "hf").mkdir(parents=True)
    (tmp_path / "step_10" / "training_state.json").write_text("{}")  # step_20 never finished
    assert check(str(tmp_path)) is None
    assert find_sft_export(tmp_path) == (tmp_path / "step_10" / "policy" / "hf").resolve()
    assert find_sft_export(tmp_path / "step_20") == (tmp_path / "step_20" / "policy" / "hf").resolve()


def test_count_records(tmp_path: Path) -> None:
    f = tmp_path / "d.jsonl"
    f.write_text('{"a": 1}\n\n{"a": 2}\n   \n{"a": 3}')
    assert count_records(str(f)) == 3


# ---------------------------------------------------------------- failures as one line (pure)


def test_describe_failure_of_driver_errors() -> None:
    assert _cli.describe_failure(ValueError("batch size 64 exceeds the data set size 50\nmore")) == (
        "ValueError: batch size 64 exceeds the data set size 50"
    )
    try:
        try:
            raise KeyError("lr")
        except KeyError:
            raise RuntimeError("the message meant for the user")  # noqa: B904  (the chained cause is the point)
    except RuntimeError as e:
        assert _cli.describe_failure(e) == "RuntimeError: the message meant for the user"


def test_describe_failure_sees_through_ray_errors_raised_during_cleanup() -> None:
    """Stopping workers that already died (in a `finally`) raises again: the first error is the cause."""
    from ray.exceptions import ActorDiedError

    try:
        try:
            raise ValueError("batch size 64 exceeds the data set size 50")
        finally:
            raise ActorDiedError()
    except ActorDiedError as e:
        assert _cli.describe_failure(e) == "ValueError: batch size 64 exceeds the data set size 50"


def test_describe_failure_of_ray_errors() -> None:
    """Ray's own exception classes, built as Ray builds them (no cluster needed)."""
    from ray.exceptions import ActorDiedError, RayTaskError

    def task_error(proctitle: str, cause: Exception) -> RayTaskError:
        method = proctitle.rsplit(".", 1)[1]
        tb = (
            f'Traceback (most recent call last):\n  File "w.py", line 3, in {method}\n{type(cause).__name__}: {cause}\n'
        )
        return RayTaskError(
            method, tb, cause, proctitle=proctitle, pid=7, ip="127.0.0.1", actor_repr="<a>", actor_id="ab12"
        )

    task = task_error("ray::DTensorPolicyWorker.train", ValueError("loss is nan"))
    assert _cli.describe_failure(task.as_instanceof_cause()) == (
        "policy worker (DTensorPolicyWorker.train) failed: ValueError: loss is nan"
    )
    init = task_error("ray::DTensorPolicyWorker.__init__", ValueError("Invalid learning rate: -0.001"))
    assert _cli.describe_failure(ActorDiedError(init)) == (
        "policy worker (DTensorPolicyWorker.__init__) failed: ValueError: Invalid learning rate: -0.001"
    )
    env = task_error("ray::MathEnvironment.score", KeyError("answer"))
    assert _cli.describe_failure(env.as_instanceof_cause()) == (
        "math environment (MathEnvironment.score) failed: KeyError: 'answer'"
    )
    died = ActorDiedError()
    died.error_msg = (
        "The actor died unexpectedly before finishing this task.\n\tclass_name: DTensorPolicyWorker\n"
        "\tpid: 7\nThe actor is dead because its worker process has died."
    )
    assert _cli.describe_failure(died) == (
        "policy worker (DTensorPolicyWorker) failed: The actor is dead because its worker process has died."
    )


# What Python prints when transformers meets a corrupt safetensors shard (the worker's frames first).
_SHARD = "Error while deserializing header: HeaderTooLarge"
_MODELING = '  File "/venv/transformers/modeling_utils.py", line 4579, in _load_pretrained_model'
_TB = f"""Traceback (most recent call last):
  File "/w/nemo_rl/models/policy/dtensor_policy_worker.py", line 88, in __init__
    self.model = AutoModelForCausalLM.from_pretrained(name)
                 ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
{_MODELING}
    state_dict = load_state_dict(shard_file)
  File "/venv/transformers/modeling_utils.py", line 512, in load_state_dict
    with safe_open(checkpoint_file, framework="pt") as f:
         ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
safetensors_rust.SafetensorError: {_SHARD}
"""
_RAY_HEADER = "\x1b[36mray::DTensorPolicyWorker.__init__()\x1b[39m (pid=7, ip=10.0.0.1, actor_id=ab12, repr=<a>)"
_CHAINED = (
    "\nThe above exception was the direct cause of the following exception:\n\nTraceback (most recent call last):\n"
)


@pytest.mark.parametrize(
    "text, line",
    [
        pytest.param(_TB, f"SafetensorError: {_SHARD}", id="python-traceback"),
        pytest.param("\n".join(x.lstrip() for x in _TB.splitlines()), f"SafetensorError: {_SHARD}", id="unindented"),
        pytest.param(
            _TB.replace("Traceback (most recent call last):", _RAY_HEADER), f"SafetensorError: {_SHARD}", id="ray"
        ),
        pytest.param(
            _TB + "The actor's log has more.\n\tpid: 7\nHint: check the weights",
            f"SafetensorError: {_SHARD}",
            id="text-after",
        ),
        pytest.param(
            _TB + _CHAINED + '  File "w.py", line 9, in f\n    raise RuntimeError("x") from e\nRuntimeError: x',
            "RuntimeError: x",
            id="chained",
        ),
        pytest.param(_TB + _CHAINED + _MODELING.lstrip(), f"SafetensorError: {_SHARD}", id="cut-in-a-frame"),
        pytest.param(
            _TB + _CHAINED + _MODELING + "\n    state_dict = load(", f"SafetensorError: {_SHARD}", id="cut-in-source"
        ),
        pytest.param(
            "  File \"c.py\", line 2, in f\n    Config: TypeAlias = dict\nKeyError: 'lr'",
            "KeyError: 'lr'",
            id="source-like",
        ),
        pytest.param(
            '  File "c.py", line 2, in f\n    raise ValueError("one\\ntwo")\nValueError: one\ntwo',
            "ValueError: one",
            id="two-lines",
        ),
        pytest.param(
            '  File "c.py", line 2, in f\n    wait()\nKeyboardInterrupt', "KeyboardInterrupt", id="no-message"
        ),
        pytest.param("Traceback (most recent call last):\n" + _MODELING, None, id="frames-only"),
        pytest.param("The actor is dead because its worker process has died.\nValueError: x", None, id="no-frames"),
        pytest.param("", None, id="empty"),
    ],
)
def test_exception_line_in_a_traceback_text(text: str, line: str | None) -> None:
    """The `Type: message` line however the text is laid out; never a frame or a source line."""
    assert _cli.exception_line_in(text) == line


def test_summary_line_skips_headers_details_and_tracebacks() -> None:
    text = "The actor died unexpectedly before finishing this task.\n\tclass_name: A\n\tpid: 7\nIt died.\nMore."
    assert _cli.summary_line(text, skip=("The actor died unexpectedly before finishing this task.",)) == "It died."
    assert _cli.summary_line(_RAY_HEADER + "\n" + _MODELING + "\n    load()\n  ^^^^\nGone.") == "Gone."
    assert _cli.summary_line("\tonly: details") == "only: details"


def _load_pretrained_model() -> None:
    from safetensors import SafetensorError

    raise SafetensorError(_SHARD)


def _bad_weights() -> None:
    e = ValueError("bad weights")
    e.lock = threading.Lock()  # type: ignore[attr-defined]  # Ray cannot pickle it: it puts a RayError in its place
    raise e


def _throw(exc: BaseException) -> None:
    raise exc


def _raised(fn: Any) -> tuple[BaseException, str]:
    """A real exception, raised and caught, with its traceback text as Ray's worker formats it."""
    try:
        fn()
    except Exception as e:  # noqa: BLE001  whatever the caller's function raises is the sample
        return e, traceback.format_exc()
    raise AssertionError("it did not raise")


def _failure_shapes() -> dict[str, tuple[BaseException, str]]:
    """shape -> (the error Ray raises in the driver, what the line must say), from Ray's own classes."""
    from ray.core.generated.common_pb2 import ActorDiedErrorContext
    from ray.exceptions import ActorDiedError, RayTaskError, UnserializableException

    def task(method: str, cause: BaseException, tb: str) -> RayTaskError:
        cls, _ = method.split(".")
        return RayTaskError(method, tb, cause, f"ray::{method}", 7, "10.0.0.1", f"<{cls}>", "ab12")

    shard, tb = _raised(_load_pretrained_model)
    unindented = "\n".join(line.lstrip() for line in tb.splitlines())
    cut = tb + _CHAINED + _MODELING.lstrip()  # ends in a frame, as in the CI run
    unpicklable, unpicklable_tb = _raised(_bad_weights)
    init_failed = ActorDiedError(task("DTensorPolicyWorker.__init__", shard, tb))
    unserializable, _ = _raised(lambda: _throw(init_failed))

    def died(message: str) -> ActorDiedError:
        return ActorDiedError(
            ActorDiedErrorContext(class_name="DTensorPolicyWorker", actor_id=bytes(16), pid=7, error_message=message)
        )

    dead = "The actor is dead because its worker process has died."
    exit_detail = (
        f"{dead} Worker exit type: USER_ERROR Worker exit detail: "
        "Worker exits because there was an exception in the initialization method (e.g., __init__). "
    )
    why = f"SafetensorError: {_SHARD}"
    worker = "policy worker (DTensorPolicyWorker"
    train, init, worker = f"{worker}.train) failed", f"{worker}.__init__) failed", f"{worker}) failed"
    return {
        "task error": (task("DTensorPolicyWorker.train", shard, tb).as_instanceof_cause(), f"{train}: {why}"),
        "unindented frames": (task("DTensorPolicyWorker.train", shard, unindented), f"{train}: {why}"),
        "text cut in a frame": (task("DTensorPolicyWorker.train", shard, cut).as_instanceof_cause(), f"{train}: {why}"),
        "constructor raised": (init_failed, f"{init}: {why}"),
        "unpicklable cause": (
            task("DTensorPolicyWorker.__init__", unpicklable, unpicklable_tb),
            f"{init}: ValueError: bad weights",
        ),
        "called a failed actor": (
            task("GrpoTrainer.step", task("DTensorPolicyWorker.train", shard, tb).as_instanceof_cause(), tb),
            f"{train}: {why}",
        ),
        "not deserializable": (
            UnserializableException("\n".join(traceback.format_exception(unserializable))),
            f"{init}: {why}",
        ),
        "process died in __init__": (died(exit_detail + _RAY_HEADER + "\n" + cut), f"{init}: {why}"),
        "process died": (
            died(f"{dead} Worker exit type: SYSTEM_ERROR"),
            f"{worker}: {dead} Worker exit type: SYSTEM_ERROR",
        ),
        "no cause": (ActorDiedError(), "Ray actor failed: The actor died unexpectedly before finishing this task."),
    }


def test_failure_line_names_the_exception_and_points_to_the_log() -> None:
    """Every shape of error Ray raises gives one line: where, `Type: message`, then the log."""
    log = "/runs/logs/error.log"
    wrong = {}
    for shape, (exc, said) in _failure_shapes().items():
        if (line := _cli.failure_line(exc, log)) != f"error: {said} (traceback: {log})":
            wrong[shape] = line
    assert wrong == {}


def test_traceback_goes_to_the_log_dir_or_a_temp_file(tmp_path: Path) -> None:
    try:
        raise ValueError("boom")
    except ValueError as e:
        assert _cli._write_traceback(e, str(tmp_path / "logs")) == str(tmp_path / "logs" / "error.log")
        fallback = Path(_cli._write_traceback(e, None))
    assert "ValueError: boom" in (tmp_path / "logs" / "error.log").read_text()
    assert fallback.name.startswith("nemo_rl_error_") and "ValueError: boom" in fallback.read_text()
    fallback.unlink()


# ---------------------------------------------------------------- the real scripts, refused early


@pytest.mark.parametrize(
    "script, override, fragment",
    [
        ("run_sft.py", "policy.model_name=/nonexistent/model", "policy.model_name does not exist"),
        ("run_sft.py", "data.train_path=/nonexistent/train.jsonl", "data.train_path does not exist"),
        ("run_sft.py", "policy.optimizer.lr=", "policy.optimizer.lr must be a finite number >= 0, got null"),
        ("run_sft.py", "policy.optimizer.lr=-1e-3", "policy.optimizer.lr must be a finite number >= 0, got -0.001"),
        ("run_sft.py", "sft.max_num_steps=0", "sft.max_num_steps must be an integer >= 1, got 0"),
        ("run_sft.py", "--bogus", "unrecognized arguments: --bogus"),
        ("run_grpo_math.py", "policy.init_from_sft=/nonexistent/ckpt", "policy.init_from_sft does not exist"),
        ("run_eval.py", "eval.checkpoint_dir=/nonexistent/ckpt", "eval.checkpoint_dir does not exist"),
    ],
)
def test_bad_config_is_refused_before_anything_starts(
    in_repo: Path, tmp_path: Path, tracker: Any, script: str, override: str, fragment: str
) -> None:
    probe = tmp_path / "imported.json"
    proc, elapsed = run_example(script, override, probe=probe)
    tracker.track("elapsed_s", round(elapsed, 2))
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.count("\n") == 1 and proc.stderr.startswith("error: ") and fragment in proc.stderr
    assert proc.stdout == ""
    assert json.loads(probe.read_text()) == []  # neither Ray nor torch was even imported


def test_bad_config_as_a_user_runs_it(in_repo: Path) -> None:
    proc, _ = run_example("run_sft.py", "policy.model_name=/nonexistent/model")
    assert (proc.returncode, proc.stdout) == (2, "")
    assert proc.stderr.splitlines() == [
        (
            "error: policy.model_name does not exist: /nonexistent/model "
            "(a local model folder, or a Hugging Face Hub id such as org/name)"
        )
    ]


def test_check_config_checks_and_exits(in_repo: Path) -> None:
    proc, _ = run_example("run_grpo_math.py", "--check-config", "grpo.max_num_steps=3")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("config ok: ") and "Ray" not in proc.stdout + proc.stderr


IMPORT_AS_MODULES = """
import sys
from examples import run_eval, run_grpo_math, run_sft
from examples._cli import run_example
assert run_eval.run_example is run_sft.run_example is run_grpo_math.run_example is run_example
assert '_cli' not in sys.modules  # the package's own helper, not a top-level one
print(run_eval.DEFAULT_CONFIG.name, run_sft.DEFAULT_CONFIG.name, run_grpo_math.DEFAULT_CONFIG.name)
"""


@pytest.mark.parametrize("script", ["run_sft.py", "run_grpo_math.py", "run_eval.py"])
def test_examples_import_as_modules_and_still_run_as_scripts(in_repo: Path, script: str) -> None:
    """`from examples import run_eval` (upstream's tests import its examples so) from the root,
    and the same file as a script."""
    import subprocess

    if script == "run_sft.py":  # one import of all three is enough
        proc = subprocess.run(
            [sys.executable, "-c", IMPORT_AS_MODULES], cwd=EXAMPLES.parent, capture_output=True, text=True
        )
        assert (proc.returncode, proc.stdout) == (0, "eval.yaml sft.yaml grpo_math.yaml\n"), proc.stderr
    proc, _ = run_example(script, "--check-config")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("config ok: ")
