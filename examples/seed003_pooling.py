"""Seed 003: distributed max pooling on a feature-space partition, with its adjoint.

Run: mpiexec -n 12 python examples/seed003_pooling.py
The input (batch, channel, H, W) is split 1 x 1 x 3 x 4; padding, stride, dilation and
ceil_mode give exactly the serial result.
"""

import numpy as np
from mpi4py import MPI

from spmdrules.runtime import DistributedMaxPool2d, MPIPartition, balanced_box, zero_volume_tensor
from spmdrules.runtime.windows import full_geometry, max_pool

P_world = MPIPartition(MPI.COMM_WORLD)
P_x_base = P_world.create_partition_inclusive(np.arange(0, 12))
P_x = P_x_base.create_cartesian_topology_partition([1, 1, 3, 4])

global_shape = [2, 3, 17, 23]
x_global = np.random.default_rng(0).random(global_shape)

layer = DistributedMaxPool2d(P_x, kernel_size=3, stride=2, padding=1, dilation=2, ceil_mode=True)

x = zero_volume_tensor()
if P_x.active:
    x = x_global[tuple(slice(a, b) for a, b in balanced_box(global_shape, P_x.shape, P_x.index))]

y = layer(x)
dx = layer.adjoint(np.ones_like(y))

y_serial, _ = max_pool(x_global, full_geometry(global_shape[2:], layer.windows))
where = tuple(slice(a, b) for a, b in balanced_box(y_serial.shape, P_x.shape, P_x.index))
assert np.array_equal(y, y_serial[where]), "pooling differs from the serial result"
assert dx.shape == x.shape
if P_x.rank == 0:
    print(f"pooled {global_shape} -> {list(y_serial.shape)} on a 1x1x3x4 partition: exact")
