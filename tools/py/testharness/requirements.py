"""Is what a marker group `requires` importable here? (pure: no pytest, no Ray)

Two probes: `import_error` imports the modules (exact, what the pytest plugin uses), and
`spec_error` only looks them up (`importlib.util.find_spec`: cheap, no torch import), which
run_unit.sh uses to stop with one line before it starts Ray or pytest.
"""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Callable, Sequence

from testharness.settings import MarkerGroup

Probe = Callable[[Sequence[str]], "str | None"]


def import_error(modules: Sequence[str]) -> str | None:
    """None when every module imports, else why the first one does not (one line)."""
    for name in modules:
        try:
            importlib.import_module(name)
        except ImportError as exc:
            return str(exc) or type(exc).__name__
        except Exception as exc:  # a broken install fails in other ways too
            return f"{type(exc).__name__}: {exc}"
    return None


def spec_error(modules: Sequence[str]) -> str | None:
    """None when every module can be found (not imported), else why the first cannot."""
    for name in modules:
        try:
            found = importlib.util.find_spec(name) is not None
        except ImportError as exc:  # a parent package is missing or fails to import
            return str(exc) or type(exc).__name__
        except Exception as exc:
            return f"{type(exc).__name__}: {exc}"
        if not found:
            return f"No module named {name!r}"
    return None


def missing_requirement(group: MarkerGroup, probe: Probe = import_error) -> str | None:
    """The one-line usage error when the group's option is given without what it needs."""
    why = probe(group.requires)
    if why is None:
        return None
    needs = group.requires_name or ", ".join(group.requires)
    message = f"{group.option} needs {needs}, which cannot be imported ({why})"
    return f"{message}; run it as: {group.hint}" if group.hint else message


def first_missing_requirement(
    args: Sequence[str], groups: Sequence[MarkerGroup], probe: Probe = spec_error
) -> str | None:
    """For the groups whose option is among `args` (pytest's own spelling, exactly), the
    first one-line problem, or None when all they require is there."""
    for group in groups:
        if group.requires and group.option in args:
            problem = missing_requirement(group, probe)
            if problem is not None:
                return problem
    return None
