import importlib.util
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from nemo_rl.algorithms.config_checks import validate_grpo, validate_sft
from nemo_rl.config import (
    ConfigError,
    Relation,
    Rule,
    boolean,
    choice,
    directory_path,
    existing_file,
    integer,
    load_config,
    lookup,
    number,
    pair,
    summarize,
    text,
    validate,
)
from nemo_rl.config_upstream import resolve_upstream_keys

YAML = """
policy:
  model_name: tiny
  tokenizer: ${policy.model_name}
  optimizer: {lr: 1.0e-3, betas: [0.9, 0.99]}
sft: {max_num_steps: 3, enabled: true}
"""


@pytest.fixture()
def cfg_file(tmp_path: Path) -> Path:
    p = tmp_path / "c.yaml"
    p.write_text(YAML)
    return p


def test_overrides_and_interpolation(cfg_file: Path) -> None:
    cfg = load_config(cfg_file, ["sft.max_num_steps=7", "policy.model_name=big", "policy.optimizer.lr=0"])
    assert cfg["sft"]["max_num_steps"] == 7
    assert cfg["policy"]["tokenizer"] == "big"  # interpolation follows the override
    assert cfg["policy"]["optimizer"]["lr"] == 0


def test_plus_adds_a_key(cfg_file: Path) -> None:
    assert load_config(cfg_file, ["+sft.extra=x"])["sft"]["extra"] == "x"


@pytest.mark.parametrize(
    "override, fragment",
    [
        ("sft.max_steps=3", "unknown config key 'sft.max_steps'"),
        ("sft.max_num_steps=abc", "bad value for 'sft.max_num_steps'"),
        ("sft.enabled=3", "bad value for 'sft.enabled'"),
        ("policy.optimizer.betas=[1", "bad value for 'policy.optimizer.betas'"),
        ("nonsense", "not of the form key=value"),
        ("policy.tokenizer=${policy.nothing}", "policy.tokenizer"),
    ],
)
def test_bad_overrides_name_the_key(cfg_file: Path, override: str, fragment: str) -> None:
    with pytest.raises(ConfigError) as e:
        load_config(cfg_file, [override])
    assert fragment in str(e.value)
    assert "\n" not in str(e.value)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not found"):
        load_config(tmp_path / "nope.yaml")


def test_auto_may_become_a_number(tmp_path: Path) -> None:
    p = tmp_path / "c.yaml"
    p.write_text("cluster: {gpus_per_worker: auto, name: x}\n")
    assert load_config(p, ["cluster.gpus_per_worker=0.5"])["cluster"]["gpus_per_worker"] == 0.5
    with pytest.raises(ConfigError, match="bad value for 'cluster.name'"):
        load_config(p, ["cluster.name=3"])


# ---------------------------------------------------------------- validation rules (pure)

NAN = float("nan")


@pytest.mark.parametrize(
    "check, value, problem",
    [
        (integer(ge=1), 3, None),
        (integer(ge=1), 0, "must be an integer >= 1, got 0"),
        (integer(ge=1), 1.5, "must be an integer >= 1, got 1.5"),
        (integer(ge=1), True, "must be an integer >= 1, got true"),
        (integer(), None, "must be an integer, got null"),
        (integer(), -7, None),
        (number(gt=0), 1e-3, None),
        (number(gt=0), 0, "must be a finite number > 0, got 0"),
        (number(gt=0), -1e-3, "must be a finite number > 0, got -0.001"),
        (number(gt=0), NAN, "must be a finite number > 0, got nan"),
        (number(gt=0), float("inf"), "must be a finite number > 0, got inf"),
        (number(gt=0), "1e-3", "must be a finite number > 0, got '1e-3'"),
        (number(gt=0), None, "must be a finite number > 0, got null"),
        (number(ge=0, lt=1), 0.999, None),
        (number(ge=0, lt=1), 1, "must be a finite number >= 0 and < 1, got 1"),
        (number(gt=0, le=1), 1.0, None),
        (boolean(), False, None),
        (boolean(), "yes", "must be true or false, got 'yes'"),
        (text(), "x", None),
        (text(), "  ", "must be a non-empty string, got '  '"),
        (text(), None, "must be a non-empty string, got null"),
        (choice("auto", "float32"), "auto", None),
        (choice("auto", "float32"), "fp8", "must be one of 'auto', 'float32', got 'fp8'"),
        (choice("auto") | number(ge=0), 2, None),
        (choice("auto") | number(ge=0), "auto", None),
        (choice("auto") | number(ge=0), -1, "must be one of 'auto' or a finite number >= 0, got -1"),
        (pair(number(ge=0, lt=1)), [0.9, 0.99], None),
        (pair(number(ge=0, lt=1)), [0.9], "must be a list of two items, each a finite number >= 0 and < 1, got [0.9]"),
        (
            pair(number(ge=0, lt=1)),
            [0.9, 1.5],
            "must be a list of two items, each a finite number >= 0 and < 1, got [0.9, 1.5]",
        ),
    ],
)
def test_checks(check: Callable[[object], str | None], value: object, problem: str | None) -> None:
    assert check(value) == problem


