"""The in-process simulated mesh: every process of a program in one Python process.

Blocks live in dicts keyed by process id; a message is a numpy copy from one process's block into
another's, counted in bytes as it is made. Collectives run the algorithms the plans' byte counts
assume, message by message:

- all-reduce is a ring: a reduce-scatter then an all-gather over n chunks, 2(n-1) rounds, each
  process sending one chunk per round; each chunk is combined by the reduce type's numpy ufunc
  over the group's members in order, as the MPI executor combines (avg sums, then divides by
  n; see :mod:`spmdrules.runtime.reduce_ops`);
- reduce-scatter is the first half of that ring, with member i's piece of the scattered dim as
  chunk i;
- all-gather, all-to-all and transfers between meshes are box exchanges (the data movement of
  the runtime's Repartition): a process receives the intersection of its destination box with
  every other group member's source box;
- slices and zero-partials are local.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

from spmdrules.core.errors import SpmdError
from spmdrules.core.shards import scatter
from spmdrules.execution import halo
from spmdrules.execution.executor import (
    ExecutionError,
    Traffic,
    call_kernel,
    gather_global,
    local_part,
    stored_feeds,
)
from spmdrules.execution.local import LocalValue
from spmdrules.execution.program import (
    Collective,
    HaloStep,
    KernelCall,
    Layout,
    LocalStep,
    Program,
    counterpart_transfer,
    groups,
    mesh_coords,
    owners,
)
from spmdrules.runtime.decomposition import Box, box_shape, box_volume, intersect, relative
from spmdrules.runtime.reduce_ops import COMBINE, reduce_in_order

Array = NDArray[Any]
Blocks = dict[int, Array]



@dataclass(slots=True)
class SimResult:
    """Every buffer's blocks after a simulated run, and the bytes each step sent."""

    program: Program
    blocks: dict[str, Blocks]
    traffic: Traffic
    #: seconds per instruction kind ("kernel", "collective", "local")
    seconds: dict[str, float] = field(default_factory=dict)

    def fetch(self, name: str) -> Array:
        """The global value of buffer (or tensor) ``name``, gathered and reduced, in the user's
        order (``Program.storage``)."""
        if name not in self.blocks:
            raise ExecutionError(f"no buffer {name!r} in program {self.program.name!r}")
        return self.program.user(name, gather_global(self.program.buffers[name],
                                                     self.blocks[name]))

    def fetch_all(self, names: Sequence[str] | None = None) -> dict[str, Array]:
        return {n: self.fetch(n) for n in (names if names is not None else self.program.tensors)}


# ---- collectives ------------------------------------------------------------------------------
def _ring_reduce_scatter(arrays: list[Array], chunks: Sequence[tuple[slice, ...]], rt: str,
                         shift: int) -> tuple[int, int]:
    """In place: after n-1 rounds member i holds the reduction of chunk (i + shift) % n.

    Round s: member r sends chunk (r - s - 1 + shift) % n to member r + 1. A chunk's chain of
    combines wraps around the ring, but numpy's max and min are not commutative (which of -0.0
    and 0.0 a tie keeps), so each chunk is reduced over the members in group order, as MPI
    applies its ops (:mod:`spmdrules.runtime.reduce_ops`). Returns (bytes, messages)."""
    n = len(arrays)
    sent = msgs = 0
    for s in range(n - 1):
        for r in range(n):
            sent += arrays[r][chunks[(r - s - 1 + shift) % n]].nbytes
            msgs += 1
    mine = [chunks[(i + shift) % n] for i in range(n)]
    reduced = [reduce_in_order([a[c] for a in arrays], rt) for c in mine]
    for a, c, out in zip(arrays, mine, reduced, strict=True):
        a[c] = out
    return sent, msgs


def _ring_all_gather(arrays: list[Array], chunks: Sequence[tuple[slice, ...]],
                     shift: int) -> tuple[int, int]:
    """In place: member i starts with chunk (i + shift) % n and ends with every chunk."""
    n = len(arrays)
    sent = msgs = 0
    for s in range(n - 1):
        outgoing = [(r, (r - s + shift) % n) for r in range(n)]
        data = [arrays[r][chunks[c]].copy() for r, c in outgoing]
        for (r, c), d in zip(outgoing, data, strict=True):
            arrays[(r + 1) % n][chunks[c]] = d
            sent += d.nbytes
            msgs += 1
    return sent, msgs


