"""Distributed 2-D convolution, feature-partitioned with a halo exchange.

``P_x`` has shape ``P_b x 1 x P_h x P_w``: channels are not split (every worker needs all input
channels), the weight and bias are replicated on every worker.  The output is balanced on the
same partition.  The adjoint returns dx and sets ``weight_grad`` and ``bias_grad`` (summed over
all workers with an AllSumReduce, so every worker holds the full gradient).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from spmdrules.runtime.agreement import agree, describe_partition
from spmdrules.runtime.all_sum_reduce import AllSumReduce
from spmdrules.runtime.errors import RuntimeSetupError
from spmdrules.runtime.halo import HaloExchange
from spmdrules.runtime.partition import MPIPartition
from spmdrules.runtime.windows import LocalWindows, as_windows, conv, conv_adjoint

Array = np.ndarray[Any, Any]
IntOrTuple = int | Sequence[int]


class DistributedConv2d:
    """Cross-correlation like ``torch.nn.Conv2d`` (groups=1) over a spatially split input."""

    spatial_dims = 2

    def __init__(
        self,
        P_x: MPIPartition,
        in_channels: int,
        out_channels: int,
        kernel_size: IntOrTuple,
        stride: IntOrTuple = 1,
        padding: IntOrTuple = 0,
        dilation: IntOrTuple = 1,
        bias: bool = True,
        *,
        seed: int = 0,
        dtype: np.dtype[Any] | type = np.float64,
    ) -> None:
        agree(P_x.root, type(self).__name__, P_x.members, {
            "P_x": describe_partition(P_x), "in_channels": in_channels,
            "out_channels": out_channels, "kernel_size": kernel_size, "stride": stride,
            "padding": padding, "dilation": dilation, "bias": bias, "seed": seed,
            "dtype": np.dtype(dtype).name,
        })
        if P_x.dim != 2 + self.spatial_dims or P_x.shape[1] != 1:
            raise RuntimeSetupError(
                f"DistributedConv2d: P_x has shape {P_x.shape}; it must be P_b x 1 x P_h x P_w "
                "(the channel axis cannot be split)"
            )
        self.P_x = P_x
        self.windows = as_windows(kernel_size, stride, padding, dilation, False, 2)
        rng = np.random.default_rng(seed)
        fan_in = in_channels * int(np.prod([w.kernel for w in self.windows]))
        bound = 1.0 / np.sqrt(fan_in)
        shape = (out_channels, in_channels, *(w.kernel for w in self.windows))
        self.weight: Array = rng.uniform(-bound, bound, size=shape).astype(dtype)
        self.bias: Array | None = (
            rng.uniform(-bound, bound, size=out_channels).astype(dtype) if bias else None
        )
        self.weight_grad: Array | None = None
        self.bias_grad: Array | None = None
        self.halo = HaloExchange(P_x, (None, None, *self.windows))
        self.all_sum = AllSumReduce(P_x)
        self._slab: Array | None = None
        self._geo: LocalWindows | None = None

    def free(self) -> None:
        """Free the communicators of the halo exchange and gradient sum (on every worker)."""
        self.halo.free()
        self.all_sum.free()

    def forward(self, x: Array) -> Array:
        """Convolve this worker's block; returns its balanced block of the output."""
        x = np.asarray(x)
        if not self.P_x.active:
            return x.copy()
        if x.ndim != 4 or x.shape[1] != self.weight.shape[1]:
            raise RuntimeSetupError(
                f"DistributedConv2d: the worker at {self.P_x.index} got x of shape {x.shape}; "
                f"expected (batch, {self.weight.shape[1]}, H_local, W_local)"
            )
        self._slab = slab = self.halo(x)
        assert self.halo.plan is not None
        self._geo = geo = self.halo.plan.local_windows(self.P_x.rank)
        return conv(slab, self.weight, self.bias, geo)

    def adjoint(self, dy: Array) -> Array:
        """dx for the last input; sets the (globally summed) weight and bias gradients."""
        dy = np.asarray(dy)
        if not self.P_x.active:
            return dy.copy()
        if self._slab is None or self._geo is None:
            raise RuntimeSetupError("DistributedConv2d.adjoint: call forward first")
        dslab, dweight, dbias = conv_adjoint(dy, self._slab, self.weight, self._geo)
        self.weight_grad = self.all_sum(dweight).copy()
        self.bias_grad = self.all_sum(dbias).copy() if self.bias is not None else None
        return self.halo.adjoint(dslab)

    __call__ = forward
