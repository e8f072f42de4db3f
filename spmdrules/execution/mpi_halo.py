"""The MPI executor's HaloSteps: the runtime's BoxExchange within each neighbour group."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from spmdrules.core.mesh import ProcessMesh
from spmdrules.execution import halo
from spmdrules.execution.executor import Traffic
from spmdrules.execution.program import Array, HaloStep, Program

Coord = tuple[int, ...]


class MPIHalos:
    """One communicator per (mesh, mesh dims cutting the spatial dims): the processes that differ
    only on those dims, ranked by their coordinate there; made in program order on every rank
    (``Comm.Split`` is collective). The exchanges are built on first use, per step and dtype."""

    def __init__(self, program: Program, comm: Any,
                 coords: Mapping[ProcessMesh, Mapping[int, Coord]]) -> None:
        from spmdrules.runtime._mpi import mpi

        self.program = program
        self.comm = comm
        self.rank = int(comm.Get_rank())
        self.coords = coords
        self.MPI = mpi()
        self.comms: dict[tuple[ProcessMesh, tuple[int, ...]], Any] = {}
        self.exchanges: dict[tuple[int, str], Any] = {}
        for ins in program.instructions:
            if isinstance(ins, HaloStep) and (ins.mesh, ins.mesh_dims) not in self.comms:
                self.comms[(ins.mesh, ins.mesh_dims)] = self._split(ins.mesh, ins.mesh_dims)

    def _split(self, mesh: ProcessMesh, dims: tuple[int, ...]) -> Any:
        coord = self.coords[mesh].get(self.rank)
        if coord is None:
            self.comm.Split(self.MPI.UNDEFINED, self.rank)
            return None
        rest = [(c, s) for d, (c, s) in enumerate(zip(coord, mesh.shape, strict=True))
                if d not in dims]
        mine = [(c, s) for d, (c, s) in enumerate(zip(coord, mesh.shape, strict=True))
                if d in dims]
        color = int(np.ravel_multi_index([c for c, _ in rest], [s for _, s in rest])) if rest \
            else 0
        key = int(np.ravel_multi_index([c for c, _ in mine], [s for _, s in mine])) if mine else 0
        return self.comm.Split(color, key)

    def run(self, k: int, step: HaloStep, x: Array | None, traffic: Traffic) -> Array | None:
        """Gather the needed box (forward) or return the slab's cotangent to the owners and add
        it there (adjoint)."""
        from spmdrules.runtime.box_exchange import BoxExchange

        coords = self.coords[step.mesh]
        if self.rank not in coords or x is None:
            return None
        lays = self.program.buffers
        slab, own = ((lays[step.src], lays[step.dst]) if step.adjoint
                     else (lays[step.dst], lays[step.src]))
        group = halo.groups_of(coords, step.mesh_dims)[self.rank]
        key = (k, x.dtype.str)
        ex = self.exchanges.get(key)
        if ex is None:
            ex = BoxExchange(self.comms[(step.mesh, step.mesh_dims)], group.index(self.rank),
                             x.dtype, [own.box(coords[q]) for q in group],
                             [slab.box(coords[q]) for q in group])
            self.exchanges[key] = ex
        if step.adjoint:
            out = np.empty(own.local_shape(coords[self.rank]), dtype=x.dtype)
            ex.scatter_add(x, out)
            traffic.add_halo(step.edge, ex.bytes_scatter, len(ex.recvs))
        else:
            out = np.empty(slab.local_shape(coords[self.rank]), dtype=x.dtype)
            ex.gather(x, out)
            traffic.add_halo(step.edge, ex.bytes_gather, len(ex.sends))
        return out
