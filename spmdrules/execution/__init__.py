"""Layer 5, lowering and execution: a completed graph becomes a program of local kernel calls and
collectives, which runs on the in-process simulated mesh or over MPI, forward and in reverse.

Importing this package registers every kernel family (``kernels/``) and VJP family (``vjp/``).
"""

from spmdrules.execution import kernels, vjp

__all__ = ["kernels", "vjp"]