def test_path_checks(tmp_path: Path) -> None:
    f = tmp_path / "data.jsonl"
    f.write_text("{}\n")
    assert existing_file()(str(f)) is None
    assert existing_file()(str(tmp_path / "nope.jsonl")) == f"does not exist: {tmp_path / 'nope.jsonl'}"
    assert existing_file()(str(tmp_path)) == f"is a directory, not a file: {tmp_path}"
    assert existing_file()("") == "must be a file path, got ''"
    assert directory_path()(str(tmp_path / "new" / "dir")) is None  # created later
    assert directory_path()(str(tmp_path)) is None
    assert directory_path()(str(f)) == f"must be a directory, but {f} is a file"
    assert directory_path()(None) == "must be a directory path, got null"


CFG = {"a": {"n": 6, "workers": 4, "lr": -1.0, "name": ""}, "b": {"flag": True}}
RULES = (
    Rule("a.n", integer(ge=1)),
    Rule("a.lr", number(gt=0)),
    Rule("a.name", text()),
    Rule("a.missing", integer()),
    Relation(("a.n", "a.workers"), lambda n, w: n % w == 0, "a.n ({0}) must be a multiple of a.workers ({1})"),
    Relation(("a.lr", "a.n"), lambda lr, n: lr < 1, "a.lr ({0}) must be < 1: not reported, a.lr failed its rule"),
    Relation(("a.nothing", "a.n"), lambda x, n: False, "never reported: a key is missing"),
)


def test_validate_reports_every_problem_in_table_order() -> None:
    assert lookup(CFG, "a.workers") == 4
    assert validate(CFG, RULES) == [
        "a.lr must be a finite number > 0, got -1.0",
        "a.name must be a non-empty string, got ''",
        "a.missing is missing",
        "a.n (6) must be a multiple of a.workers (4)",
    ]
    assert validate({"a": {"n": 8, "workers": 4, "lr": 1e-3, "name": "x", "missing": 0}}, RULES) == []


def test_summarize_is_one_line() -> None:
    problems = validate(CFG, RULES)
    line = summarize(problems)
    assert line == "a.lr must be a finite number > 0, got -1.0 (and 3 more: a.name, a.missing, a.n)"
    assert summarize(problems[:1]) == problems[0]
    assert summarize([]) == ""


# ---------------------------------------------------------------- upstream NeMo RL's keys

