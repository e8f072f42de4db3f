"""The local kernels, one module per op family; importing this package registers them all.

The kernel contract (``LocalContext``, ``register_kernel``, ``get_kernel``) is
:mod:`spmdrules.execution.local`.
"""

from spmdrules.core.families import import_families

__all__ = import_families(__name__, __path__)
