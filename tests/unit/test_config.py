from collections.abc import Callable
from pathlib import Path

import pytest

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
