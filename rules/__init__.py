"""The op rules, one module per family. Importing this package registers them all."""

from spmdrules.core.families import import_families

__all__ = import_families(__name__, __path__)
