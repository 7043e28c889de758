"""pytest adapter: --hf-gated / --mcore-only selection, run_first order, num_gpus skips,
and the skip of hf_gated tests whose model cannot be loaded.

The four configurations (markers `hf_gated`, `mcore`):

    (default)                 neither marker
    --hf-gated                everything except mcore
    --mcore-only              mcore and not hf_gated
    --mcore-only --hf-gated   all mcore

An explicit `-m EXPR` replaces these rules; `-k` combines with them as usual.
"""

from __future__ import annotations

import pytest

from testharness import gpu
from testharness.hf_cache import model_unavailable_reason

MCORE_HINT = "uv run --extra mcore --group test bash tests/run_unit.sh --mcore-only"


def selected(markers: set[str], hf_gated: bool, mcore_only: bool) -> bool:
    """Whether a test with these marker names runs in the given configuration (pure)."""
    is_mcore = "mcore" in markers
    is_gated = "hf_gated" in markers
    if mcore_only:
        return is_mcore and (hf_gated or not is_gated)
    return not is_mcore and (hf_gated or not is_gated)


def run_first_order(items: list[pytest.Item]) -> list[pytest.Item]:
    """run_first tests first; otherwise the order is kept (a stable sort)."""
    return sorted(items, key=lambda it: it.get_closest_marker("run_first") is None)


def megatron_import_error() -> str | None:
    """None when megatron.core imports, else why not (one line)."""
    try:
        import megatron.core  # noqa: F401
    except ImportError as exc:
        return str(exc) or type(exc).__name__
    except Exception as exc:  # a broken install fails in other ways too
        return f"{type(exc).__name__}: {exc}"
    return None


def required_gpus(item: pytest.Item) -> int | None:
    """n from @pytest.mark.num_gpus(n), or None."""
    mark = item.get_closest_marker("num_gpus")
    if mark is None:
        return None
    n = mark.args[0] if mark.args else mark.kwargs.get("n")
    if not isinstance(n, int) or isinstance(n, bool) or n < 0:
        raise pytest.UsageError(f"{item.nodeid}: num_gpus needs a non-negative int, got {n!r}")
    return n


def require_hf_model(repo_id: str) -> None:
    """Skip the calling test (naming the model) unless `repo_id` can be loaded here."""
    reason = model_unavailable_reason(repo_id)
    if reason is not None:
        pytest.skip(reason)


# --- hooks -------------------------------------------------------------------------------


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("testharness-selection", "test harness (selection)")
    group.addoption(
        "--hf-gated",
        action="store_true",
        default=False,
        help="also run tests marked hf_gated (gated Hugging Face models)",
    )
    group.addoption(
        "--mcore-only",
        action="store_true",
        default=False,
        help="run only tests marked mcore (needs: uv run --extra mcore ...)",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.pluginmanager.register(_RunFirst(), f"testharness-run-first-{id(config)}")
    if config.getoption("mcore_only", False):
        why = megatron_import_error()
        if why is not None:
            # A UsageError prints one `ERROR: ...` line (no traceback) and exits before collection.
            raise pytest.UsageError(
                f"--mcore-only needs megatron-core, which cannot be imported ({why}); "
                f"run it as: {MCORE_HINT}"
            )


@pytest.hookimpl(tryfirst=True)  # filter before sharding splits the list
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.getoption("markexpr", ""):
        return  # an explicit -m replaces the configuration rules
    hf_gated = bool(config.getoption("hf_gated", False))
    mcore_only = bool(config.getoption("mcore_only", False))
    keep: list[pytest.Item] = []
    drop: list[pytest.Item] = []
    for item in items:
        names = {m.name for m in item.iter_markers()}
        (keep if selected(names, hf_gated, mcore_only) else drop).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


class _RunFirst:
    """Puts run_first tests first, after every other plugin (sharding, testmon) has filtered."""

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
        items[:] = run_first_order(items)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    need = required_gpus(item)
    if need:
        have = gpu.cluster_gpu_count()
        if have < need:
            pytest.skip(f"needs {need} GPU{'s' if need > 1 else ''}, {have} available")
    mark = item.get_closest_marker("hf_gated")
    if mark is not None:
        for repo_id in mark.args:
            if isinstance(repo_id, str):
                require_hf_model(repo_id)
