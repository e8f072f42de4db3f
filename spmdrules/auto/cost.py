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

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from spmdrules.auto.candidates import probe_shape, signature
from spmdrules.auto.pricing import prices
from spmdrules.completion.cost import DEFAULT_COST_MODEL, CostModel
from spmdrules.completion.memory import Completed, Memory, local_bytes, memory
from spmdrules.completion.reshard_plans import ReshardError, plan_reshard
from spmdrules.core.attr import DistAttr
from spmdrules.core.errors import SpmdError
from spmdrules.graph.nodes import Op, Tensor

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


_WORK: dict[tuple[Any, ...], Work] = {}


def work(op: Op) -> Work:
    """The op's forward work (cached per signature: a model repeats its layers)."""
    key = signature(op)
    hit = _WORK.get(key)
    if hit is not None:
        return hit
    shape = probe_shape(op)
    out_numel = max((t.numel for t in op.outputs), default=0)
    best = 0
    for t, con, whole in zip(op.inputs, shape.contracted, shape.whole, strict=True):
        if con:
            best = max(best, math.prod(t.shape[d] for d in (*con, *whole)))
    if not best:
        best = _kept_reduction(op, shape.whole)
    if best:
        w = Work(2.0 * out_numel * best, True)
    else:
        w = Work(float(sum(t.numel for t in (*op.inputs, *op.outputs))), False)
    _WORK[key] = w
    return w


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


def estimate(result: Completed, opts: Options) -> Estimate:
    """The cost of a completed graph as it will run (annotated by hand or by ``auto.plan``)."""
    g = result.graph
    need: dict[tuple[str, int], DistAttr] = {}
    made: dict[str, DistAttr] = {}
    comm = 0.0
    for e in result.reshards:
        t = g.tensor(e.tensor)
        if e.side == "operand":
            for name, slot in e.consumers:
                need[(name, slot)] = e.dst
        else:
            made[e.tensor] = e.src
        comm += _completed_edge_time(e.src, e.dst, t, opts)
    compute = 0.0
    for op in g.ops:
        ins = tuple(need.get((op.name, k), result.attr(t)) for k, t in enumerate(op.inputs))
        outs = tuple(made.get(t.name, result.attr(t)) for t in op.outputs)
        dims: set[int] = set()
        for a in outs:
            dims |= a.sharded_mesh_dims | a.partial_dims
        mesh = outs[0].mesh if outs else None
        split = math.prod(mesh.shape[m] for m in dims) if mesh is not None else 1
        compute += compute_time(op, split, opts)
        comm += gradient_sync_time(op, ins, frozenset(dims), opts)
    mem = memory(result)
    return Estimate(compute, comm, mem, mem.training(opts.gradients, opts.optimizer_states))


def param_bytes(attr: DistAttr, t: Tensor, opts: Options) -> int:
    """A parameter's bytes per rank with its gradient and optimizer state."""
    return local_bytes(attr, t.shape, t.dtype) * opts.param_copies
