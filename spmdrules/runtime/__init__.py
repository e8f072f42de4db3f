"""Partition runtime over MPI (seeds 000-003).

The public names follow the "Partition runtime" section of the API spec.  Importing this
package does not need mpi4py; creating a partition or a layer does.
"""

from spmdrules.runtime.abort import abort_on_error, install_excepthook
from spmdrules.runtime.all_sum_reduce import AllSumReduce
from spmdrules.runtime.conv import DistributedConv2d
from spmdrules.runtime.decomposition import (
    balanced_box,
    balanced_size,
    balanced_sizes,
    balanced_start,
    zero_volume_tensor,
)
from spmdrules.runtime.errors import (
    HaloTooWideError,
    MPIUnavailableError,
    PartitionMismatchError,
    RankFailedError,
    RuntimeSetupError,
    SharedMemoryFallbackWarning,
    StructureDisagreementError,
    TensorStructureError,
)
from spmdrules.runtime.halo import HaloExchange
from spmdrules.runtime.linear import DistributedLinear
from spmdrules.runtime.partition import MPIPartition
from spmdrules.runtime.pooling import (
    DistributedAvgPool1d,
    DistributedAvgPool2d,
    DistributedAvgPool3d,
    DistributedMaxPool1d,
    DistributedMaxPool2d,
    DistributedMaxPool3d,
)
from spmdrules.runtime.reduce_broadcast import Broadcast, SumReduce
from spmdrules.runtime.reduction_rules import match_reduction
from spmdrules.runtime.repartition import Repartition
from spmdrules.runtime.windows import Window

__all__ = [
    "AllSumReduce",
    "Broadcast",
    "DistributedAvgPool1d",
    "DistributedAvgPool2d",
    "DistributedAvgPool3d",
    "DistributedConv2d",
    "DistributedLinear",
    "DistributedMaxPool1d",
    "DistributedMaxPool2d",
    "DistributedMaxPool3d",
    "HaloExchange",
    "HaloTooWideError",
    "MPIPartition",
    "MPIUnavailableError",
    "PartitionMismatchError",
    "RankFailedError",
    "Repartition",
    "RuntimeSetupError",
    "SharedMemoryFallbackWarning",
    "StructureDisagreementError",
    "SumReduce",
    "TensorStructureError",
    "Window",
    "abort_on_error",
    "balanced_box",
    "balanced_size",
    "balanced_sizes",
    "balanced_start",
    "install_excepthook",
    "match_reduction",
    "zero_volume_tensor",
]
