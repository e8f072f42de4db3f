"""Seed 000 example, as written with numpy in place of torch.

Run: mpiexec -n 12 python examples/seed000_sum_reduce.py
Reduce a 2-D tensor partitioned by a 4 x 3 partition onto a 1 x 3 partition.
"""

import numpy as np
from mpi4py import MPI

from spmdrules.runtime import MPIPartition, SumReduce, zero_volume_tensor

P_world = MPIPartition(MPI.COMM_WORLD)

# --- the seed's example, verbatim except torch.rand -> np.random.rand ---
P_x_base = P_world.create_partition_inclusive(np.arange(0, 12))
P_x = P_x_base.create_cartesian_topology_partition([4, 3])

P_y_base = P_world.create_partition_inclusive(np.arange(0, 3))
P_y = P_y_base.create_cartesian_topology_partition([1, 3])

x_local_shape = np.array([7, 5])

layer = SumReduce(P_x, P_y, preserve_batch=False)

x = zero_volume_tensor()
if P_x.active:
    x = np.random.rand(*x_local_shape)

y = layer(x)
# --- end of the seed's example ---

# Here, each subtensor of y is the sum of 4 subtensors of x: check it.
blocks = MPI.COMM_WORLD.allgather((P_x.index, x))
if P_y.active:
    column = P_y.index[1]
    want = sum(b for idx, b in blocks if idx is not None and idx[1] == column)
    assert np.allclose(y, want), "SumReduce example gave a wrong sum"
    print(f"P_y worker {P_y.index}: y has shape {y.shape}, the sum of 4 subtensors of x")
