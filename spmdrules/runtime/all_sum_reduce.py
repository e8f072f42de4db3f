"""AllSumReduce: sum subtensors along some dimensions of a Cartesian partition, in place of
every participant.  The operation is its own adjoint."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from spmdrules.runtime._mpi import is_half, mpi, mpi_datatype
from spmdrules.runtime.agreement import agree, describe_partition
from spmdrules.runtime.decomposition import aligned_empty
from spmdrules.runtime.errors import RuntimeSetupError, TensorStructureError
from spmdrules.runtime.partition import MPIPartition, free_communicator
from spmdrules.runtime.structure import (
    LocalStructure,
    PlanCache,
    StructureExchange,
    speculate,
)

Array = np.ndarray[Any, Any]


class AllSumReduce:
    """Sum along ``axes_reduce`` of ``P_x``; every worker of a slice gets the slice's sum.

    ``axes_reduce`` defaults to every dimension of ``P_x``.  Workers outside ``P_x`` return a
    copy of their input.
    """

    def __init__(
        self,
        P_x: MPIPartition,
        axes_reduce: Sequence[int] | None = None,
        *,
        check_structure: bool = True,
    ) -> None:
        agree(P_x.root, "AllSumReduce", P_x.members, {
            "P_x": describe_partition(P_x),
            "axes_reduce": None if axes_reduce is None else list(axes_reduce),
            "check_structure": check_structure,
        })
        axes = tuple(range(P_x.dim)) if axes_reduce is None else tuple(int(a) for a in axes_reduce)
        if any(not 0 <= a < P_x.dim for a in axes) or len(set(axes)) != len(axes):
            raise RuntimeSetupError(
                f"AllSumReduce: axes_reduce={list(axes)} is invalid for P_x of shape {P_x.shape}; "
                f"give distinct axes in [0, {P_x.dim})"
            )
        self.P_x = P_x
        self.axes_reduce = axes
        self.bytes_sent = 0
        self._comm: Any = None
        self._structure: StructureExchange | None = None
        if P_x.active and P_x.index is not None:
            self._comm = P_x.comm.Split(self._color(P_x.index), P_x.rank)
            self._size = int(self._comm.Get_size())
            self._sum = mpi().SUM
            self._structure = StructureExchange(P_x.root, P_x.members, check=check_structure)
        self._plans: PlanCache[Array] = PlanCache()

    def forward(self, x: Array) -> Array:
        """Sum this worker's subtensor with the others of its slice."""
        x = np.asarray(x)
        if self._comm is None or self._structure is None:
            return x.copy()
        return speculate(
            self._structure,
            self._plans,
            x,
            "AllSumReduce",
            lambda: self._plan(self._structure_list()),
            self._move,
        )

    def _move(self, out: Array, x: Array | None) -> None:
        assert x is not None
        if self._size == 1:
            np.copyto(out, x)
            return
        if is_half(x.dtype):
            # float16/bfloat16 are summed in float32 and rounded once
            acc = np.ascontiguousarray(x, dtype=np.float32)
            self._comm.Allreduce(mpi().IN_PLACE, [acc, mpi_datatype(acc.dtype)], self._sum)
            np.copyto(out, acc, casting="unsafe")
        else:
            mtype = mpi_datatype(x.dtype)
            self._comm.Allreduce([np.ascontiguousarray(x), mtype], [out, mtype], self._sum)
        # An allreduce moves at least 2 (k-1)/k of the data out of each worker.
        self.bytes_sent += 2 * (self._size - 1) * x.nbytes // self._size

    def _structure_list(self) -> list[LocalStructure]:
        assert self._structure is not None
        return self._structure.structures()

    def free(self) -> None:
        """Free the layer's communicators (call on every worker of P_x)."""
        if self._comm is not None:
            free_communicator(self._comm)
            self._comm = None
        if self._structure is not None:
            self._structure.free()
            self._structure = None

    def _color(self, index: Sequence[int]) -> int:
        """Which slice the worker at ``index`` belongs to."""
        kept = tuple(0 if d in self.axes_reduce else i for d, i in enumerate(index))
        return int(np.ravel_multi_index(kept, self.P_x.shape))

    def _plan(self, structures: list[LocalStructure]) -> Array:
        slices: dict[int, list[int]] = {}
        for r in range(self.P_x.size):
            slices.setdefault(self._color(self.P_x.index_of(r)), []).append(r)
        for ranks in slices.values():
            if len({structures[r] for r in ranks}) != 1:
                detail = ", ".join(
                    f"{self.P_x.index_of(r)}: {_describe(structures[r])}" for r in ranks
                )
                raise TensorStructureError(
                    f"AllSumReduce: the P_x workers summed together along axes "
                    f"{list(self.axes_reduce)} hold different local tensors ({detail}); give "
                    "them the same local shape and dtype"
                )
        assert self.P_x.index is not None
        st = structures[self.P_x.rank]
        assert st is not None and self._structure is not None
        # the sum sits at the page offset of this worker's input (see _mpi.py)
        return aligned_empty(st[1], st[0], self._structure.page_offsets()[self.P_x.rank])

    adjoint = forward
    __call__ = forward


def _describe(st: LocalStructure) -> str:
    return "nothing" if st is None else f"{st[1]} {st[0].name}"
