"""pytester's `sys.modules` restore, made safe for a process with other threads that import.

pytest's `SysModulesSnapshot.restore` (run after every in-process inner pytest and at every
`pytester` teardown) empties `sys.modules`, then refills it. A thread of the same process that
imports in between loads fresh copies of modules that were loaded all along. In this suite such
threads exist once a test connected the xdist worker to Ray (the driver's own threads), and on
Python 3.11 a fresh `_io` is fatal: from then on every `BytesIO` raises an `UnsupportedOperation`
of the new module, which `except io.UnsupportedOperation` no longer catches, so torch cannot
pickle a tensor for a Ray call (CI 2026-12-03: five library tests of one xdist worker failed that
way). From 3.12 `_io` is isolated (its types keep the module that made them), so that one is
harmless there; the gap still gives the thread second copies of whatever it imports in it.

`restore_in_place` puts back the same modules without the gap: it removes what the inner run
added and re-sets what it replaced, so a module loaded before the snapshot is never missing.
"""

from __future__ import annotations

import sys

from _pytest.pytester import SysModulesSnapshot


def restore_in_place(snapshot: SysModulesSnapshot) -> None:
    # The snapshot's state is name-mangled private; pytest has kept these two since 3.x.
    saved: dict[str, object] = snapshot._SysModulesSnapshot__saved  # type: ignore[attr-defined]
    preserve = snapshot._SysModulesSnapshot__preserve  # type: ignore[attr-defined]
    if preserve:
        saved.update((name, module) for name, module in list(sys.modules.items()) if preserve(name))
    for name in list(sys.modules):  # list(): a copy made under the GIL, while threads import
        if name not in saved:
            sys.modules.pop(name, None)
    sys.modules.update(saved)


def install() -> None:
    SysModulesSnapshot.restore = restore_in_place  # type: ignore[method-assign]