def _flat_chunks(size: int, n: int) -> list[tuple[slice, ...]]:
    q, r = divmod(size, n)
    out: list[tuple[slice, ...]] = []
    for i in range(n):
        lo = q * i + min(i, r)
        out.append((slice(lo, lo + q + (1 if i < r else 0)),))
    return out


def all_reduce(blocks: Sequence[Array], rt: str) -> tuple[list[Array], int, int]:
    """Ring all-reduce of one group's blocks: (results, bytes sent, messages)."""
    n = len(blocks)
    work = [np.array(b, copy=True).reshape(-1) for b in blocks]
    if n == 1:
        return [work[0].reshape(np.shape(blocks[0]))], 0, 0
    chunks = _flat_chunks(work[0].size, n)
    b1, m1 = _ring_reduce_scatter(work, chunks, rt, shift=1)
    b2, m2 = _ring_all_gather(work, chunks, shift=1)
    return [w.reshape(np.shape(blocks[0])) for w in work], b1 + b2, m1 + m2


def reduce_scatter(blocks: Sequence[Array], rt: str, pieces: Sequence[tuple[slice, ...]]
                   ) -> tuple[list[Array], int, int]:
    """Ring reduce-scatter: member i ends with the reduction of ``pieces[i]`` of the blocks."""
    n = len(blocks)
    work = [np.array(b, copy=True) for b in blocks]
    sent, msgs = _ring_reduce_scatter(work, pieces, rt, shift=0) if n > 1 else (0, 0)
    return [np.array(w[pieces[i]]) for i, w in enumerate(work)], sent, msgs


def box_exchange(owned: Mapping[int, tuple[Box, Array]], needed: Mapping[int, Box],
                 dtype: Any, where: str) -> tuple[dict[int, Array], int, int]:
    """Each needer's box assembled from the owners' pieces; bytes of pieces between processes."""
    out: dict[int, Array] = {}
    sent = msgs = 0
    for p, want in needed.items():
        arr = np.empty(tuple(hi - lo for lo, hi in want), dtype=dtype)
        filled = 0
        for q, (have, block) in owned.items():
            inter = intersect(have, want)
            if inter is None:
                continue
            arr[relative(inter, want)] = block[relative(inter, have)]
            filled += box_volume(inter)
            if q != p:
                sent += box_volume(inter) * arr.itemsize
                msgs += 1
        if filled != box_volume(want):
            raise ExecutionError(f"{where}: process {p} needs box {want} but its group owns only "
                                 f"{filled} of its {box_volume(want)} entries")
        out[p] = arr
    return out, sent, msgs


def _identity(rt: str, like: Array) -> Array:
    if rt in ("sum",):
        return np.zeros_like(like)
    if rt == "product":
        return np.ones_like(like)
    return np.array(like, copy=True)  # avg, max, min, any, all: every replica keeps the value


def _itemsize(blocks: Blocks) -> int:
    return next(iter(blocks.values())).itemsize if blocks else 0


