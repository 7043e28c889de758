"""load_settings: the one reader of [tool.testharness] (defaults, marker groups, one-line errors)."""

from __future__ import annotations

from pathlib import Path

import pytest

from testharness.project_root import find_project_root
from testharness.settings import MarkerGroup, SettingsError, load_settings

REPO = Path(__file__).resolve().parents[3]


def test_defaults_without_a_pyproject(tmp_path: Path) -> None:
    s = load_settings(tmp_path)
    assert s.source_packages == () and s.marker_groups == ()
    assert s.test_roots == (tmp_path / "tests",)
    assert s.remote_map_file == tmp_path / ".testharness_remote_map.json"
    assert s.remote_state_file == tmp_path / ".testharness_remote_state.json"


@pytest.mark.parametrize(
    ("pyproject", "configured"),
    [
        (None, False),
        ('[project]\nname = "x"\n[tool.ruff]\nline-length = 99\n', False),
        ("[tool.testharness]\n", True),  # the table with no key: every default, asked for
        ("[tool.testharness.hygiene]\nsettle_s = 1\n", True),  # a sub-table makes the table too
    ],
    ids=["no-pyproject", "no-table", "empty-table", "sub-table"],
)
def test_configured_is_whether_the_project_has_the_table(
    tmp_path: Path, pyproject: str | None, configured: bool
) -> None:
    """Where the harness is merely installed (no [tool.testharness]) the plugins add nothing
    but options, markers and fixtures; `configured` tells them which project they are in."""
    if pyproject is not None:
        (tmp_path / "pyproject.toml").write_text(pyproject)
    assert load_settings(tmp_path).configured is configured


@pytest.mark.parametrize(
    "inner", ["this is [not toml", "tool = 3\n", "\xff"], ids=["not-toml", "tool-not-a-table", "not-utf8"]
)
def test_the_project_root_search_passes_over_a_pyproject_it_cannot_read(tmp_path: Path, inner: str) -> None:
    """The search only looks for the table (load_settings reports a malformed file): a
    sub-project's unreadable pyproject.toml never stops it nor raises."""
    (tmp_path / "pyproject.toml").write_text("[tool.testharness]\n")
    sub = tmp_path / "sub"
    sub.mkdir()
    (sub / "pyproject.toml").write_bytes(inner.encode("latin-1"))
    assert find_project_root(sub) == tmp_path.resolve()


def test_test_roots_default_to_pytest_testpaths(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text('[tool.pytest.ini_options]\ntestpaths = ["t1", "t2"]\n')
    assert load_settings(tmp_path).test_roots == (tmp_path / "t1", tmp_path / "t2")


def test_this_repository_keeps_its_documented_names_and_groups() -> None:
    s = load_settings(REPO)
    assert s.configured
    assert s.remote_map_file.name == ".nrl_remote_map.json"
    assert s.remote_state_file.name == ".nrl_remote_state.json"
    groups = {g.name: g for g in s.marker_groups}
    assert groups["hf_gated"].option == "--hf-gated" and not groups["hf_gated"].only
    assert groups["hf_gated"].hf_models and groups["hf_gated"].marker_line.startswith("hf_gated(model_id): ")
    mcore = groups["mcore"]
    assert (mcore.option, mcore.dest, mcore.only, mcore.requires) == (
        "--mcore-only",
        "mcore_only",
        True,
        ("megatron.core",),
    )


def test_this_repository_has_upstreams_backend_groups() -> None:
    # Upstream NeMo RL marks tests vllm, automodel, sglang, trtllm, nemo_gym and runs them
    # with --<name>-only; its --*-only flags (mcore's too) are mutually exclusive.
    groups = {g.name: g for g in load_settings(REPO).marker_groups}
    options = {
        "mcore": "--mcore-only", "vllm": "--vllm-only", "automodel": "--automodel-only",
        "sglang": "--sglang-only", "trtllm": "--trtllm-only", "nemo_gym": "--nemo-gym-only",
    }  # fmt: skip
    for name, option in options.items():
        g = groups[name]
        assert (g.option, g.only, g.exclusive) == (option, True, True), name
        assert g.requires and (g.hint or g.remedy), name
    for name in set(options) - {"mcore"}:
        assert f"{name} extra is empty" in groups[name].remedy  # declared for uv, empty: the error says so
    assert not groups["hf_gated"].exclusive


def test_exclusive_and_remedy(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text(
        '[tool.testharness.marker_groups.jax]\noption = "--jax-only"\nmode = "only"\n'
        'exclusive = true\nrequires = ["jax"]\nremedy = "pip install jax"\n'
    )
    (group,) = load_settings(tmp_path).marker_groups
    assert group.exclusive and group.remedy == "pip install jax"


def test_marker_group_defaults(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text('[tool.testharness.marker_groups.slow]\noption = "--slow"\n')
    (group,) = load_settings(tmp_path).marker_groups
    assert group == MarkerGroup(name="slow", option="--slow")
    assert group.marker_line == "slow: selected by --slow"


@pytest.mark.parametrize(
    ("text", "key", "problem"),
    [
        ("[tool.testharness]\nsource_packages = 3\n", "source_packages", "must be a list of strings"),
        ("[tool.testharness]\nsource_packages = ['a-b']\n", "source_packages", "is not a top-level package name"),
        ("[tool.testharness]\nresults_dir = 3\n", "results_dir", "must be a non-empty string"),
        ("[tool.testharness]\ntest_roots = ['../x']\n", "test_roots", "must be a path inside"),
        ("[tool.testharness]\nremote_map_file = '/abs.json'\n", "remote_map_file", "must be a path inside"),
        ("[tool.testharness]\nmarker_groups = 1\n", "marker_groups", "must be a table"),
        ("[tool.testharness.marker_groups.x]\noption = 'slow'\n", "option", "must look like --some-flag"),
        ("[tool.testharness.marker_groups.x]\noption = '--x'\nmode = 'sometimes'\n", "mode", "must be one of"),
        ("[tool.testharness.marker_groups.x]\noption = '--x'\nrequire = ['m']\n", "require", "is not a known key"),
        ("[tool.testharness.marker_groups.x]\noption = '--x'\nhf_models = 'yes'\n", "hf_models", "true or false"),
        ("[tool.testharness.marker_groups.x]\noption = '--x'\nexclusive = 1\n", "exclusive", "true or false"),
        ("[tool.testharness.marker_groups.x]\noption = '--x'\nremedy = ['a']\n", "remedy", "must be a"),
        ("[tool.testharness.marker_groups.a]\noption = '--x'\n[tool.testharness.marker_groups.b]\noption = '--x'\n",
         "option", "used by two groups"),
        ("[tool.testharness\n", "", "cannot parse"),
    ],
)  # fmt: skip
def test_a_bad_value_is_one_line_naming_file_and_key(tmp_path: Path, text: str, key: str, problem: str) -> None:
    (tmp_path / "pyproject.toml").write_text(text)
    with pytest.raises(SettingsError) as info:
        load_settings(tmp_path)
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(f"{tmp_path / 'pyproject.toml'}: ")
    assert key in message and problem in message