ROOT = Path(__file__).resolve().parents[2]
SFT_YAML = ROOT / "examples" / "configs" / "sft.yaml"
GRPO_YAML = ROOT / "examples" / "configs" / "grpo_math.yaml"
EVAL_YAML = ROOT / "examples" / "configs" / "eval.yaml"
RECIPE = "megatron.bridge.recipes.qwen.qwen3_600m_pretrain_config"
# Upstream's tests/functional/sft.sh and grpo.sh overrides, the model name changed (paths aside).
UPSTREAM_SFT = [
    "policy.model_name=tests/unit/test_assets/tiny_llama",
    f"policy.megatron_recipe={RECIPE}",
    "cluster.gpus_per_node=2",
    "sft.max_num_steps=3",
    "sft.val_batches=1",
    "sft.val_period=3",
    "logger.tensorboard_enabled=true",
    "logger.wandb_enabled=false",
    "logger.monitor_gpus=true",
    "checkpointing.enabled=true",
    "checkpointing.save_period=3",
]
UPSTREAM_GRPO = [
    "policy.model_name=tests/unit/test_assets/tiny_llama",
    f"policy.megatron_recipe={RECIPE}",
    "grpo.num_prompts_per_step=2",
    "grpo.num_generations_per_prompt=4",
    "policy.train_global_batch_size=4",
    "policy.train_micro_batch_size=1",
    "cluster.gpus_per_node=2",
    "grpo.max_num_steps=2",
    "logger.tensorboard_enabled=true",
    "logger.wandb_enabled=false",
    "logger.monitor_gpus=true",
    "checkpointing.enabled=false",
]


def _resolved(path: Path, overrides: list[str]) -> tuple[dict, list[str]]:
    cfg = load_config(path, overrides)
    return cfg, resolve_upstream_keys(cfg)


def test_upstream_sft_overrides_are_accepted_with_their_meaning(in_repo: Path) -> None:
    cfg, problems = _resolved(SFT_YAML, UPSTREAM_SFT)
    assert problems == []
    assert cfg["cluster"]["num_workers"] == 2  # gpus_per_node=2: two policy workers (CPU ones here)
    assert cfg["cluster"]["gpus_per_worker"] == "auto"  # a GPU each only where the cluster has them
    assert cfg["policy"]["megatron_recipe"] == RECIPE and cfg["policy"]["megatron_cfg"]["enabled"] is False
    assert (cfg["sft"]["val_batches"], cfg["sft"]["val_period"], cfg["sft"]["max_num_steps"]) == (1, 3, 3)
    assert cfg["logger"]["tensorboard_enabled"] is True and cfg["logger"]["monitor_gpus"] is True
    assert cfg["logger"]["wandb_enabled"] is False
    assert validate_sft(cfg) == []


def test_upstream_grpo_overrides_are_accepted_with_their_meaning(in_repo: Path) -> None:
    cfg, problems = _resolved(GRPO_YAML, UPSTREAM_GRPO)
    assert problems == []
    assert cfg["cluster"]["num_workers"] == 2
    assert cfg["grpo"]["num_prompts_per_step"] * cfg["grpo"]["num_generations_per_prompt"] == 8
    assert cfg["checkpointing"]["enabled"] is False
    assert validate_grpo(cfg) == []


@pytest.mark.parametrize(
    "overrides, workers",
    [
        ([], 1),  # neither given: cluster.num_workers decides
        (["cluster.num_workers=2"], 2),
        (["cluster.gpus_per_node=4"], 4),
        (["cluster.num_nodes=2"], 2),  # upstream's gpus_per_node defaults to 1
        (["cluster.gpus_per_node=2", "cluster.num_nodes=2"], 4),
        (["cluster.gpus_per_node=2", "cluster.num_workers=2"], 2),  # the same count twice: fine
        (["cluster.gpus_per_node=2", "cluster.num_nodes=null"], 2),
    ],
)
def test_gpus_per_node_times_num_nodes_is_the_worker_count(in_repo: Path, overrides: list[str], workers: int) -> None:
    cfg, problems = _resolved(SFT_YAML, overrides)
    assert problems == []
    assert cfg["cluster"]["num_workers"] == workers


