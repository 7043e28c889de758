"""Marker groups from [tool.testharness] (this repository's --hf-gated / --mcore-only), -m / -k,
a missing requirement, run_first, num_gpus, hf skips, and markers registered by the plugin."""

from __future__ import annotations

import sys
import types

import pytest

from testharness import hf_cache
from testharness.selection import selected
from testharness.settings import MarkerGroup

HARNESS_PLUGINS = ("-p", "testharness.selection", "-p", "testharness.tracker")

# This repository's two groups, as its pyproject.toml declares them; --strict-markers proves
# the plugin registers every marker (the project declares none).
MARKERS = """
[tool.pytest.ini_options]
addopts = ["--strict-markers"]

[tool.testharness.marker_groups.hf_gated]
option = "--hf-gated"
args = "model_id"
description = "needs a gated Hugging Face model (run with --hf-gated)"
hf_models = true

[tool.testharness.marker_groups.mcore]
option = "--mcore-only"
mode = "only"
requires = ["megatron.core"]
requires_name = "megatron-core"
hint = "uv run --extra mcore --group test bash tests/run_unit.sh --mcore-only"
"""
GROUPS = (
    MarkerGroup(name="hf_gated", option="--hf-gated"),
    MarkerGroup(name="mcore", option="--mcore-only", mode="only"),
)

FOUR = """
import pytest

def test_plain(): pass

@pytest.mark.hf_gated
def test_gated(): pass

@pytest.mark.mcore
def test_mcore(): pass

@pytest.mark.mcore
@pytest.mark.hf_gated
def test_mcore_gated(): pass
"""

# configuration flags -> expected tests (the table)
MATRIX = {
    (): {"test_plain"},
    ("--hf-gated",): {"test_plain", "test_gated"},
    ("--mcore-only",): {"test_mcore"},
    ("--mcore-only", "--hf-gated"): {"test_mcore", "test_mcore_gated"},
}


@pytest.fixture
def fake_megatron(monkeypatch: pytest.MonkeyPatch) -> None:
    """--mcore-only needs `import megatron.core` to work; megatron is not installed here."""
    pkg = types.ModuleType("megatron")
    core = types.ModuleType("megatron.core")
    pkg.core = core  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "megatron", pkg)
    monkeypatch.setitem(sys.modules, "megatron.core", core)


def _collected(pytester: pytest.Pytester, *args: str) -> set[str]:
    result = pytester.runpytest_inprocess(*HARNESS_PLUGINS, "--collect-only", "-q", *args)
    return {line.split("::")[-1] for line in result.outlines if "::" in line}


@pytest.mark.parametrize("flags", list(MATRIX), ids=lambda f: " ".join(f) or "default")
def test_four_configurations(pytester: pytest.Pytester, fake_megatron: None, flags: tuple[str, ...]) -> None:
    pytester.makepyprojecttoml(MARKERS)
    pytester.makepyfile(test_four=FOUR)
    assert _collected(pytester, *flags) == MATRIX[flags]


def test_selected_pure_matrix() -> None:
    for flags, expected in MATRIX.items():
        for name, marks in [
            ("test_plain", set()),
            ("test_gated", {"hf_gated"}),
            ("test_mcore", {"mcore"}),
            ("test_mcore_gated", {"mcore", "hf_gated"}),
        ]:
            active = {g.name for g in GROUPS if g.option in flags}
            assert selected(marks, GROUPS, active) == (name in expected), (flags, name)


def test_explicit_m_replaces_the_rules(pytester: pytest.Pytester) -> None:
    pytester.makepyprojecttoml(MARKERS)
    pytester.makepyfile(test_four=FOUR)
    assert _collected(pytester, "-m", "hf_gated") == {"test_gated", "test_mcore_gated"}
    assert _collected(pytester, "-m", "not mcore") == {"test_plain", "test_gated"}


def test_k_combines_with_the_rules(pytester: pytest.Pytester, fake_megatron: None) -> None:
    pytester.makepyprojecttoml(MARKERS)
    pytester.makepyfile(test_four=FOUR)
    assert _collected(pytester, "--hf-gated", "-k", "gated") == {"test_gated"}
    assert _collected(pytester, "--mcore-only", "--hf-gated", "-k", "gated") == {"test_mcore_gated"}
    assert _collected(pytester, "-k", "mcore") == set()


