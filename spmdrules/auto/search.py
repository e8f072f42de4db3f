"""``plan``: the mesh and the annotations of the fastest plan that fits a memory budget.

For each factorisation of the device count into a 1-, 2- or 3-D mesh (or the shapes given),
the solver (``solver``) picks one candidate strategy per op. The choice becomes annotations,
one closed ``Spec`` per tensor whose layout it settles (the sources' layouts and every result
that is not a pending sum), and the annotated graph is completed as any other: the plan's
predicted step is the cost model's estimate of that completion (``cost.estimate``), the same
estimate a hand plan gets, so the two compare like for like. The fastest plan within the
budget wins; the next two are kept as alternatives, with why they lost.
"""

from __future__ import annotations

import itertools
import json
import math
import warnings
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Final

from pydantic import ByteSize, TypeAdapter, ValidationError

from spmdrules.auto import cost as cm
from spmdrules.auto.errors import AutoPlanError, MemoryBudgetError
from spmdrules.auto.quotient import fold
from spmdrules.auto.solver import (
    Choice,
    Infeasible,
    Objective,
    Pruned,
    Unsolved,
    solve,
)
from spmdrules.completion.driver import complete
from spmdrules.completion.reshard_plans import fmt_bytes
from spmdrules.completion.result import DroppedSplitWarning
from spmdrules.core.attr import DistAttr
from spmdrules.core.mesh import ProcessMesh
from spmdrules.graph.graph import Graph
from spmdrules.plan.apply import apply
from spmdrules.plan.file import FORMAT
from spmdrules.plan.styles import Spec, Translated

#: mesh dim names by mesh rank
DIM_NAMES: Final = ("x", "y", "z")
_SIZE: Final = TypeAdapter(ByteSize)


def parse_size(value: str | int | float) -> int:
    """Bytes from ``2GiB``, ``1.5 GB``, ``512MiB`` or a number of bytes."""
    try:
        n = int(_SIZE.validate_python(value))
    except ValidationError:
        raise AutoPlanError(f"memory budget {value!r} is not a size; give bytes or a number "
                            "with a unit, e.g. 2GiB, 512MiB, 1.5GB") from None
    if n <= 0:
        raise AutoPlanError(f"memory budget {value!r} must be more than 0 bytes")
    return n


