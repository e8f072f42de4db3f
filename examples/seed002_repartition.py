"""Seed 002 use cases 1-5: Repartition, including scatter and gather.

Run: mpiexec -n 12 python examples/seed002_repartition.py
"""

import numpy as np
from mpi4py import MPI

from spmdrules.runtime import MPIPartition, Repartition, balanced_box, zero_volume_tensor

P_world = MPIPartition(MPI.COMM_WORLD)
rng = np.random.default_rng(0)


def run(x_shape, y_shape, global_shape, label):
    P_x = P_world.create_partition_inclusive(np.arange(int(np.prod(x_shape))))
    P_x = P_x.create_cartesian_topology_partition(x_shape)
    P_y = P_world.create_partition_inclusive(np.arange(int(np.prod(y_shape))))
    P_y = P_y.create_cartesian_topology_partition(y_shape)
    x_global = rng.random(global_shape)  # the same on every worker (same seed)

    def block(P):
        return tuple(slice(a, b) for a, b in balanced_box(global_shape, P.shape, P.index))

    x = zero_volume_tensor()
    if P_x.active:
        x = x_global[block(P_x)]
    layer = Repartition(P_x, P_y)
    y = layer(x)
    if P_y.active:
        assert np.array_equal(y, x_global[block(P_y)]), label
    if P_world.rank == 0:
        print(f"{label}: {x_shape} -> {y_shape} ok")


run([5], [3], [20], "Example 1: remap 1D partition")
run([3, 4], [4, 2], [10, 9], "Example 2: remap 2D partition")
run([3, 2, 2], [1, 2, 3], [7, 6, 9], "Example 3: remap 3D partition")
run([1, 1, 1], [1, 3, 2], [4, 9, 8], "Example 4: repartition as scatter")
run([1, 3, 2], [1, 1, 1], [4, 9, 8], "Example 5: repartition as gather")
