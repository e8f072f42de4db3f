"""DistributedLinear (seed 001): y = W x + b with W partitioned over P_W.

``P_x`` is ``1 x P_fi``, ``P_y`` is ``1 x P_fo`` and ``P_W`` is ``P_fo x P_fi``.  The forward
broadcasts x over the columns of P_W, applies the local affine map (bias on column 0 only)
and sum-reduces over the rows of P_W into P_y (the reduction transposes P_y).  The adjoint
runs the transposes in reverse order and records the weight and bias gradients.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from spmdrules.runtime.agreement import agree, describe_partition
from spmdrules.runtime.decomposition import balanced_size, balanced_start, zero_volume_tensor
from spmdrules.runtime.errors import PartitionMismatchError, TensorStructureError
from spmdrules.runtime.partition import MPIPartition
from spmdrules.runtime.reduce_broadcast import Broadcast, SumReduce

Array = np.ndarray[Any, Any]


class DistributedLinear:
    """A linear layer whose weight is partitioned by ``P_W`` (see the module docstring).

    Weights and biases follow PyTorch's default initialisation, drawn from ``seed`` for the
    *global* tensor and sliced, so every partitioning of one layer holds the same weights.
    ``weight``/``bias`` are this worker's blocks: ``(out_local, in_local)``, and the bias is
    None off column 0 of P_W (and when ``bias=False``).
    """

    def __init__(
        self,
        P_x: MPIPartition,
        P_y: MPIPartition,
        P_W: MPIPartition,
        in_features: int,
        out_features: int,
        bias: bool = True,
        *,
        seed: int = 0,
        dtype: np.dtype[Any] | type = np.float64,
    ) -> None:
        agree(P_W.root, "DistributedLinear", {*P_x.members, *P_y.members, *P_W.members}, {
            "P_x": describe_partition(P_x), "P_y": describe_partition(P_y),
            "P_W": describe_partition(P_W), "in_features": in_features,
            "out_features": out_features, "bias": bias, "seed": seed,
            "dtype": np.dtype(dtype).name,
        })
        if P_x.dim != 2 or P_y.dim != 2 or P_W.dim != 2:
            raise PartitionMismatchError(
                f"DistributedLinear: P_x {P_x.shape}, P_y {P_y.shape} and P_W {P_W.shape} must "
                "all be 2-D: 1 x P_fi, 1 x P_fo and P_fo x P_fi"
            )
        p_fo, p_fi = P_W.shape
        if P_x.shape != (1, p_fi) or P_y.shape != (1, p_fo):
            raise PartitionMismatchError(
                f"DistributedLinear: with P_W of shape {P_W.shape} (P_fo x P_fi), P_x must be "
                f"(1, {p_fi}) and P_y (1, {p_fo}); got P_x {P_x.shape} and P_y {P_y.shape}"
            )
        self.P_x, self.P_y, self.P_W = P_x, P_y, P_W
        self.in_features, self.out_features = in_features, out_features
        self.broadcast = Broadcast(P_x, P_W, preserve_batch=True)
        self.sum_reduce = SumReduce(P_W, P_y, transpose_dest=True, preserve_batch=True)
        self.weight: Array | None = None
        self.bias: Array | None = None
        self.weight_grad: Array | None = None
        self.bias_grad: Array | None = None
        self._x: Array | None = None
        if P_W.active and P_W.index is not None:
            i, j = P_W.index
            rng = np.random.default_rng(seed)
            bound = 1.0 / np.sqrt(in_features)
            w_global = rng.uniform(-bound, bound, size=(out_features, in_features))
            b_global = rng.uniform(-bound, bound, size=out_features)
            rows = slice(
                balanced_start(out_features, p_fo, i),
                balanced_start(out_features, p_fo, i) + balanced_size(out_features, p_fo, i),
            )
            cols = slice(
                balanced_start(in_features, p_fi, j),
                balanced_start(in_features, p_fi, j) + balanced_size(in_features, p_fi, j),
            )
            self.weight = w_global[rows, cols].astype(dtype)
            if bias and j == 0:
                self.bias = b_global[rows].astype(dtype)

    def free(self) -> None:
        """Free the communicators of the inner Broadcast and SumReduce (on every worker)."""
        self.broadcast.free()
        self.sum_reduce.free()

    def forward(self, x: Array) -> Array:
        """y = W x + b; x is this worker's (batch, in_local) block on P_x."""
        x = np.asarray(x)
        xb = self.broadcast(x)
        if self.weight is not None:
            if xb.ndim != 2 or xb.shape[1] != self.weight.shape[1]:
                raise TensorStructureError(
                    f"DistributedLinear: the worker of P_W at index {self.P_W.index} received x "
                    f"of shape {xb.shape} but its weight block is {self.weight.shape}; pass x as "
                    f"(batch, in_local) with the balanced split of {self.in_features} features"
                )
            self._x = xb.copy()
            y_local = xb @ self.weight.T
            if self.bias is not None:
                y_local += self.bias
        else:
            y_local = zero_volume_tensor(xb.shape[0] if xb.ndim else None, dtype=xb.dtype)
        return self.sum_reduce(y_local)

    def adjoint(self, dy: Array) -> Array:
        """dx for the last forward input; sets ``weight_grad`` and ``bias_grad``."""
        dyb = self.sum_reduce.adjoint(np.asarray(dy))
        if self.weight is not None:
            assert self._x is not None
            self.weight_grad = dyb.T @ self._x
            self.bias_grad = dyb.sum(axis=0) if self.bias is not None else None
            dx_local = dyb @ self.weight
        else:
            dx_local = zero_volume_tensor(dyb.shape[0] if dyb.ndim else None, dtype=dyb.dtype)
        return self.broadcast.adjoint(dx_local)

    __call__ = forward