class SimulatedMesh:
    """Runs a :class:`Program` with every process in this Python process."""

    def __init__(self, program: Program) -> None:
        self.program = program
        self._coords = {mesh: mesh_coords(mesh) for mesh in
                        {lay.mesh for lay in program.buffers.values()}}

    def coords(self, lay: Layout) -> dict[int, tuple[int, ...]]:
        return self._coords[lay.mesh]

    def run(self, feeds: Mapping[str, Any], rng: np.random.Generator | None = None) -> SimResult:
        """Scatter the feeds by their layouts and run every instruction."""
        import time

        prog = self.program
        feeds = stored_feeds(prog, feeds)
        rng = rng if rng is not None else np.random.default_rng(0)
        blocks: dict[str, Blocks] = {}
        for name in prog.feeds:
            lay = prog.buffers[name]
            by_coord = scatter(np.asarray(feeds[name]), lay.attr, rng)
            blocks[name] = {pid: by_coord[c] for pid, c in self.coords(lay).items()}
        traffic = Traffic()
        seconds = {"kernel": 0.0, "collective": 0.0, "local": 0.0}
        for ins in prog.instructions:
            t0 = time.perf_counter()
            if isinstance(ins, KernelCall):
                self._kernel(ins, blocks)
                seconds["kernel"] += time.perf_counter() - t0
            elif isinstance(ins, LocalStep):
                self._local(ins, blocks)
                seconds["local"] += time.perf_counter() - t0
            elif isinstance(ins, HaloStep):
                blocks[ins.dst] = self._halo(ins, blocks[ins.src], traffic)
                seconds["collective"] += time.perf_counter() - t0
            else:
                blocks[ins.dst] = self._collective(ins, blocks[ins.src], traffic)
                seconds["collective"] += time.perf_counter() - t0
        return SimResult(prog, blocks, traffic, seconds)

    # ---- instructions ------------------------------------------------------------------------
    def _kernel(self, call: KernelCall, blocks: dict[str, Blocks]) -> None:
        layouts = self.program.buffers
        for pid, coord in self._coords[call.mesh].items():
            args: list[LocalValue] = []
            for slot in call.inputs:
                if slot is None:
                    args.append(None)
                elif isinstance(slot, str):
                    args.append(blocks[slot][pid])
                else:
                    args.append([None if n is None else blocks[n][pid] for n in slot])
            try:
                named = call_kernel(call, coord, args, layouts)
            except SpmdError:
                raise
            except Exception as e:  # a kernel bug: say which op and where
                raise ExecutionError(f"op {call.op!r} ({call.op_type}) failed at mesh coordinate "
                                     f"{coord}: {type(e).__name__}: {e}") from e
            for n, arr in named.items():
                blocks.setdefault(n, {})[pid] = arr

    def _halo(self, step: HaloStep, src: Blocks, traffic: Traffic) -> Blocks:
        """Forward: each process's needed box from its group's blocks. Adjoint: each slab's
        cotangent added into the blocks of its group's owners."""
        lays = self.program.buffers
        slab_name, own_name = (step.src, step.dst) if step.adjoint else (step.dst, step.src)
        slab, lay = lays[slab_name], lays[own_name]
        coords = self._coords[step.mesh]
        own = {p: lay.box(c) for p, c in coords.items()}
        need = {p: slab.box(c) for p, c in coords.items()}
        grp = halo.groups_of(coords, step.mesh_dims)
        dtype = next(iter(src.values())).dtype
        out: Blocks = {}
        sent = msgs = 0
        if not step.adjoint:
            for p in coords:
                arr = np.empty(box_shape(need[p]), dtype=dtype)
                for q in grp[p]:
                    inter = intersect(own[q], need[p])
                    if inter is None:
                        continue
                    arr[relative(inter, need[p])] = src[q][relative(inter, own[q])]
                    if q != p:
                        sent += box_volume(inter) * arr.itemsize
                        msgs += 1
                out[p] = arr
        else:
            out = {p: np.zeros(box_shape(own[p]), dtype=dtype) for p in coords}
            for p in coords:
                for q in grp[p]:
                    inter = intersect(own[p], need[q])
                    if inter is None:
                        continue
                    out[p][relative(inter, own[p])] += src[q][relative(inter, need[q])]
                    if q != p:
                        sent += box_volume(inter) * out[p].itemsize
                        msgs += 1
        traffic.add_halo(step.edge, sent, msgs)
        return out

    def _local(self, step: LocalStep, blocks: dict[str, Blocks]) -> None:
        for pid, coord in self._coords[step.mesh].items():
            outs = step.fn(coord, [blocks[n][pid] for n in step.inputs])
            for n, arr in zip(step.outputs, outs, strict=True):
                blocks.setdefault(n, {})[pid] = np.asarray(arr)

    def _collective(self, step: Collective, src: Blocks, traffic: Traffic) -> Blocks:
        lays = self.program.buffers
        a, b = lays[step.src], lays[step.dst]
        kind, m = step.kind, step.mesh_dim
        out: Blocks = {}
        if kind == "p2p":
            out, sent, msgs = (self._p2p_adjoint(a, b, src) if step.adjoint
                               else self._p2p(step, a, b, src))
            traffic.add(step, sent, msgs, _itemsize(src))
            return out
        assert m is not None
        ca, cb = self.coords(a), self.coords(b)
        if kind == "slice":
            return {p: np.array(src[p][local_part(b.box(cb[p]), a.box(ca[p]), step.edge)])
                    for p in src}
        if kind == "zero_partial":
            rt = step.reduce_type or "sum"
            return {p: (np.array(src[p], copy=True) if ca[p][m] == 0 else _identity(rt, src[p]))
                    for p in src}
        for group in groups(a.mesh, m):
            res, sent, msgs = _group_collective(step, a, b, ca, cb, [src[p] for p in group],
                                                group)
            out.update(zip(group, res, strict=True))
            traffic.add(step, sent, msgs, _itemsize(src))
        return out

    def _p2p(self, step: Collective, a: Layout, b: Layout, src: Blocks
             ) -> tuple[Blocks, int, int]:
        ca, cb = self.coords(a), self.coords(b)
        if counterpart_transfer(a, b):
            # counterparts: the process at each coordinate sends its block to the same coordinate
            by_coord = {c: p for p, c in ca.items()}
            out: Blocks = {}
            sent = msgs = 0
            for q, c in cb.items():
                p = by_coord[c]
                out[q] = np.array(src[p], copy=True)
                if p != q:
                    sent += out[q].nbytes
                    msgs += 1
            return out, sent, msgs
        # One owner per piece: the process at coordinate 0 of every mesh dim that replicates.
        owned = {p: (box, src[p]) for p, box in owners(a, ca, a.broadcast_mesh_dims).items()}
        needed = {q: b.box(c) for q, c in cb.items()}
        dtype = next(iter(src.values())).dtype
        return box_exchange(owned, needed, dtype, f"p2p of {step.edge}")


    def _p2p_adjoint(self, a: Layout, b: Layout, src: Blocks) -> tuple[Blocks, int, int]:
        """The adjoint of a layout-changing transfer, from the cotangent ``a`` of its
        destination to the cotangent ``b`` of its source: each process returns the pieces it
        received to their owners (coordinate 0 of every mesh dim ``b`` sums over, where the
        source replicated), which add them up; the other source processes hold zeros."""
        ca, cb = self.coords(a), self.coords(b)
        out: Blocks = {p: np.zeros(b.local_shape(c), dtype=next(iter(src.values())).dtype)
                       for p, c in cb.items()}
        sent = msgs = 0
        for p, have in owners(b, cb, (m for m, _ in b.pending)).items():
            for q, cq in ca.items():
                want = a.box(cq)
                inter = intersect(have, want)
                if inter is None:
                    continue
                out[p][relative(inter, have)] += src[q][relative(inter, want)]
                if p != q:
                    sent += box_volume(inter) * out[p].itemsize
                    msgs += 1
        return out, sent, msgs


