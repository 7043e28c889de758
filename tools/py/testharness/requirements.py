"""May the marker-group options given run here? (pure: no pytest, no Ray)

Two questions, each answered with one line or None: do the options of two `exclusive`
groups come together (`exclusive_conflict`), and is what a given group `requires`
importable (`missing_requirement`). Two probes for the latter: `import_error` imports the
modules (exact, what the pytest plugin uses), and `spec_error` only looks them up
(`importlib.util.find_spec`: cheap, no torch import), which run_unit.sh uses to stop with
one line before it starts Ray or pytest.
"""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Callable, Collection, Sequence

from testharness.settings import MarkerGroup

Probe = Callable[[Sequence[str]], "str | None"]


def import_error(modules: Sequence[str]) -> str | None:
    """None when every module imports, else why the first one does not (one line)."""
    for name in modules:
        try:
            importlib.import_module(name)
        except ImportError as exc:
            return str(exc) or type(exc).__name__
        except Exception as exc:  # noqa: BLE001  a broken install fails in other ways too
            return f"{type(exc).__name__}: {exc}"
    return None


def spec_error(modules: Sequence[str]) -> str | None:
    """None when every module can be found (not imported), else why the first cannot."""
    for name in modules:
        try:
            found = importlib.util.find_spec(name) is not None
        except ImportError as exc:  # a parent package is missing or fails to import
            return str(exc) or type(exc).__name__
        except Exception as exc:  # noqa: BLE001  a broken install raises anything: its one line
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
    if group.remedy:
        return f"{message}; {group.remedy}"
    return f"{message}; run it as: {group.hint}" if group.hint else message


def exclusive_conflict(options: Collection[str], groups: Sequence[MarkerGroup]) -> str | None:
    """The one-line usage error when `options` (the options given) hold the options of two or
    more `exclusive` groups, naming them; None otherwise."""
    exclusive = [g.option for g in groups if g.exclusive]
    given = [o for o in exclusive if o in options]
    if len(given) < 2:
        return None
    both = f"{', '.join(given[:-1])} and {given[-1]}"
    return f"{both} are mutually exclusive: give one of {', '.join(exclusive)}"


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


def first_option_problem(args: Sequence[str], groups: Sequence[MarkerGroup], probe: Probe = spec_error) -> str | None:
    """run_unit's check before anything starts: exclusive options given together, then a
    missing requirement (one line), or None."""
    return exclusive_conflict(args, groups) or first_missing_requirement(args, groups, probe)
