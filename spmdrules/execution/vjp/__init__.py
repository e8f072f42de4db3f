"""The vector-Jacobian products of the local kernels, one module per op family; importing this
package registers them all (see :mod:`spmdrules.execution.local`).
"""

from spmdrules.execution.vjp import elementwise, matmul, nn, reduction, shape

__all__ = ["elementwise", "matmul", "nn", "reduction", "shape"]
