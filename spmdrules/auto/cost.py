"""The cost model of a plan: step time and per-rank memory.

Time is a training step's, compute plus communication, with no overlap assumed:

* **compute**: each op's work divided over the processes its strategy splits it across, at a
  rate measured per process (``calibration.json`` beside this module, written by
  ``python bench/auto.py --calibrate --write``). An op with a contraction (a split the rule
  answers with a plain pending sum on two operands: matmul's ``k``) does ``2 x (result
  elements) x (contracted and unsplittable extents of the operand)`` flops at the matmul
  rate; so does an op whose rule keeps a weight's reduced dims whole (a convolution's
  ``C_in / groups x k_h x k_w``: ``_kept_reduction``); any other op touches its operands' and
  results' elements at the elementwise rate. The reverse pass does twice the forward's work
  (``TRAINING_FACTOR``).
* **communication**: each reshard's plan (the planner's calibrated alpha-beta cost), and in the
  reverse pass the plan back to its source's settled layout; and, for an operand an op reads
  whole on a mesh dim that divides its work (a replicated weight under data parallelism, the
  input of a column-parallel linear), the all-reduce of that operand's gradient over the dim.

Memory per rank is ``spmdrules.completion.memory``'s: parameters, activations (every tensor
that is not a parameter, kept for the reverse pass) and reshard buffers, plus a gradient and
``optimizer_states`` copies per parameter.
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from spmdrules.auto.candidates import MEMO_SIZE, probe_shape, signature
from spmdrules.auto.pricing import prices
from spmdrules.completion.cost import DEFAULT_COST_MODEL, CostModel
from spmdrules.completion.memory import Completed, Memory, local_bytes, memory
from spmdrules.completion.reshard_plans import ReshardError, plan_reshard
from spmdrules.core.attr import DistAttr
from spmdrules.core.errors import SpmdError
from spmdrules.graph.halo_windows import HALO_OPS, Exchange, exchange
from spmdrules.graph.nodes import Op, Tensor
from spmdrules.graph.shapes.shape_rule import DTYPE_BYTES

#: forward plus a reverse pass of twice the forward's work
TRAINING_FACTOR: Final = 3.0
CALIBRATION_FILE: Final = Path(__file__).with_name("calibration.json")


class ComputeCalibrationError(SpmdError, ValueError):
    """The compute calibration file is missing or malformed."""


@dataclass(frozen=True, slots=True)
class ComputeRate:
    """Per process: ``matmul`` flops per second, ``elementwise`` elements per second."""

    matmul: float
    elementwise: float
    machine: str = ""
    date: str = ""

    @classmethod
    def load(cls, path: Path = CALIBRATION_FILE) -> ComputeRate:
        try:
            data: Any = json.loads(path.read_text())
            rate = cls(float(data["matmul_flops_per_s"]), float(data["elementwise_per_s"]),
                       str(data["machine"]), str(data["date"]))
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise ComputeCalibrationError(
                f"cannot read the compute calibration {path}: {e!r}; rerun "
                "`python bench/auto.py --calibrate --write`") from e
        if not (rate.matmul > 0 and rate.elementwise > 0):
            raise ComputeCalibrationError(f"compute calibration {path}: rates must be > 0")
        return rate


@dataclass(frozen=True, slots=True)
class Options:
    """What a step holds and how it is priced: a gradient per parameter (``gradients``),
    ``optimizer_states`` more copies (Adam: 2), the reverse pass (``training``)."""

    gradients: bool = True
    optimizer_states: int = 2
    training: bool = True
    cost: CostModel = DEFAULT_COST_MODEL
    rate: ComputeRate = field(default_factory=ComputeRate.load)

    @property
    def param_copies(self) -> int:
        """How many parameter-sized buffers a parameter costs (itself, its gradient, state)."""
        return 1 + int(self.gradients) + self.optimizer_states


@dataclass(frozen=True, slots=True)
class Work:
    """An op's forward work: flops at the matmul rate, or elements at the elementwise rate."""

    amount: float
    contraction: bool

    def seconds(self, rate: ComputeRate) -> float:
        return self.amount / (rate.matmul if self.contraction else rate.elementwise)


@dataclass(frozen=True, slots=True)
class _BySignature:
    """An op keyed by its signature (``candidates.signature``) for ``functools.lru_cache``:
    ops of a repeated layer share one entry; the op rides along uncompared."""

    key: tuple[Any, ...]
    op: Op = field(compare=False, hash=False)


