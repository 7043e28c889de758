"""A post-import hook: run a callback once a top-level package has finished importing (the
remote selector patches Ray then, so a run that never imports Ray never pays for it). Pure:
the standard library only; another import hook of the user's still finds the package.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import types
from collections.abc import Callable
from typing import Any


class AfterImport(importlib.abc.MetaPathFinder):
    """Calls `callback` once the top-level package `name` has finished importing (and
    `before(spec)` as it starts)."""

    def __init__(
        self,
        name: str,
        callback: Callable[[], None],
        owner: object,
        before: Callable[[importlib.machinery.ModuleSpec], None] | None = None,
    ) -> None:
        self.name = name
        self.callback = callback
        self.owner = owner
        self.before = before

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if fullname != self.name:
            return None
        spec = self._spec_from_later_finders(fullname, path, target)
        loader = getattr(spec, "loader", None)
        if spec is None or loader is None or not hasattr(loader, "exec_module"):
            return None
        exec_module = loader.exec_module
        finder = self

        def exec_then_patch(module: types.ModuleType) -> None:
            if finder.before is not None:
                finder.before(spec)
            exec_module(module)
            if finder in sys.meta_path:
                sys.meta_path.remove(finder)
            finder.callback()

        loader.exec_module = exec_then_patch
        return spec

    def _spec_from_later_finders(self, fullname: str, path: Any, target: Any) -> importlib.machinery.ModuleSpec | None:
        """The spec the finders after this one give: an import hook of the user's (a profiler's,
        a vendoring shim's) still finds and wraps the package."""
        later = sys.meta_path[sys.meta_path.index(self) + 1 :] if self in sys.meta_path else sys.meta_path
        for finder in later:
            find_spec = getattr(finder, "find_spec", None)
            if find_spec is None:
                continue
            spec: importlib.machinery.ModuleSpec | None = find_spec(fullname, path, target)
            if spec is not None:
                return spec
        return None
