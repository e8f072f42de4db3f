"""The MPI executor: one MPI rank per process of the program, running the runtime's primitives.

Process id ``p`` of every mesh is MPI rank ``p`` of the communicator. Each rank holds the blocks
of the buffers whose mesh contains it and walks the program's instructions in order (every rank
walks all of them, so collective calls line up):

- kernel calls and local steps run on the ranks of the op's mesh;
- ``all_reduce`` with a sum is the runtime's ``AllSumReduce`` over the mesh dim of the mesh's
  Cartesian partition; other reduce types use ``Allreduce`` on the mesh-dim group with the
  reduce type's numpy combine as an MPI op applied in rank order (avg sums, then divides), so
  NaN propagates as in serial numpy (:mod:`spmdrules.runtime.reduce_ops`);
- ``reduce_scatter`` is ``Reduce_scatter`` on the mesh-dim group with the same ops, the
  scattered dim moved first;
- ``all_gather``, ``all_to_all`` and ``p2p`` are the runtime's ``BoxExchange`` (Repartition's data
  movement: one message per overlapping pair of blocks) on the mesh-dim group, or between the
  meshes;
- ``slice`` and ``zero_partial`` are local.

Bytes: box exchanges count the bytes of the messages they send; the MPI collectives count the
ring-algorithm volume of their buffers (2(n-1)/n of the block for an all-reduce, (n-1)/n for a
reduce-scatter), which is what the plans assume.

:func:`run_mpi` (:mod:`spmdrules.execution.mpi_run`, exported here too) launches a program under
``mpiexec`` from an ordinary Python process.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray

from spmdrules.core.errors import SpmdError
from spmdrules.core.mesh import ProcessMesh
from spmdrules.core.shards import scatter
from spmdrules.execution.executor import (
    ExecutionError,
    Traffic,
    call_kernel,
    gather_global,
    local_part,
    stored_feeds,
)
from spmdrules.execution.launch import mpiexec_path
from spmdrules.execution.local import LocalValue, list_kernels
from spmdrules.execution.mpi_faults import (
    agree_on_feeds,
    describe_instruction,
    program_view,
    watched,
)
from spmdrules.execution.mpi_halo import MPIHalos
from spmdrules.execution.mpi_run import MPI_ENV, MPIRun, RankReport, run_mpi
from spmdrules.execution.program import (
    Collective,
    HaloStep,
    KernelCall,
    Layout,
    LocalStep,
    Program,
    counterpart_transfer,
    mesh_coords,
    owners,
)
from spmdrules.runtime import reduce_ops
from spmdrules.runtime._mpi import dtype_code, dtype_of_code
from spmdrules.runtime.abort import fail
from spmdrules.runtime.agreement import agree
from spmdrules.runtime.decomposition import Box
from spmdrules.runtime.progress import at, current

Array = NDArray[Any]


class MPIExecutor:
    """Run a :class:`Program` on the ranks of ``comm`` (default ``COMM_WORLD``).

    Build it on every rank (it creates the communicators collectively), then call :meth:`run`
    on every rank with the same feeds. With ``timeout`` (seconds), a setup not finished by then
    aborts the job, naming the rank that holds the others up and where every rank is (as
    ``run(timeout=)`` does for a run)."""

    def __init__(self, program: Program, comm: Any = None, *,
                 timeout: float | None = None) -> None:
        from spmdrules.runtime._mpi import mpi

        t0 = time.perf_counter()
        self.comm = comm if comm is not None else mpi().COMM_WORLD
        # a rank that stops here leaves the others waiting in the setup's collectives
        with watched(self.comm, timeout, f"the setup of MPIExecutor({program.name!r})"):
            self._setup(program)
        self.setup_seconds = time.perf_counter() - t0

    def _setup(self, program: Program) -> None:
        from spmdrules.runtime._mpi import mpi
        from spmdrules.runtime.all_sum_reduce import AllSumReduce
        from spmdrules.runtime.partition import MPIPartition

        # Every rank must run the same program: a rank with another program would post other
        # messages, and the job would hang or compute garbage. One small collective, first.
        at("setup: the agreement on the program")
        agree(self.comm, "MPIExecutor", range(self.comm.Get_size()),
              {"program": program_view(program), "ranks": self.comm.Get_size()})
        at("setup: loading the kernels")
        list_kernels()  # load the kernel modules now, not inside the first timed kernel call
        self.MPI = mpi()
        self.program = program
        self.rank = int(self.comm.Get_rank())
        need = max(program.process_ids(), default=0) + 1
        if self.comm.Get_size() < need:
            raise ExecutionError(
                f"program {program.name!r} uses process ids up to {need - 1} but the MPI job has "
                f"{self.comm.Get_size()} ranks; run it with mpiexec -n {need}"
            )
        at("setup: the communicators")
        self.world = MPIPartition(self.comm)
        self._coords = {m: mesh_coords(m) for m in {lay.mesh for lay in program.buffers.values()}}
        # Communicators for every (mesh, mesh dim) a step uses, made in program order so every
        # rank makes the same collective calls.
        self._groups: dict[tuple[ProcessMesh, int], Any] = {}
        # One AllSumReduce per step: a layer keeps the plan of the structure it saw last and
        # speculates with it, so sharing one layer between tensors of different shapes would
        # move (and count) data twice.
        self._sum: dict[int, Any] = {}
        carts: dict[ProcessMesh, MPIPartition] = {}
        self._halos = MPIHalos(program, self.comm, self._coords)
        for k, ins in enumerate(program.instructions):
            if not isinstance(ins, Collective) or ins.mesh_dim is None:
                continue
            at(f"setup: the communicators of instruction {k} ({describe_instruction(ins)})")
            mesh, m = program.buffers[ins.src].mesh, ins.mesh_dim
            if (mesh, m) not in self._groups:
                self._groups[(mesh, m)] = self._split(mesh, m)
            if ins.kind == "all_reduce" and ins.reduce_type == "sum":
                if mesh not in carts:
                    carts[mesh] = self.world.create_partition_inclusive(
                        list(mesh.process_ids)).create_cartesian_topology_partition(mesh.shape)
                self._sum[k] = AllSumReduce(carts[mesh], axes_reduce=[m])

    def _split(self, mesh: ProcessMesh, m: int) -> Any:
        """This rank's group along mesh dim ``m`` (ranks ordered by their coordinate there)."""
        coord = self._coords[mesh].get(self.rank)
        if coord is None:
            self.comm.Split(self.MPI.UNDEFINED, self.rank)
            return None
        rest = tuple(c for d, c in enumerate(coord) if d != m)
        shape = tuple(s for d, s in enumerate(mesh.shape) if d != m)
        color = int(np.ravel_multi_index(rest, shape)) if shape else 0
        return self.comm.Split(color, coord[m])

    # ---- running -----------------------------------------------------------------------------
    def run(self, feeds: Mapping[str, Any], rng_seed: int = 0, *,
            sync_collectives: bool = False, timeout: float | None = None,
            on_error: str = "abort") -> tuple[dict[str, Array], RankReport]:
        """Run every instruction; return this rank's blocks and what it measured.

        With ``sync_collectives`` every rank waits at a barrier before each collective step, so
        the seconds booked under "collective" are the steps' own (the barrier's are booked under
        "sync"), not time spent waiting for slower ranks: for comparing with a cost model.

        Failures end cleanly (docs/execution.md): bad feeds raise a typed error on every rank;
        an error while the instructions run would leave the others waiting, so with
        ``on_error="abort"`` (the default) the failing rank prints its rank and error and aborts
        the job (``"raise"``: raise on this rank only, for a caller that aborts itself); with
        ``timeout`` (seconds) a run not finished by then (the feeds' agreement included) aborts
        the job, naming the rank that holds the others up and where every rank is."""
        if on_error not in ("abort", "raise"):
            raise ExecutionError(f"MPIExecutor.run: on_error={on_error!r}; use 'abort' or 'raise'")
        prog = self.program
        with watched(self.comm, timeout, f"MPIExecutor.run of {prog.name!r}"):
            agree_on_feeds(self.comm, prog, feeds)
            try:
                return self._run(feeds, rng_seed, sync_collectives)
            except BaseException as e:
                if on_error == "abort":
                    fail(e, self.comm, f"MPIExecutor.run of {prog.name!r}, at {current()}")
                raise

    def _run(self, feeds: Mapping[str, Any], rng_seed: int, sync_collectives: bool
             ) -> tuple[dict[str, Array], RankReport]:
        prog = self.program
        at("feeds: cutting this rank's blocks")
        feeds = stored_feeds(prog, feeds)
        rng = np.random.default_rng(rng_seed)  # same on every rank: partial feeds agree
        blocks: dict[str, Array] = {}
        for name in prog.feeds:
            lay = prog.buffers[name]
            coord = self._coords[lay.mesh].get(self.rank)
            x = np.asarray(feeds[name])
            if lay.attr.partial_items:
                pieces = scatter(x, lay.attr, rng)
                if coord is not None:
                    blocks[name] = pieces[coord]
            elif coord is not None:
                blocks[name] = np.array(x[tuple(slice(lo, hi) for lo, hi in lay.box(coord))])
        report = RankReport()
        sec = {"kernel": 0.0, "collective": 0.0, "local": 0.0}
        if sync_collectives:
            sec["sync"] = 0.0
        at("the barrier before the instructions")
        self.comm.Barrier()
        t_run = time.perf_counter()
        for k, ins in enumerate(prog.instructions):
            at(f"instruction {k} ({describe_instruction(ins)})")
            t0 = time.perf_counter()
            if isinstance(ins, KernelCall):
                self._kernel(ins, blocks)
                sec["kernel"] += time.perf_counter() - t0
            elif isinstance(ins, LocalStep):
                coord = self._coords[ins.mesh].get(self.rank)
                if coord is not None:
                    outs = ins.fn(coord, [blocks[n] for n in ins.inputs])
                    blocks.update(zip(ins.outputs, (np.asarray(o) for o in outs), strict=True))
                sec["local"] += time.perf_counter() - t0
            elif isinstance(ins, HaloStep):
                out = self._halos.run(k, ins, blocks.get(ins.src), report.traffic)
                if out is not None:
                    blocks[ins.dst] = out
                sec["collective"] += time.perf_counter() - t0
            else:
                if sync_collectives:
                    self.comm.Barrier()
                    t1 = time.perf_counter()
                    sec["sync"] += t1 - t0
                    t0 = t1
                out = self._collective(k, ins, blocks.get(ins.src), report.traffic)
                if out is not None:
                    blocks[ins.dst] = out
                sec["collective"] += time.perf_counter() - t0
        at("the end of the run")
        sec["run"] = time.perf_counter() - t_run
        sec["setup"] = self.setup_seconds
        report.seconds = sec
        return blocks, report

    def _kernel(self, call: KernelCall, blocks: dict[str, Array]) -> None:
        coord = self._coords[call.mesh].get(self.rank)
        if coord is None:
            return
        args: list[LocalValue] = []
        for slot in call.inputs:
            if slot is None:
                args.append(None)
            elif isinstance(slot, str):
                args.append(blocks[slot])
            else:
                args.append([None if n is None else blocks[n] for n in slot])
        try:
            blocks.update(call_kernel(call, coord, args, self.program.buffers))
        except SpmdError:
            raise
        except Exception as e:
            raise ExecutionError(f"op {call.op!r} ({call.op_type}) failed on rank {self.rank} "
                                 f"(mesh coordinate {coord}): {type(e).__name__}: {e}") from e

    def _collective(self, k: int, step: Collective, x: Array | None, traffic: Traffic
                    ) -> Array | None:
        lays = self.program.buffers
        a, b = lays[step.src], lays[step.dst]
        if step.kind == "p2p":
            return self._p2p(step, a, b, x, traffic, step.adjoint)
        assert step.mesh_dim is not None
        m = step.mesh_dim
        coord = self._coords[a.mesh].get(self.rank)
        if coord is None or x is None:
            return None
        rt = step.reduce_type or "sum"
        if step.kind == "slice":
            return np.array(x[local_part(b.box(coord), a.box(coord), step.edge)])
        if step.kind == "zero_partial":
            if coord[m] == 0 or rt not in ("sum", "product"):
                return np.array(x, copy=True)
            return np.zeros_like(x) if rt == "sum" else np.ones_like(x)
        group = self._groups[(a.mesh, m)]
        if step.kind == "all_reduce":
            return self._all_reduce(k, step, group, a.mesh.shape[m], x, rt, traffic)
        if step.kind == "reduce_scatter":
            return _reduce_scatter(step, group, b, coord, x, rt, traffic)
        return _group_exchange(step, group, a, b, coord, x, traffic)

    def _all_reduce(self, k: int, step: Collective, group: Any, n: int, x: Array, rt: str,
                    traffic: Traffic) -> Array:
        if rt == "sum" and x.dtype.kind == "b":
            # numpy adds bools as a logical or (a lookup from a split bool table's pieces:
            # the owner's rows and False), which the sum primitive cannot send
            rt = "any"
        if rt == "sum":
            layer = self._sum[k]
            before = layer.bytes_sent
            # a copy: the layer reuses its buffer (and ascontiguousarray makes a 0-d x 1-d)
            out = np.array(layer(np.ascontiguousarray(x)), copy=True).reshape(x.shape)
            traffic.add(step, layer.bytes_sent - before, 2 * (n - 1), x.itemsize)
            return out
        traffic.add(step, 2 * (n - 1) * x.nbytes // n, 2 * (n - 1), x.itemsize)
        return reduce_ops.allreduce(group, x, rt).reshape(x.shape)

    def _p2p(self, step: Collective, a: Layout, b: Layout, x: Array | None,
             traffic: Traffic, adjoint: bool = False) -> Array | None:
        from spmdrules.runtime.box_exchange import BoxExchange

        # every rank takes part in agreeing on the dtype (a collective on the whole job)
        dtype = self._dtype_of(step, x)
        if adjoint:
            return self._p2p_adjoint(step, a, b, x, traffic, dtype)
        ca, cb = self._coords[a.mesh], self._coords[b.mesh]
        mine_src, mine_dst = ca.get(self.rank), cb.get(self.rank)
        if counterpart_transfer(a, b):
            # counterparts: the process at each coordinate sends its block to the same coordinate
            by_coord_dst = {c: p for p, c in cb.items()}
            by_coord_src = {c: p for p, c in ca.items()}
            reqs = []
            out = None
            if mine_dst is not None:
                out = np.empty(b.local_shape(mine_dst), dtype=dtype)
                peer = by_coord_src[mine_dst]
                if peer == self.rank:
                    assert x is not None
                    out[...] = x
                else:
                    reqs.append(self.comm.Irecv(out, source=peer, tag=4401))
            if mine_src is not None and x is not None:
                peer = by_coord_dst[mine_src]
                if peer != self.rank:
                    reqs.append(self.comm.Isend(np.ascontiguousarray(x), dest=peer, tag=4401))
                    traffic.add(step, x.nbytes, 1, x.itemsize)
            self.MPI.Request.Waitall(reqs)
            return out
        owned, needed = self._by_rank(owners(a, ca, a.broadcast_mesh_dims), b, cb)
        ex = BoxExchange(self.comm, self.rank, dtype, owned, needed)
        out = np.empty(b.local_shape(mine_dst), dtype=dtype) if mine_dst is not None else None
        src = x if owned[self.rank] is not None and x is not None else np.empty(0, dtype)
        ex.gather(src, out if out is not None else np.empty(0, dtype))
        traffic.add(step, ex.bytes_gather, len(ex.sends), dtype.itemsize)
        return out

    def _p2p_adjoint(self, step: Collective, a: Layout, b: Layout, x: Array | None,
                     traffic: Traffic, dtype: np.dtype[Any]) -> Array | None:
        """The adjoint of a layout-changing transfer (see ``executor_sim``): the box exchange's
        ``scatter_add`` returns each received piece to its owner, which adds them up."""
        from spmdrules.runtime.box_exchange import BoxExchange

        ca, cb = self._coords[a.mesh], self._coords[b.mesh]
        owned, needed = self._by_rank(owners(b, cb, (m for m, _ in b.pending)), a, ca)
        ex = BoxExchange(self.comm, self.rank, dtype, owned, needed)
        mine = cb.get(self.rank)
        out = np.zeros(b.local_shape(mine), dtype=dtype) if mine is not None else None
        grad = x if x is not None and needed[self.rank] is not None else np.empty(0, dtype)
        ex.scatter_add(grad, out if out is not None and owned[self.rank] is not None
                       else np.empty(0, dtype))
        traffic.add(step, ex.bytes_scatter, len(ex.recvs), dtype.itemsize)
        return out

    def _by_rank(self, owned: Mapping[int, Box], want: Layout, coords: Mapping[int, tuple[int, ...]]
                 ) -> tuple[list[Box | None], list[Box | None]]:
        """Per rank of the job, the box it owns and the box of ``want`` it needs (None: none)."""
        size = self.comm.Get_size()
        return ([owned.get(p) for p in range(size)],
                [want.box(coords[p]) if p in coords else None for p in range(size)])

    def _dtype_of(self, step: Collective, x: Array | None) -> np.dtype[Any]:
        """The element type moving in a transfer: agreed by every rank (one small allreduce
        would do; the widths the graph declares are not enough when float64 data runs through
        a float32 graph, so ranks agree on the source's actual dtype)."""
        codes: list[int | None] = self.comm.allgather(
            None if x is None else dtype_code(x.dtype, f"transfer {step.src} -> {step.dst}"))
        return dtype_of_code(next(c for c in codes if c is not None))

    # ---- results -----------------------------------------------------------------------------
    def fetch(self, blocks: Mapping[str, Array], names: Sequence[str], root: int = 0
              ) -> dict[str, Array] | None:
        """Gather the global values of ``names`` on ``root`` (None on the other ranks), in the
        user's order (``Program.storage``)."""
        mine = {n: blocks[n] for n in names if n in blocks}
        every = self.comm.gather(mine, root=root)
        if self.rank != root:
            return None
        out: dict[str, Array] = {}
        for n in names:
            lay = self.program.buffers[n]
            by_pid = {p: every[p][n] for p in lay.mesh.process_ids}
            out[n] = self.program.user(n, gather_global(lay, by_pid))
        return out

    def reduce_reports(self, report: RankReport, root: int = 0) -> RankReport | None:
        """Sum the bytes over ranks; the seconds are the slowest rank's."""
        every = self.comm.gather(report, root=root)
        if self.rank != root:
            return None
        total = RankReport()
        for r in every:
            total.traffic.merge(r.traffic)
            for k, v in r.seconds.items():
                total.seconds[k] = max(total.seconds.get(k, 0.0), v)
        return total


def _reduce_scatter(step: Collective, group: Any, b: Layout, coord: tuple[int, ...], x: Array,
                    rt: str, traffic: Traffic) -> Array:
    """The reduce-scatter over mesh dim ``step.mesh_dim`` onto ``b``'s split of its dim."""
    m = step.mesh_dim
    assert m is not None
    n = b.mesh.shape[m]
    d = next(i for i, ms in enumerate(b.split_mesh_dims) if m in ms)
    members = [(*coord[:m], i, *coord[m + 1:]) for i in range(n)]
    sizes = [b.box(c)[d][1] - b.box(c)[d][0] for c in members]
    moved = np.moveaxis(x, d, 0)
    rest = int(np.prod(moved.shape[1:], dtype=np.int64))
    recv = reduce_ops.reduce_scatter(group, moved, [s * rest for s in sizes], rt)
    # the ring: a member sends every piece of its block but its own
    traffic.add(step, x.nbytes - sizes[coord[m]] * rest * x.itemsize, n - 1, x.itemsize)
    return np.ascontiguousarray(
        np.moveaxis(recv.reshape(sizes[coord[m]], *moved.shape[1:]), 0, d))


def _group_exchange(step: Collective, group: Any, a: Layout, b: Layout, coord: tuple[int, ...],
                    x: Array, traffic: Traffic) -> Array:
    """all_gather and all_to_all: Repartition's box exchange inside the group."""
    from spmdrules.runtime.box_exchange import BoxExchange

    m = step.mesh_dim
    assert m is not None
    members = [(*coord[:m], i, *coord[m + 1:]) for i in range(a.mesh.shape[m])]
    owned: list[Box | None] = [a.box(c) for c in members]
    needed: list[Box | None] = [b.box(c) for c in members]
    ex = BoxExchange(group, coord[m], x.dtype, owned, needed)
    out = np.empty(b.local_shape(coord), dtype=x.dtype)
    ex.gather(x, out)
    traffic.add(step, ex.bytes_gather, len(ex.sends), x.itemsize)
    return out


__all__ = [
    "MPI_ENV",
    "MPIExecutor",
    "MPIRun",
    "RankReport",
    "mpiexec_path",
    "run_mpi",
]