def work(op: Op) -> Work:
    """The op's forward work (memoised per signature: a model repeats its layers)."""
    return _work(_BySignature(signature(op), op))


@functools.lru_cache(maxsize=MEMO_SIZE)
def _work(keyed: _BySignature) -> Work:
    op = keyed.op
    shape = probe_shape(op)
    out_numel = max((t.numel for t in op.outputs), default=0)
    best = 0
    for t, con, whole in zip(op.inputs, shape.contracted, shape.whole, strict=True):
        if con:
            best = max(best, math.prod(t.shape[d] for d in (*con, *whole)))
    if not best:
        best = _kept_reduction(op, shape.whole)
    if best:
        return Work(2.0 * out_numel * best, True)
    return Work(float(sum(t.numel for t in (*op.inputs, *op.outputs))), False)


def _kept_reduction(op: Op, whole: tuple[tuple[int, ...], ...]) -> int:
    """The extent of a reduction the rule keeps whole (no pending sum to see): a parameter
    operand the rule splits along some dim but keeps its other dims whole, as a convolution's
    weight ``[C_out, C_in / groups, k_h, k_w]``: each result element sums over those dims
    (strides and padding show in the result's size). 0 where there is none (a norm's scale is
    whole on every dim; an activation's kept dims, a softmax's axis, are no weight)."""
    best = 0
    for t, w in zip(op.inputs, whole, strict=True):
        if t.role == "param" and w and len(w) < len(t.shape):
            best = max(best, math.prod(t.shape[d] for d in w))
    return best


def compute_time(op: Op, split: int, opts: Options) -> float:
    """Seconds of the op's work on one process when ``split`` processes share it."""
    factor = TRAINING_FACTOR if opts.training else 1.0
    return factor * work(op).seconds(opts.rate) / split


def _allreduce_time(attr: DistAttr, m: int, shape: tuple[int, ...], dtype: str,
                    cost: CostModel) -> float:
    pending = DistAttr._make(attr.mesh, attr.multi_dims_mapping,
                             tuple(sorted((*attr.partial_items, (m, "sum")))))
    return prices(cost).time(pending, attr, shape, dtype)


def gradient_sync_time(op: Op, ins: tuple[DistAttr, ...], work_dims: frozenset[int],
                       opts: Options) -> float:
    """The reverse pass's all-reduces of the gradients of the operands ``op`` reads whole on a
    mesh dim that divides its work (each process holds a partial sum of such a gradient)."""
    if not opts.training:
        return 0.0
    total = 0.0
    for t, a in zip(op.inputs, ins, strict=True):
        if not t.dtype.startswith(("float", "bfloat", "complex")):
            continue  # no gradient flows to integer operands (ids, indices)
        used = a.sharded_mesh_dims | a.partial_dims
        for m in sorted(work_dims - used):
            total += _allreduce_time(a, m, t.shape, t.dtype, opts.cost)
    return total


def _slots(op: Op, flat: Sequence[Any]) -> tuple[list[Any], list[Any]]:
    """``flat`` (one entry per tensor of ``op.inputs``) and the operands' shapes regrouped per
    operand slot as the lowering hands them to a kernel: None for an absent operand, a tuple
    for an operand list."""
    shapes: list[Any] = []
    attrs: list[Any] = []
    k = 0
    for v in op.operands:
        if v is None:
            shapes.append(None)
            attrs.append(None)
        elif isinstance(v, Tensor):
            shapes.append(v.shape)
            attrs.append(flat[k])
            k += 1
        else:
            shapes.append(tuple(t.shape for t in v))
            attrs.append(tuple(flat[k:k + len(v)]))
            k += len(v)
    return shapes, attrs


def halo_exchange(op: Op, ins: tuple[DistAttr, ...], outs: tuple[DistAttr, ...]
                  ) -> Exchange | None:
    """The halo exchange the lowering gives ``op`` run with these layouts (its operands as it
    reads them, its results as it makes them), or None where it needs none."""
    if not op.outputs or op.type not in HALO_OPS:
        return None
    return _exchange(_BySignature((signature(op), ins, outs[0]), op), ins, outs[0])


@functools.lru_cache(maxsize=MEMO_SIZE)
def _exchange(keyed: _BySignature, ins: tuple[DistAttr, ...], out: DistAttr) -> Exchange | None:
    op = keyed.op
    shapes, attrs = _slots(op, ins)
    return exchange(op.type, op.attr_dict, shapes, attrs, op.outputs[0].shape, out)