@pytest.mark.parametrize(
    "yaml, overrides, problem",
    [
        (
            SFT_YAML,
            ["logger.wandb_enabled=true"],
            "logger.wandb_enabled must be false: there is no Weights & Biases here, the metrics go to "
            "TensorBoard under logger.log_dir (logger.tensorboard_enabled=true); write "
            "logger.wandb_enabled=false or drop it",
        ),
        (
            GRPO_YAML,
            ["logger.wandb_enabled=true"],
            "logger.wandb_enabled must be false: there is no Weights & Biases here",
        ),
        (
            SFT_YAML,
            [f"policy.megatron_recipe={RECIPE}", "policy.megatron_cfg.enabled=true"],
            f"policy.megatron_recipe ('{RECIPE}') names a Megatron-Bridge recipe, and there is no "
            "Megatron-Bridge here: the Megatron backend (policy.megatron_cfg.enabled=true) builds its model "
            "from policy.model_name and policy.megatron_cfg; write policy.megatron_recipe=null",
        ),
        (SFT_YAML, ["policy.megatron_recipe=''"], "policy.megatron_recipe must be null or a non-empty string"),
        (SFT_YAML, ["cluster.gpus_per_node=0"], "cluster.gpus_per_node must be null or an integer >= 1, got 0"),
        (SFT_YAML, ["cluster.num_nodes=1.5"], "cluster.num_nodes must be null or an integer >= 1, got 1.5"),
        (
            SFT_YAML,
            ["cluster.gpus_per_node=2", "cluster.num_workers=4"],
            "cluster.num_workers (4) disagrees with cluster.gpus_per_node x cluster.num_nodes (2 x null): "
            "set one of them",
        ),
    ],
)
def test_upstream_values_without_a_meaning_here_are_refused(
    in_repo: Path, yaml: Path, overrides: list[str], problem: str
) -> None:
    cfg, problems = _resolved(yaml, overrides)
    assert len(problems) == 1 and problems[0].startswith(problem), problems
    assert "\n" not in problems[0]


def test_a_refused_upstream_key_changes_nothing(in_repo: Path) -> None:
    cfg, problems = _resolved(SFT_YAML, ["cluster.gpus_per_node=2", "logger.wandb_enabled=true"])
    assert problems and cfg["cluster"]["num_workers"] == 1


def test_megatron_with_no_recipe_is_untouched(in_repo: Path) -> None:
    """tests/functional/sft_megatron.sh: the Megatron backend, recipe left at null."""
    assert _resolved(SFT_YAML, ["policy.megatron_cfg.enabled=true"])[1] == []


def test_wandb_enabled_must_be_a_boolean(in_repo: Path) -> None:
    with pytest.raises(ConfigError, match="bad value for 'logger.wandb_enabled': expected a bool"):
        load_config(SFT_YAML, ["logger.wandb_enabled=maybe"])


def test_a_config_without_upstreams_keys_is_left_as_it_is(tmp_path: Path) -> None:
    p = tmp_path / "old.yaml"
    p.write_text("cluster: {num_workers: 3, gpus_per_worker: auto}\nlogger: {log_dir: x}\n")
    cfg = load_config(p)
    assert resolve_upstream_keys(cfg) == []
    assert cfg == {"cluster": {"num_workers": 3, "gpus_per_worker": "auto"}, "logger": {"log_dir": "x"}}


def _example_main(script: str) -> Callable[[list[str]], int]:
    if str(ROOT / "examples") not in sys.path:  # as when run as a script: _cli.py sits beside it
        sys.path.insert(0, str(ROOT / "examples"))
    spec = importlib.util.spec_from_file_location(f"_example_{Path(script).stem}", ROOT / "examples" / script)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.main  # type: ignore[no-any-return]


@pytest.mark.parametrize(
    "script, overrides, status, line",
    [
        ("run_sft.py", UPSTREAM_SFT, 0, "config ok: "),
        ("run_grpo_math.py", UPSTREAM_GRPO, 0, "config ok: "),
        ("run_sft.py", [*UPSTREAM_SFT, "logger.wandb_enabled=true"], 2, "error: logger.wandb_enabled must be false"),
        (
            "run_sft.py",
            [*UPSTREAM_SFT, "policy.megatron_cfg.enabled=true"],
            2,
            "error: policy.megatron_recipe ('megatron.bridge",
        ),
        # the worker count from gpus_per_node meets the algorithm's own rules
        ("run_sft.py", ["cluster.gpus_per_node=3"], 2, "error: policy.train_global_batch_size (32) must be a multiple"),
    ],
)
def test_the_examples_apply_upstreams_keys_before_their_rules(
    in_repo: Path, capsys: pytest.CaptureFixture[str], script: str, overrides: list[str], status: int, line: str
) -> None:
    assert _example_main(script)(["--check-config", *overrides]) == status
    out, err = capsys.readouterr()
    shown = out if status == 0 else err
    assert shown.startswith(line) and shown.count("\n") == 1, (out, err)