def run_simulated(program: Program, feeds: Mapping[str, Any],
                  rng: np.random.Generator | None = None) -> SimResult:
    """Run ``program`` on the simulated mesh (a shortcut for ``SimulatedMesh(program).run``)."""
    return SimulatedMesh(program).run(feeds, rng)


def _group_collective(step: Collective, a: Layout, b: Layout, ca: Mapping[int, tuple[int, ...]],
                      cb: Mapping[int, tuple[int, ...]], xs: list[Array], group: Sequence[int]
                      ) -> tuple[list[Array], int, int]:
    """One group's share of an all-reduce, reduce-scatter, all-gather or all-to-all: each
    member's result, the bytes sent and the messages."""
    rt = step.reduce_type or "sum"
    if step.kind == "all_reduce":
        return all_reduce(xs, rt)
    if step.kind == "reduce_scatter":
        pieces = [local_part(b.box(cb[p]), a.box(ca[p]), step.edge) for p in group]
        return reduce_scatter(xs, rt, pieces)
    owned = {p: (a.box(ca[p]), x) for p, x in zip(group, xs, strict=True)}
    needed = {p: b.box(cb[p]) for p in group}
    got, sent, msgs = box_exchange(owned, needed, xs[0].dtype, f"{step.kind} of {step.edge}")
    return [got[p] for p in group], sent, msgs


__all__ = [
    "COMBINE",
    "SimResult",
    "SimulatedMesh",
    "all_reduce",
    "box_exchange",
    "reduce_scatter",
    "run_simulated",
]