def test_missing_megatron_stops_with_one_line(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    # None in sys.modules makes `import megatron.core` raise ImportError, installed or not.
    monkeypatch.setitem(sys.modules, "megatron", None)
    monkeypatch.setitem(sys.modules, "megatron.core", None)
    pytester.makepyprojecttoml(MARKERS)
    pytester.makepyfile(test_four=FOUR)
    result = pytester.runpytest_inprocess(*HARNESS_PLUGINS, "--mcore-only")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    errors = [line for line in result.errlines if line.strip()]
    assert len(errors) == 1, result.errlines
    assert errors[0].startswith("ERROR: --mcore-only needs megatron-core")
    assert "uv run --extra mcore --group test" in errors[0]
    assert "Traceback" not in result.stdout.str() + result.stderr.str()
    assert "collected" not in result.stdout.str()  # stopped before collection


def test_run_first_runs_first(pytester: pytest.Pytester) -> None:
    pytester.makepyprojecttoml(MARKERS)
    pytester.makepyfile(
        test_a="def test_a1(): pass\ndef test_a2(): pass\n",
        test_b="import pytest\n@pytest.mark.run_first\ndef test_b_first(): pass\ndef test_b2(): pass\n",
    )
    result = pytester.runpytest_inprocess(*HARNESS_PLUGINS, "-v")
    order = [line.split("::")[1].split()[0] for line in result.outlines if " PASSED" in line]
    assert order == ["test_b_first", "test_a1", "test_a2", "test_b2"]


def test_num_gpus_skips_with_the_count(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TESTHARNESS_NUM_GPUS", "1")
    pytester.makepyprojecttoml(MARKERS)
    pytester.makepyfile(
        test_g="import pytest\n"
        "@pytest.mark.num_gpus(1)\ndef test_one(): pass\n"
        "@pytest.mark.num_gpus(2)\ndef test_two(): pass\n"
    )
    result = pytester.runpytest_inprocess(*HARNESS_PLUGINS, "-rs")
    result.assert_outcomes(passed=1, skipped=1)
    # at the test (its first line, the marker's, as a skip marker's report), not at the harness
    result.stdout.fnmatch_lines(["SKIPPED [[]1[]] test_g.py:4: needs 2 GPUs, 1 available"])


def test_hf_gated_model_skip_names_the_model(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, tmp_path: object
) -> None:
    import huggingface_hub.constants as hc

    monkeypatch.setattr(hc, "HF_HUB_CACHE", str(tmp_path))  # an empty cache
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    pytester.makepyprojecttoml(MARKERS)
    pytester.makepyfile(test_h="import pytest\n@pytest.mark.hf_gated('org-x/gated-model')\ndef test_h(): pass\n")
    result = pytester.runpytest_inprocess(*HARNESS_PLUGINS, "--hf-gated", "-rs")
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(["SKIPPED [[]1[]] test_h.py:2: *gated model org-x/gated-model is not in the local*"])


def test_a_test_that_asks_for_an_hf_model_itself_is_skipped_at_its_line(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, tmp_path: object
) -> None:
    import huggingface_hub.constants as hc

    monkeypatch.setattr(hc, "HF_HUB_CACHE", str(tmp_path))
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    pytester.makepyprojecttoml(MARKERS)
    pytester.makepyfile(
        test_h="from testharness.selection import require_hf_model\n\n"
        "def test_h():\n    x = 1\n    require_hf_model('org-x/gated-model')\n"
    )
    result = pytester.runpytest_inprocess(*HARNESS_PLUGINS, "-rs")
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(["SKIPPED [[]1[]] test_h.py:5: *gated model org-x/gated-model*"])


def test_hf_model_available_from_cache_or_token(monkeypatch: pytest.MonkeyPatch, tmp_path: object) -> None:
    from pathlib import Path

    import huggingface_hub.constants as hc

    cache = Path(str(tmp_path))
    monkeypatch.setattr(hc, "HF_HUB_CACHE", str(cache))
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert "org/m" in (hf_cache.model_unavailable_reason("org/m") or "")
    # the layout huggingface_hub writes: models--org--m/{refs/main, snapshots/<sha>/config.json}
    repo = cache / "models--org--m"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text("abc")
    (repo / "snapshots" / "abc").mkdir(parents=True)
    (repo / "snapshots" / "abc" / "config.json").write_text("{}")
    assert hf_cache.model_unavailable_reason("org/m") is None
    # not cached, online, token set: a download is allowed
    monkeypatch.delenv("HF_HUB_OFFLINE")
    monkeypatch.setenv("HF_TOKEN", "hf_x")
    assert hf_cache.model_unavailable_reason("org/other") is None


def test_a_bad_marker_group_stops_with_one_line(pytester: pytest.Pytester) -> None:
    pytester.makepyprojecttoml("[tool.testharness.marker_groups.slow]\noption = 'slow'\n")
    pytester.makepyfile(test_a="def test_a(): pass\n")
    result = pytester.runpytest_inprocess(*HARNESS_PLUGINS)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    errors = [line for line in result.errlines if line.strip()]
    assert len(errors) == 1 and "marker_groups.slow] option must look like --some-flag" in errors[0], errors
    assert "Traceback" not in result.stdout.str() + result.stderr.str()


def test_without_groups_nothing_is_deselected_and_markers_still_register(pytester: pytest.Pytester) -> None:
    pytester.makepyprojecttoml('[tool.pytest.ini_options]\naddopts = ["--strict-markers"]\n')
    pytester.makepyfile(test_a="import pytest\n@pytest.mark.num_gpus(0)\ndef test_a(): pass\n")
    pytester.runpytest_inprocess(*HARNESS_PLUGINS).assert_outcomes(passed=1)
    assert "--hf-gated" not in "\n".join(pytester.runpytest_inprocess(*HARNESS_PLUGINS, "--help").outlines)


# Upstream NeMo RL's backend groups as this repository declares them: "only" groups whose
# options are mutually exclusive (exclusive = true), vllm's requirement without an extra.
UPSTREAM_GROUPS = (
    MARKERS
    + """exclusive = true

[tool.testharness.marker_groups.vllm]
option = "--vllm-only"
mode = "only"
exclusive = true
requires = ["vllm"]
remedy = "this project has no vllm extra: add one"

[tool.testharness.marker_groups.sglang]
option = "--sglang-only"
mode = "only"
exclusive = true

[tool.testharness.marker_groups.slow]
option = "--slow-only"
mode = "only"
"""
)

UPSTREAM_STYLE = """
import pytest

def test_plain(): pass

@pytest.mark.vllm
def test_vllm(): pass

@pytest.mark.vllm
@pytest.mark.hf_gated
def test_vllm_gated(): pass

@pytest.mark.sglang
def test_sglang(): pass

@pytest.mark.slow
def test_slow(): pass
"""


@pytest.fixture
def fake_vllm(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "vllm", types.ModuleType("vllm"))


@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        ((), {"test_plain"}),
        (("--hf-gated",), {"test_plain"}),
        (("--vllm-only",), {"test_vllm"}),
        (("--vllm-only", "--hf-gated"), {"test_vllm", "test_vllm_gated"}),
        (("--sglang-only",), {"test_sglang"}),
        # a group that is not exclusive still combines with one that is
        (("--vllm-only", "--slow-only"), {"test_vllm", "test_slow"}),
    ],
    ids=lambda v: " ".join(v) if isinstance(v, tuple) else "",
)
def test_upstream_backend_groups_are_left_out_unless_asked_for(
    pytester: pytest.Pytester, fake_vllm: None, flags: tuple[str, ...], expected: set[str]
) -> None:
    pytester.makepyprojecttoml(UPSTREAM_GROUPS)  # --strict-markers: @pytest.mark.vllm is registered
    pytester.makepyfile(test_upstream=UPSTREAM_STYLE)
    assert _collected(pytester, *flags) == expected


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (("--vllm-only", "--mcore-only"), "ERROR: --mcore-only and --vllm-only are mutually exclusive: "
         "give one of --mcore-only, --vllm-only, --sglang-only"),
        (("--sglang-only", "--vllm-only", "--mcore-only"), "ERROR: --mcore-only, --vllm-only and --sglang-only "
         "are mutually exclusive"),
    ],
)  # fmt: skip
def test_exclusive_options_together_stop_with_one_line(
    pytester: pytest.Pytester, fake_megatron: None, fake_vllm: None, flags: tuple[str, ...], message: str
) -> None:
    pytester.makepyprojecttoml(UPSTREAM_GROUPS)
    pytester.makepyfile(test_upstream=UPSTREAM_STYLE)
    result = pytester.runpytest_inprocess(*HARNESS_PLUGINS, *flags)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    errors = [line for line in result.errlines if line.strip()]
    assert len(errors) == 1 and errors[0].startswith(message), errors
    assert "collected" not in result.stdout.str()  # stopped before collection


def test_a_missing_backend_says_what_to_do_in_one_line(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "vllm", None)  # `import vllm` raises ImportError, installed or not
    pytester.makepyprojecttoml(UPSTREAM_GROUPS)
    pytester.makepyfile(test_upstream=UPSTREAM_STYLE)
    result = pytester.runpytest_inprocess(*HARNESS_PLUGINS, "--vllm-only")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    errors = [line for line in result.errlines if line.strip()]
    assert len(errors) == 1, errors
    assert errors[0].startswith("ERROR: --vllm-only needs vllm, which cannot be imported (")
    assert errors[0].endswith("; this project has no vllm extra: add one")  # the remedy, as written
    assert "collected" not in result.stdout.str()


def test_help_says_which_options_exclude_each_other(pytester: pytest.Pytester) -> None:
    pytester.makepyprojecttoml(UPSTREAM_GROUPS)
    text = " ".join(" ".join(pytester.runpytest_inprocess(*HARNESS_PLUGINS, "--help").outlines).split())
    assert "run only tests marked vllm; not with --mcore-only, --sglang-only" in text
    assert "marked slow; not with" not in text