# ---------------------------------------------------------------- policy.tokenizer.name

TOKENIZER = "tests/unit/test_assets/tokenizer"  # a tokenizer folder of its own (no model)


@pytest.mark.parametrize("form", ["policy.tokenizer.name", "+policy.tokenizer.name"])
def test_upstreams_tokenizer_name_chooses_the_tokenizer_in_both_forms(
    in_repo: Path, capsys: pytest.CaptureFixture[str], form: str
) -> None:
    # upstream's functional scripts pass policy.tokenizer.name=MODEL beside policy.model_name=MODEL
    from nemo_rl.models.policy.interfaces import tokenizer_source

    cfg = load_config(SFT_YAML, [f"{form}={TOKENIZER}"])
    assert tokenizer_source(cfg["policy"]) == TOKENIZER
    assert validate_sft(cfg) == []
    assert _example_main("run_sft.py")(["--check-config", f"{form}={TOKENIZER}"]) == 0
    assert capsys.readouterr().out.startswith("config ok: ")


@pytest.mark.parametrize("form", ["policy.tokenizer.name", "+policy.tokenizer.name"])
@pytest.mark.parametrize(
    "value, problem",
    [
        (
            "/nonexistent/tok",
            "policy.tokenizer.name does not exist: /nonexistent/tok (a local tokenizer folder, or a Hugging Face "
            "Hub id such as org/name)",
        ),
        (
            "tests/unit/test_assets/data",
            "policy.tokenizer.name has no tokenizer (tokenizer.json / tokenizer_config.json)",
        ),
        (
            "tests/unit/test_assets/tokenizer/tokenizer.json",
            "policy.tokenizer.name must be a tokenizer folder, not a file",
        ),
    ],
)
def test_a_bad_tokenizer_name_is_refused_in_both_forms(
    in_repo: Path, capsys: pytest.CaptureFixture[str], form: str, value: str, problem: str
) -> None:
    assert _example_main("run_sft.py")(["--check-config", f"{form}={value}"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {problem}") and err.count("\n") == 1, err


def test_without_a_tokenizer_name_the_model_brings_its_own(in_repo: Path) -> None:
    from nemo_rl.models.policy.interfaces import tokenizer_source

    for yaml in (SFT_YAML, GRPO_YAML, EVAL_YAML):
        policy = load_config(yaml)["policy"]
        assert policy["tokenizer"] == {"name": None}
        assert tokenizer_source(policy) == policy["model_name"]
    assert tokenizer_source({"model_name": "org/model"}) == "org/model"  # type: ignore[typeddict-item]


def test_an_older_config_without_policy_tokenizer_still_passes(in_repo: Path, tmp_path: Path) -> None:
    old = tmp_path / "sft_old.yaml"
    old.write_text("".join(line for line in SFT_YAML.read_text().splitlines(True) if "tokenizer" not in line))
    cfg = load_config(old)
    assert "tokenizer" not in cfg["policy"]
    assert validate_sft(cfg) == []


def test_local_model_and_tokenizer_paths_become_absolute_for_the_workers(in_repo: Path) -> None:
    from nemo_rl.algorithms.utils import resolve_sources

    pcfg = {"model_name": "tests/unit/test_assets/tiny_llama", "tokenizer": {"name": TOKENIZER}}
    resolve_sources(pcfg)  # type: ignore[arg-type]
    assert pcfg == {
        "model_name": str((in_repo / "tiny_llama").resolve()),
        "tokenizer": {"name": str((in_repo / "tokenizer").resolve())},
    }
    hub = {"model_name": "org/model", "tokenizer": {"name": None}}
    resolve_sources(hub)  # type: ignore[arg-type]
    assert hub == {"model_name": "org/model", "tokenizer": {"name": None}}
