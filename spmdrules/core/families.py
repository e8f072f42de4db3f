"""Per-family packages: every layer keeps one module per op family, named as in ``rules/``.

A package of that kind (the rules, shape inference, kernels, VJPs, deviations) imports all of its
modules when it is imported, in name order, so a new family is one new module and nothing else.
The order is the same on every machine: where it matters (the deviation classes are tried in
registration order), it is the order of the family names.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Collection, Iterable


def import_families(package: str, path: Iterable[str], *, besides: Collection[str] = ()) -> list[str]:
    """Import every module of ``package`` (whose ``__path__`` is ``path``) by name and return the
    family names among them: all but private modules and the shared ones named in ``besides``."""
    names = sorted(m.name for m in pkgutil.iter_modules(list(path)) if not m.name.startswith("_"))
    for name in names:
        importlib.import_module(f"{package}.{name}")
    return [n for n in names if n not in besides]
