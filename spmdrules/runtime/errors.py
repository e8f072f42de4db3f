"""Typed errors of the partition runtime.

Every error the runtime raises on bad input is a subclass of
:class:`spmdrules.core.errors.SpmdError`.  Messages name the partition, the tensor and
the dimension involved and say how to fix the call.
"""

from __future__ import annotations

from spmdrules.core.errors import SpmdError, UnsupportedError


class RuntimeSetupError(SpmdError, ValueError):
    """A layer or partition cannot be built from the partitions and shapes it was given."""


class PartitionMismatchError(RuntimeSetupError):
    """Two partitions do not satisfy the rule that pairs their workers (seed 000 rules)."""


class TensorStructureError(RuntimeSetupError):
    """The local tensors handed to a layer disagree with each other or with the partition."""


class StructureDisagreementError(RuntimeSetupError):
    """The workers of a layer (or of the MPI executor) were given different partitions,
    parameters or programs: raised on every worker alike, naming the views and who holds each."""


class RankFailedError(SpmdError, RuntimeError):
    """Another worker failed, so this one cannot go on (raised on the workers that survive)."""


class SharedMemoryFallbackWarning(RuntimeWarning):
    """/dev/shm has no room for a shared-memory window: the data moves by plain messages."""


class MPIUnavailableError(RuntimeSetupError, ImportError):
    """mpi4py (and an MPI library) is needed for this call but is not installed."""


class HaloTooWideError(UnsupportedError):
    """A sliding window needs data that cannot be served (only raised when serving is disabled)."""


__all__ = [
    "HaloTooWideError",
    "MPIUnavailableError",
    "PartitionMismatchError",
    "RankFailedError",
    "RuntimeSetupError",
    "SharedMemoryFallbackWarning",
    "StructureDisagreementError",
    "TensorStructureError",
]
