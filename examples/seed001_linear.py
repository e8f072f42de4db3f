"""Seed 001 example, as written with numpy in place of torch.

Run: mpiexec -n 12 python examples/seed001_linear.py
A linear layer mapping a tensor on a 1 x 4 partition to a tensor on a 1 x 3 partition.
"""

import numpy as np
from mpi4py import MPI

from spmdrules.runtime import DistributedLinear, MPIPartition, zero_volume_tensor

P_world = MPIPartition(MPI.COMM_WORLD)

# --- the seed's example, verbatim except torch.rand -> np.random.rand ---
P_x_base = P_world.create_partition_inclusive(np.arange(0, 4))
P_x = P_x_base.create_cartesian_topology_partition([1, 4])

P_y_base = P_world.create_partition_inclusive(np.arange(4, 7))
P_y = P_y_base.create_cartesian_topology_partition([1, 3])

P_W_base = P_world.create_partition_inclusive(np.arange(0, 12))
P_W = P_W_base.create_cartesian_topology_partition([3, 4])

in_features = 16
out_features = 12

x_local_shape = np.array([1, 4])

layer = DistributedLinear(P_x, P_y, P_W, in_features, out_features)

x = zero_volume_tensor()
if P_x.active:
    x = np.random.rand(*x_local_shape)

y = layer(x)
# --- end of the seed's example ---

# Check against the serial y = W x + b, assembling x, W and b from their owners.
comm = MPI.COMM_WORLD
xs = comm.allgather((P_x.index, x))
ws = comm.allgather((P_W.index, layer.weight, layer.bias))
X = np.concatenate([b for idx, b in sorted((i, b) for i, b in xs if i is not None)], axis=1)
rows = []
for i in range(3):
    row = sorted((idx[1], w) for idx, w, _ in ws if idx is not None and idx[0] == i)
    rows.append(np.concatenate([w for _, w in row], axis=1))
W = np.concatenate(rows, axis=0)
b = np.concatenate([bb for idx, _, bb in sorted(ws, key=lambda t: t[0]) if bb is not None])
Y = X @ W.T + b
if P_y.active:
    j = P_y.index[1]
    assert np.allclose(y, Y[:, 4 * j : 4 * j + 4]), "linear example gave a wrong result"
    print(f"P_y worker {P_y.index}: y = {np.round(y, 4)}")
