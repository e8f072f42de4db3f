"""A graph's completed, lowered program run sharded against serial numpy: the check that the
family tests and the end-to-end tests share (forward, reverse by gradient check, and MPI)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from spmdrules.completion import complete
from spmdrules.execution.adjoint import gradient_program
from spmdrules.execution.executor import max_error, run_serial, serial_vjp
from spmdrules.execution.gradcheck import check_gradients
from spmdrules.execution.lowering import lower
from spmdrules.execution.mpi import MPIRun, run_mpi
from spmdrules.execution.program import HaloStep, Program
from spmdrules.execution.simulated import run_simulated
from spmdrules.graph.graph import Graph
from spmdrules.graph.shapes.shape_rule import DTYPE_BYTES


def program_of(g: Graph) -> Program:
    return lower(complete(g))


def serial_cotangents(g: Graph, feeds: Mapping[str, Any], seeds: Mapping[str, Any]
                      ) -> dict[str, Any]:
    """The cotangent of every tensor ``<seeds, outputs>`` depends on, by reverse mode on the
    graph run serially (each op's VJP on whole arrays): the exact reference for a gradient
    program. For a graph that holds no tensor in another order than its user's."""
    return _cotangents(g, run_serial(g, feeds), seeds)


def _cotangents(g: Graph, values: Mapping[str, Any], seeds: Mapping[str, Any]
                ) -> dict[str, Any]:
    cts = {t: np.asarray(s, dtype=np.float64) for t, s in seeds.items()}
    for op in reversed(g.ops):
        if any(t.name in cts for t in op.outputs):
            for name, ct in serial_vjp(op, values, cts).items():
                cts[name] = cts[name] + ct if name in cts else ct
    return cts


@dataclass(frozen=True)
class SerialReference:
    """A graph run serially on its sources: the values of the tensors kept and, for ``seeds``,
    the cotangents of its sources (reverse mode); the same for every plan of the graph, so
    computed once."""

    values: Mapping[str, Any]
    cotangents: Mapping[str, Any]


def serial_reference(g: Graph, sources: Mapping[str, Any], seeds: Mapping[str, Any],
                     keep: Sequence[str] | None = None) -> SerialReference:
    """``keep``: the tensors whose values are kept (default: every one); only the sources'
    cotangents are kept then, the gradients a program returns (a model's intermediates, such
    as an MoE's per-token expert weights, are gigabytes in float64)."""
    values = run_serial(g, sources)
    cts = _cotangents(g, values, seeds)
    if keep is None:
        return SerialReference(values, cts)
    roots = {t.name for t in g.tensors if t.producer is None}
    return SerialReference({t: values[t] for t in keep},
                           {t: c for t, c in cts.items() if t in roots})


def assert_simulated_equals_serial(
    g: Graph, feeds: Mapping[str, Any], *, prog: Program | None = None, loss: str = "loss",
    tol: float = 1e-12, grad_tol: float = 1e-7, what: str = "",
) -> None:
    """Forward: every tensor equals serial and the bytes moved equal the plans'. Reverse: the
    gradients of ``loss`` pass a numerical check."""
    prog = prog if prog is not None else program_of(g)
    res = run_simulated(prog, feeds)
    err, worst = max_error(res.fetch_all(), run_serial(g, feeds))
    assert err <= tol, f"{what}{worst} differs by {err}"
    assert res.traffic.mismatches(prog) == [], what
    gp = gradient_program(prog, [loss])
    seed = {loss: np.random.default_rng(2).standard_normal(prog.buffers[loss].shape)}
    grads = run_simulated(gp, {**feeds, gp.seeds[loss]: seed[loss]})
    got = {t: grads.fetch(b) for t, b in gp.grads.items()}
    worst_check = max(check_gradients(g, feeds, seed, got, directions=1, entries=1),
                      key=lambda c: c.error)
    assert worst_check.error <= grad_tol, (what, worst_check)


def assert_mpi_equals_serial(
    g: Graph, feeds: Mapping[str, Any], *, prog: Program | None = None, nprocs: int = 4,
    timeout: float = 120, tol: float = 1e-12,
) -> None:
    """Every fetched tensor of a real ``mpiexec -n nprocs`` run equals serial, and the bytes
    moved equal the plans'."""
    prog = prog if prog is not None else program_of(g)
    run = run_mpi(prog, feeds, nprocs=nprocs, timeout=timeout)
    err, worst = max_error(run.values, run_serial(g, feeds))
    assert err <= tol, f"{worst} differs by {err}"
    assert run.traffic.mismatches(prog) == []


def halo_predictions(prog: Program, itemsize: int | None = None) -> dict[str, int]:
    """The bytes each halo exchange of ``prog`` moves, as its boxes say, by edge label (in the
    graph's dtype, or for data of ``itemsize`` bytes an element: float64 fed to a float32
    graph moves twice the bytes its boxes declare)."""
    def scaled(i: HaloStep) -> int:
        declared = DTYPE_BYTES[prog.buffers[i.src].dtype]
        return i.predicted_bytes if itemsize is None else i.predicted_bytes * itemsize // declared

    return {i.edge: scaled(i) for i in prog.instructions if isinstance(i, HaloStep)}


def halo_rows(prog: Program, dim: int, coords: list[tuple[int, ...]]) -> list[tuple[int, int]]:
    """The positions (left, right) of ``dim`` that the one halo exchange of ``prog`` adds to
    each rank's own block, by mesh coordinate; [] when ``prog`` exchanges no halo."""
    steps = [i for i in prog.instructions if isinstance(i, HaloStep)]
    if not steps:
        return []
    (step,) = steps
    own, slab = prog.buffers[step.src], prog.buffers[step.dst]
    return [(own.box(c)[dim][0] - slab.box(c)[dim][0], slab.box(c)[dim][1] - own.box(c)[dim][1])
            for c in coords]


@dataclass(frozen=True)
class MpiCheck:
    """A gradient program run by ``mpiexec`` against serial numpy (``run_against_serial``):
    the largest relative error of the fetched forward tensors and of the gradients, where each
    is, and the bytes the runtime counted against the bytes the plans predict (reshard edges
    and halo exchanges, forward and reverse), with every edge where the two differ;
    ``internal_bytes`` is what ops' own reductions moved (a replicated weight's gradient
    all-reduced over the dims that split the batch), which no plan predicts."""

    forward_error: float
    forward_where: str
    gradient_error: float
    gradient_where: str
    measured_bytes: int
    planned_bytes: int
    mismatches: tuple[tuple[str, int, int], ...]
    internal_bytes: int
    run: MPIRun

    def problems(self, tol: float = 1e-12) -> list[str]:
        """What makes the run differ from serial or from its plans, one line each."""
        out = [f"{what} {where!r} differs from serial by {err:.3g} (> {tol:g})"
               for what, err, where in (("forward", self.forward_error, self.forward_where),
                                        ("gradient", self.gradient_error, self.gradient_where))
               if not err <= tol]
        out += [f"edge {edge!r}: measured {got} B, planned {want} B"
                for edge, got, want in self.mismatches]
        return out


def run_against_serial(
    g: Graph, prog: Program, gp: Program, feeds: Mapping[str, Any], seeds: Mapping[str, Any],
    *, nprocs: int, timeout: float, fetch: Sequence[str] | None = None,
    serial: SerialReference | None = None,
) -> MpiCheck:
    """Run ``gp`` (the gradient program of ``prog``, the lowered plan of ``g``, its seeds fed)
    on ``nprocs`` MPI ranks; compare the forward tensors ``fetch`` (default: every tensor) with
    ``g`` run serially, every gradient with serial reverse mode (``serial_cotangents``: a
    gradient serial mode does not reach is zero), and the bytes the runtime counted with the
    plans'. ``serial``: the reference, if already computed for these sources and seeds (by
    ``serial_reference``; several plans of one graph share it). Measures only: the caller
    judges (``MpiCheck.problems``)."""
    forward = list(prog.tensors if fetch is None else fetch)
    run = run_mpi(gp, feeds, nprocs=nprocs, fetch=[*forward, *gp.grads.values()],
                  timeout=timeout)
    if serial is None:
        serial = serial_reference(g, {k: feeds[k] for k in prog.feeds}, seeds)
    fwd, fwd_at = max_error({t: run.values[t] for t in forward}, serial.values)
    cts = serial.cotangents
    got = {t: run.values[b] for t, b in gp.grads.items()}
    want = {t: cts[t] if t in cts else np.zeros_like(got[t]) for t in got}
    grad, grad_at = max_error(got, want)
    itemsize = max((np.asarray(v).itemsize for v in feeds.values()
                    if np.issubdtype(np.asarray(v).dtype, np.floating)), default=None)
    planned = {**run.traffic.predicted(gp), **halo_predictions(gp, itemsize)}
    counted = {**run.traffic.per_edge, **run.traffic.halo}  # an op's own reductions aside
    mismatches = tuple((e, counted.get(e, 0), planned.get(e, 0))
                       for e in sorted(planned.keys() | counted.keys())
                       if counted.get(e, 0) != planned.get(e, 0))
    return MpiCheck(fwd, fwd_at, grad, grad_at, sum(counted.values()), sum(planned.values()),
                    mismatches, run.traffic.internal_bytes, run)


def assert_mpi_equals_serial_forward_and_reverse(
    g: Graph, prog: Program, gp: Program, feeds: Mapping[str, Any], seeds: Mapping[str, Any],
    *, nprocs: int = 4, timeout: float = 280,
) -> None:
    """The gradient program ``gp`` of ``prog`` run by ``mpiexec -n nprocs``: the forward equals
    serial numpy, the gradients equal the simulated mesh's and pass a numerical check, and the
    bytes sent equal the plans' (reshards edge by edge, halos box by box)."""
    run = run_mpi(gp, feeds, nprocs=nprocs, fetch=[*prog.tensors, *gp.grads.values()],
                  timeout=timeout)
    serial = run_serial(g, {k: feeds[k] for k in prog.feeds})
    err, where = max_error({t: run.values[t] for t in prog.tensors}, serial)
    assert err <= 1e-12, where
    sim = run_simulated(gp, feeds)
    for b in gp.grads.values():
        np.testing.assert_allclose(run.values[b], sim.fetch(b), rtol=1e-12, atol=1e-12)
    checks = check_gradients(g, feeds, seeds, {t: run.values[b] for t, b in gp.grads.items()},
                             directions=1, entries=1)
    assert max(c.error for c in checks) <= 1e-7
    assert run.traffic.mismatches(gp) == []
    assert run.traffic.per_edge == sim.traffic.per_edge
    assert run.traffic.halo == halo_predictions(gp)
