"""The local kernels, one module per op family; importing this package registers them all.

The kernel contract (``LocalContext``, ``register_kernel``, ``get_kernel``) is
:mod:`spmdrules.execution.local`.
"""

from spmdrules.execution.kernels import concat_split, elementwise, matmul, nn, reduction, shape

__all__ = ["concat_split", "elementwise", "matmul", "nn", "reduction", "shape"]
