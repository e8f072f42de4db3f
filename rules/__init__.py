"""The op rules, one module per family. Importing this package registers them all."""

import importlib
import pkgutil

__all__: list[str] = []

for _mod in sorted(m.name for m in pkgutil.iter_modules(__path__)):
    if not _mod.startswith("_"):
        importlib.import_module(f"{__name__}.{_mod}")
        __all__.append(_mod)
