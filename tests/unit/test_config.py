from pathlib import Path

import pytest

from nemo_rl.config import ConfigError, load_config

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
