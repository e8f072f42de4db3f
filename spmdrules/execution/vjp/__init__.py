"""The vector-Jacobian products of the local kernels, one module per op family; importing this
package registers them all (see :mod:`spmdrules.execution.local`).
"""

from spmdrules.core.families import import_families

__all__ = import_families(__name__, __path__)
