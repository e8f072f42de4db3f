"""Distributed max and average pooling (seed 003) on a feature-space partition.

``P_x`` has shape ``1 x 1 x P_{D-1} x ... x P_0`` (batch and channel axes may also be split:
they are carried through).  The output has the same partition, balanced.  Padding, stride,
dilation and ceil_mode follow PyTorch and give exactly the serial result.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from spmdrules.runtime.agreement import agree, describe_partition
from spmdrules.runtime.errors import RuntimeSetupError
from spmdrules.runtime.halo import HaloExchange
from spmdrules.runtime.partition import MPIPartition
from spmdrules.runtime.windows import (
    LocalWindows,
    as_windows,
    avg_pool,
    avg_pool_adjoint,
    max_pool,
    max_pool_adjoint,
    max_pool_select,
)

Array = np.ndarray[Any, Any]
IntOrTuple = int | Sequence[int]


class _DistributedPool:
    """Halo exchange followed by the local pooling kernel; the adjoint reverses both."""

    spatial_dims: int = 0
    _op = "pool"

    def __init__(
        self,
        P_x: MPIPartition,
        kernel_size: IntOrTuple,
        stride: IntOrTuple | None = None,
        padding: IntOrTuple = 0,
        dilation: IntOrTuple = 1,
        ceil_mode: bool = False,
    ) -> None:
        name = type(self).__name__
        agree(P_x.root, name, P_x.members, {
            "P_x": describe_partition(P_x), "kernel_size": kernel_size, "stride": stride,
            "padding": padding, "dilation": dilation, "ceil_mode": ceil_mode,
        })
        if P_x.dim != 2 + self.spatial_dims:
            raise RuntimeSetupError(
                f"{name}: P_x has shape {P_x.shape} but the input is (batch, channel, "
                f"{self.spatial_dims} spatial dims); give P_x {2 + self.spatial_dims} axes"
            )
        self.windows = as_windows(
            kernel_size, stride, padding, dilation, ceil_mode, self.spatial_dims
        )
        for d, w in enumerate(self.windows):
            if 2 * w.padding > w.kernel:
                raise RuntimeSetupError(
                    f"{name}: padding {w.padding} along spatial dim {d} is more than half the "
                    f"kernel size {w.kernel}; PyTorch refuses this too. Reduce the padding"
                )
        self.P_x = P_x
        self.halo = HaloExchange(P_x, (None, None, *self.windows))
        self._slab_shape: tuple[int, ...] = ()
        self._geo: LocalWindows | None = None

    def free(self) -> None:
        """Free the halo exchange's communicator (call on every worker)."""
        self.halo.free()

    def _local(self, slab: Array, geo: LocalWindows) -> Array:
        raise NotImplementedError

    def _local_adjoint(self, dy: Array, geo: LocalWindows) -> Array:
        raise NotImplementedError

    def forward(self, x: Array) -> Array:
        """Pool this worker's block; returns its balanced block of the output."""
        x = np.asarray(x)
        if not self.P_x.active:
            return x.copy()
        slab = self.halo(x)
        assert self.halo.plan is not None
        self._geo = geo = self.halo.plan.local_windows(self.P_x.rank)
        self._slab_shape = slab.shape
        return self._local(slab, geo)

    def adjoint(self, dy: Array) -> Array:
        """Transpose of the forward (at the last input, for max pooling)."""
        dy = np.asarray(dy)
        if not self.P_x.active:
            return dy.copy()
        if self._geo is None:
            raise RuntimeSetupError(f"{type(self).__name__}.adjoint: call forward first")
        return self.halo.adjoint(self._local_adjoint(dy, self._geo))

    __call__ = forward


class _DistributedMaxPool(_DistributedPool):
    def _local(self, slab: Array, geo: LocalWindows) -> Array:
        y, self._arg = max_pool(slab, geo)
        return y

    def _local_adjoint(self, dy: Array, geo: LocalWindows) -> Array:
        return max_pool_adjoint(dy, self._arg, geo, self._slab_shape)

    def jacobian(self, v: Array) -> Array:
        """Apply the linearisation at the last forward input (whose adjoint is ``adjoint``)."""
        v = np.asarray(v)
        if not self.P_x.active:
            return v.copy()
        if self._geo is None:
            raise RuntimeSetupError(f"{type(self).__name__}.jacobian: call forward first")
        return max_pool_select(self.halo(v), self._arg, self._geo)


class _DistributedAvgPool(_DistributedPool):
    def __init__(
        self,
        P_x: MPIPartition,
        kernel_size: IntOrTuple,
        stride: IntOrTuple | None = None,
        padding: IntOrTuple = 0,
        ceil_mode: bool = False,
        count_include_pad: bool = True,
        dilation: IntOrTuple = 1,
    ) -> None:
        super().__init__(P_x, kernel_size, stride, padding, dilation, ceil_mode)
        self.count_include_pad = count_include_pad

    def _local(self, slab: Array, geo: LocalWindows) -> Array:
        return avg_pool(slab, geo, self.count_include_pad)

    def _local_adjoint(self, dy: Array, geo: LocalWindows) -> Array:
        return avg_pool_adjoint(dy, geo, self.count_include_pad, self._slab_shape)


class DistributedMaxPool1d(_DistributedMaxPool):
    """Max pooling over one spatial axis: input (N, C, L)."""

    spatial_dims = 1


class DistributedMaxPool2d(_DistributedMaxPool):
    """Max pooling over two spatial axes: input (N, C, H, W)."""

    spatial_dims = 2


class DistributedMaxPool3d(_DistributedMaxPool):
    """Max pooling over three spatial axes: input (N, C, D, H, W)."""

    spatial_dims = 3


class DistributedAvgPool1d(_DistributedAvgPool):
    """Average pooling over one spatial axis: input (N, C, L)."""

    spatial_dims = 1


class DistributedAvgPool2d(_DistributedAvgPool):
    """Average pooling over two spatial axes: input (N, C, H, W)."""

    spatial_dims = 2


class DistributedAvgPool3d(_DistributedAvgPool):
    """Average pooling over three spatial axes: input (N, C, D, H, W)."""

    spatial_dims = 3