def halo_time(op: Op, ins: tuple[DistAttr, ...], outs: tuple[DistAttr, ...],
              opts: Options) -> float:
    """Seconds of the op's halo exchange: one round carrying what the busiest process
    receives, on the link of the mesh dim it runs over (the default link over several), as the
    planner prices a box exchange; in training the reverse pass returns the same pieces."""
    ex = halo_exchange(op, ins, outs)
    if ex is None:
        return 0.0
    nbytes = ex.most * DTYPE_BYTES[op.inputs[0].dtype]
    link = ex.mesh_dims[0] if len(ex.mesh_dims) == 1 else None
    once = opts.cost.step_time(outs[0].mesh, link, 1, nbytes)
    return 2.0 * once if opts.training else once


def edge_time(src: DistAttr, dst: DistAttr, t: Tensor, opts: Options) -> float:
    """The reshard's forward plan, and in training the reverse pass's plan back."""
    if src == dst:
        return 0.0
    price = prices(opts.cost).time
    fwd = price(src, dst, t.shape, t.dtype)
    if not opts.training or math.isinf(fwd):
        return fwd
    return fwd + price(dst.without_partial(), src.without_partial(), t.shape, t.dtype)


def _completed_edge_time(src: DistAttr, dst: DistAttr, t: Tensor, opts: Options) -> float:
    """A reshard completion made: ``edge_time``, or where the solver's graph of even splits
    does not reach (a hand plan's uneven split, 4 experts over 8 processes) the planner's own
    plans, which completion runs."""
    fast = edge_time(src, dst, t, opts)
    if not math.isinf(fast):
        return fast
    try:
        fwd = plan_reshard(src, dst, t.shape, t.dtype, opts.cost).time
        back = plan_reshard(dst.without_partial(), src.without_partial(), t.shape, t.dtype,
                            opts.cost).time if opts.training else 0.0
    except ReshardError:
        return math.inf
    return fwd + back


@dataclass(frozen=True, slots=True)
class Estimate:
    """A plan's predicted step: seconds of compute and of communication, and memory per rank
    (``memory_bytes`` with gradients and optimizer state)."""

    compute: float
    communication: float
    memory: Memory
    memory_bytes: int

    @property
    def time(self) -> float:
        return self.compute + self.communication


def _op_layouts(result: Completed
                ) -> Iterator[tuple[Op, tuple[DistAttr, ...], tuple[DistAttr, ...]]]:
    """Each op of a completed graph with the layouts it reads its operands in (after their
    reshards) and makes its results in (before theirs)."""
    g = result.graph
    need: dict[tuple[str, int], DistAttr] = {}
    made: dict[str, DistAttr] = {}
    for e in result.reshards:
        if e.side == "operand":
            for name, slot in e.consumers:
                need[(name, slot)] = e.dst
        else:
            made[e.tensor] = e.src
    for op in g.ops:
        yield (op, tuple(need.get((op.name, k), result.attr(t)) for k, t in enumerate(op.inputs)),
               tuple(made.get(t.name, result.attr(t)) for t in op.outputs))


def estimate(result: Completed, opts: Options) -> Estimate:
    """The cost of a completed graph as it will run (annotated by hand or by ``auto.plan``)."""
    g = result.graph
    comm = sum(_completed_edge_time(e.src, e.dst, g.tensor(e.tensor), opts)
               for e in result.reshards)
    compute = 0.0
    for op, ins, outs in _op_layouts(result):
        dims: set[int] = set()
        for a in outs:
            dims |= a.sharded_mesh_dims | a.partial_dims
        mesh = outs[0].mesh if outs else None
        split = math.prod(mesh.shape[m] for m in dims) if mesh is not None else 1
        compute += compute_time(op, split, opts)
        comm += gradient_sync_time(op, ins, frozenset(dims), opts) + halo_time(op, ins, outs, opts)
    mem = memory(result)
    return Estimate(compute, comm, mem, mem.training(opts.gradients, opts.optimizer_states))


def halo_bytes(result: Completed) -> dict[str, int]:
    """The bytes each op's forward halo exchange moves, summed over the processes, by op name
    (the reverse pass returns as many): what ``estimate`` prices."""
    out: dict[str, int] = {}
    for op, ins, outs in _op_layouts(result):
        ex = halo_exchange(op, ins, outs)
        if ex is not None:
            out[op.name] = ex.total * DTYPE_BYTES[op.inputs[0].dtype]
    return out


def param_bytes(attr: DistAttr, t: Tensor, opts: Options) -> int:
    """A parameter's bytes per rank with its gradient and optimizer state."""
    return local_bytes(attr, t.shape, t.dtype) * opts.param_copies