def mesh_shapes(devices: int) -> list[tuple[int, ...]]:
    """Every factorisation of ``devices`` into 1-, 2- and 3-D meshes of dims >= 2 (in order)."""
    out: list[tuple[int, ...]] = [(devices,)]
    divs = [d for d in range(2, devices) if devices % d == 0]
    out += [(a, devices // a) for a in divs]
    out += [(a, b, devices // (a * b)) for a, b in itertools.product(divs, divs)
            if devices % (a * b) == 0 and devices // (a * b) >= 2]
    return out


def _mesh(shape: tuple[int, ...]) -> ProcessMesh:
    return ProcessMesh.from_shape(shape, dim_names=DIM_NAMES[:len(shape)])


def _spec(a: DistAttr) -> Spec:
    names = a.mesh.dim_names
    dims = tuple(None if not ms else names[ms[0]] if len(ms) == 1 else tuple(names[m] for m in ms)
                 for ms in a.multi_dims_mapping)
    return Spec(dims)


@dataclass(frozen=True)
class Candidate:
    """One mesh's plan: its annotations, the solver's prediction and the completed estimate."""

    mesh: ProcessMesh
    specs: dict[str, Spec]
    estimate: cm.Estimate
    #: the size of the mesh's MILP: variables and constraint rows
    program: tuple[int, int] = (0, 0)
    #: the mesh whose solve this plan was renamed from (its dims permuted), or None
    twin: tuple[int, ...] | None = None

    def fits(self, budget: float) -> bool:
        return self.estimate.memory_bytes <= budget

    def line(self) -> str:
        e = self.estimate
        shape = "x".join(map(str, self.mesh.shape))
        return (f"mesh {shape} {list(self.mesh.dim_names)}: step {e.time * 1e3:.3f} ms "
                f"(compute {e.compute * 1e3:.3f} ms, communication {e.communication * 1e3:.3f} "
                f"ms), memory per rank {fmt_bytes(e.memory_bytes)}")


class AutoPlan(dict[str, Translated]):
    """``{tensor name: style}`` on ``mesh``, as ``plan.apply`` takes it; ``explain`` names each
    annotation ``auto``. ``predicted`` is the chosen plan's estimate; ``alternatives`` the next
    best meshes' plans and ``why_not`` why each lost."""

    mesh: ProcessMesh
    chosen: Candidate
    alternatives: tuple[Candidate, ...]
    why_not: tuple[str, ...]
    budget: int

    @property
    def predicted(self) -> cm.Estimate:
        return self.chosen.estimate

    def apply(self, g: Graph) -> Graph:
        """Annotate ``g`` (the graph planned, or one of the same names) by this plan alone:
        the annotations it carried are dropped, as the search ignored them."""
        for t in g.tensors:
            t.annotation = None
        apply(g, self.mesh, self)
        return g

    def report(self) -> str:
        lines = [f"chosen: {self.chosen.line()}"]
        for alt, why in zip(self.alternatives, self.why_not, strict=True):
            lines.append(f"  alternative: {alt.line()}\n    lost: {why}")
        return "\n".join(lines)

    def to_json(self) -> str:
        """The plan file (``docs/plan.schema.json``) of this plan."""
        m = self.mesh
        entries: dict[str, Any] = {}
        for name, tr in self.items():
            assert isinstance(tr.style, Spec)
            entries[name] = {"style": "Spec", "dims": [
                list(d) if isinstance(d, tuple) else d for d in tr.style.spec]}
        return json.dumps({"format": FORMAT, "mesh": {
            "shape": list(m.shape), "process_ids": list(m.process_ids),
            "dim_names": list(m.dim_names)}, "plan": entries}, indent=1)


def _ambiguous(g: Graph) -> set[str]:
    """Tensor names that as plan keys name more than their tensor: a dotted tail of another
    name, or a module (a dotted head) of one (``loss`` beside ``loss.cross_entropy.loss``)."""
    out: set[str] = set()
    for t in g.tensors:
        parts = t.name.split(".")
        for k in range(1, len(parts)):
            out.add(".".join(parts[k:]))
            out.add(".".join(parts[:k]))
    return out


def _annotations(g: Graph, ch: Choice) -> dict[str, Spec]:
    """The choice as plan entries: each source's layout and each result's that is not a
    pending sum, by tensor name (a name that would name other tensors too is left out, and
    completion infers its tensor)."""
    specs = {name: _spec(a) for name, a in ch.sources.items()}
    for op, s in zip(g.ops, ch.ops, strict=True):
        for t, a in zip(op.outputs, s.outputs, strict=True):
            if not a.partial_items:
                specs[t.name] = _spec(a)
    skip = _ambiguous(g)
    return {n: s for n, s in specs.items() if n not in skip}


def evaluate(g: Graph, mesh: ProcessMesh, styles: dict[str, Any], opts: cm.Options
             ) -> cm.Estimate:
    """The estimate of ``g`` annotated by ``styles`` on ``mesh`` (the graph is left as it was)."""
    saved = [(t, t.annotation, t.attr) for t in g.tensors]
    try:
        for t in g.tensors:
            t.annotation = None
        apply(g, mesh, styles)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DroppedSplitWarning)
            return cm.estimate(complete(g), opts)
    finally:
        for t, ann, attr in saved:
            t.annotation, t.attr = ann, attr


def _why(alt: Candidate, best: Candidate, budget: float) -> str:
    a, b = alt.estimate, best.estimate
    if not alt.fits(budget):
        return (f"needs {fmt_bytes(a.memory_bytes)} per rank, over the budget of "
                f"{fmt_bytes(budget)}")
    parts = []
    if a.compute > b.compute:
        parts.append(f"compute {(a.compute - b.compute) * 1e3:+.3f} ms")
    if a.communication > b.communication:
        parts.append(f"communication {(a.communication - b.communication) * 1e3:+.3f} ms")
    return (f"{(a.time - b.time) * 1e3:.3f} ms slower per step"
            + (f" ({', '.join(parts)})" if parts else ""))


def plan(graph: Graph, devices: int, *, memory_per_rank: str | int | float,
         mesh_shapes: Sequence[Sequence[int]] | None = None, objective: str = "time",
         options: cm.Options | None = None) -> AutoPlan:
    """The fastest plan of ``graph`` on ``devices`` processes within ``memory_per_rank`` bytes
    (``2GiB``, or a number), as an ``AutoPlan``: ``plan.apply(g, p.mesh, p)`` annotates a graph
    by it. ``objective="memory"`` minimises memory instead."""
    if not isinstance(graph, Graph):
        raise AutoPlanError(f"auto.plan: the first argument must be a Graph, got "
                            f"{type(graph).__name__}")
    if isinstance(devices, bool) or not isinstance(devices, int) or devices < 1:
        raise AutoPlanError(f"auto.plan: devices must be a whole number >= 1, got {devices!r}")
    if objective not in ("time", "memory"):
        raise AutoPlanError(f"auto.plan: objective must be 'time' or 'memory', got "
                            f"{objective!r}")
    budget = parse_size(memory_per_rank)
    shapes = _shapes(devices, mesh_shapes)
    opts = options or cm.Options()
    symmetric = not opts.cost.per_dim  # every mesh dim has the same links
    if mesh_shapes is None and symmetric:
        # a mesh and its permutations plan alike: only the sorted one is tried
        shapes = list(dict.fromkeys(tuple(sorted(s)) for s in shapes))
    q = fold(graph)
    found: list[Candidate] = []
    floors: list[float] = []
    solved: dict[tuple[int, ...], Candidate | None] = {}
    cutoff = math.inf  # the solver's best step so far: a mesh whose bound is above is skipped
    for shape in shapes:
        key = tuple(sorted(shape)) if symmetric else shape
        if key in solved:
            twin = solved[key]  # a permutation of a mesh solved: its plan, renamed
            if twin is not None:
                found.append(_from_twin(graph, twin, shape, opts))
            continue
        try:
            ch = solve(graph, _mesh(shape), budget, opts, _objective(objective), q, cutoff)
        except Infeasible as e:
            floors.append(e.floor)
            solved[key] = None
            continue
        except (Pruned, Unsolved):
            solved[key] = None
            continue
        cutoff = min(cutoff, ch.time)
        found.append(c := _candidate(graph, ch.mesh, _annotations(graph, ch), opts,
                                     (ch.variables, ch.constraints)))
        solved[key] = c
    return _choose(found, floors, budget, objective, devices)


def _candidate(g: Graph, mesh: ProcessMesh, specs: dict[str, Spec], opts: cm.Options,
               program: tuple[int, int], twin: tuple[int, ...] | None = None) -> Candidate:
    styles = {n: Translated(s, f"spmdrules.auto on mesh {list(mesh.shape)}")
              for n, s in specs.items()}
    return Candidate(mesh, specs, evaluate(g, mesh, styles, opts), program, twin)


def _from_twin(g: Graph, twin: Candidate, shape: tuple[int, ...], opts: cm.Options
               ) -> Candidate:
    """The plan on ``shape`` of a mesh whose dims are a permutation of ``twin``'s: its choice
    with each mesh dim renamed to the one of equal size (links alike, so it is also optimal
    there), estimated on its own mesh."""
    free = list(range(len(shape)))
    names: dict[str, str] = {}
    for k, n in enumerate(twin.mesh.shape):
        i = next(i for i in free if shape[i] == n)
        free.remove(i)
        names[DIM_NAMES[k]] = DIM_NAMES[i]

    def dim(d: Any) -> Any:
        return None if d is None else names[d] if isinstance(d, str) else tuple(
            names[x] for x in d)

    specs = {n: Spec(tuple(dim(d) for d in s.spec)) for n, s in twin.specs.items()}
    return _candidate(g, _mesh(shape), specs, opts, twin.program, twin.mesh.shape)


def _objective(o: str) -> Objective:
    return "memory" if o == "memory" else "time"


def _shapes(devices: int, given: Iterable[Sequence[int]] | None) -> list[tuple[int, ...]]:
    if given is None:
        return mesh_shapes(devices)
    out = []
    for s in given:
        shape = tuple(s)
        if not shape or not all(isinstance(n, int) and n >= 1 for n in shape) or (
                math.prod(shape) != devices) or len(shape) > len(DIM_NAMES):
            raise AutoPlanError(f"auto.plan: mesh shape {list(shape)} must be 1 to 3 whole "
                                f"numbers whose product is the {devices} devices")
        out.append(shape)
    if not out:
        raise AutoPlanError("auto.plan: mesh_shapes is empty; give at least one shape or None")
    return out


def _choose(found: list[Candidate], floors: list[float], budget: int, objective: str,
            devices: int) -> AutoPlan:
    def key(c: Candidate) -> tuple[bool, float, int]:
        e = c.estimate
        # a tie goes to the simpler mesh
        return (not c.fits(budget), e.time if objective == "time" else e.memory_bytes,
                c.mesh.ndim)

    found.sort(key=key)
    if not found and not floors:
        raise AutoPlanError(
            f"auto.plan: HiGHS found no plan on any mesh of {devices} devices within "
            "its limits per mesh; raise spmdrules.auto.solver.NODE_LIMIT (or "
            "TIME_LIMIT) or give mesh_shapes")
    if not found or not found[0].fits(budget):
        least = min([*floors, *(c.estimate.memory_bytes for c in found)], default=math.inf)
        raise MemoryBudgetError(
            f"auto.plan: no plan of the graph on {devices} devices fits {fmt_bytes(budget)} per "
            f"rank; the leanest needs at least {fmt_bytes(least)}: raise memory_per_rank to "
            "that, use more devices, or keep less optimizer state (Options(optimizer_states=0), "
            "--optimizer-states 0)")
    best = found[0]
    out = AutoPlan({n: Translated(s, f"spmdrules.auto on mesh {list(best.mesh.shape)}")
                    for n, s in best.specs.items()})
    out.mesh = best.mesh
    out.chosen = best
    out.alternatives = tuple(found[1:3])
    out.why_not = tuple(_why(a, best, budget) for a in out.alternatives)
    out.budget = budget
    return out


__all__ = ["AutoPlan", "Candidate", "evaluate", "mesh_shapes", "parse_size", "plan"]
