"""``python -m spmdrules.demo`` (``make demo``): annotate, complete, lower, run on MPI, check.

Four models on a 2x2 mesh (dp, mp), annotated by :mod:`spmdrules.graph.examples`:
the MLP block, a 2-layer GPT decoder and a 2-layer LLaMA decoder (grouped-query attention with
rotary embeddings and a causal mask, SwiGLU), Megatron-style, and a ResNet block spatially
sharded (H on mesh dim 0, W on mesh dim 1; its halo exchanges are printed with their bytes),
with small sizes. For each: complete the graph, print the
annotation table and the reshard plan with bytes, lower it, add its reverse mode
(:mod:`spmdrules.execution.adjoint`), run forward and reverse under ``mpiexec -n 4`` (the venv's), compare
every tensor with the same model run serially in numpy (float64 data) and every parameter's
gradient with numerical derivatives of the serial model, check that the bytes sent equal the
plans', and print the wall time of each phase.

Without mpiexec or mpi4py (or with ``--sim``) the programs run on the in-process simulated mesh
instead, and the demo says so.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from spmdrules.completion.driver import Completion, complete
from spmdrules.completion.reshard_plans import fmt_bytes
from spmdrules.core.mesh import ProcessMesh
from spmdrules.execution.adjoint import gradient_program
from spmdrules.execution.executor import Traffic, max_error, random_feeds, run_serial
from spmdrules.execution.gradcheck import check_gradients
from spmdrules.execution.lowering import lower
from spmdrules.execution.program import HaloStep, Program
from spmdrules.execution.simulated import run_simulated
from spmdrules.graph.examples import gpt_decoder, llama_decoder, mlp, resnet_block
from spmdrules.graph.graph import Graph
from spmdrules.phases import Phases
from spmdrules.runtime.errors import MPIUnavailableError

#: float64 data must reproduce the serial result to this relative error
TOLERANCE = 1e-12
#: gradients against numerical derivatives (Richardson-extrapolated central differences)
GRAD_TOLERANCE = 1e-7
#: GPT sizes: small enough for a demo, every dim divisible by the mesh
GPT_SIZES = {"batch": 4, "seq": 16, "hidden": 32, "heads": 4, "ffn": 64, "vocab": 128}
MLP_SIZES = {"batch": 4, "seq": 16, "hidden": 32, "ffn": 64}
RESNET_SIZES = {"batch": 4, "channels": 8, "size": 16}
LLAMA_SIZES: dict[str, int] = {"batch": 4, "seq": 16, "hidden": 32, "heads": 4, "kv_heads": 2,
                               "ffn": 64, "vocab": 128}


@dataclass
class Outcome:
    """One model's trip through the pipeline."""

    name: str
    graph: Graph
    result: Completion
    program: Program
    executor: str
    error: float
    worst: str
    traffic: Traffic
    #: the program that ran: the forward followed by its reverse mode
    gradient: Program
    grad_error: float
    grad_worst: str
    phases: Phases = field(default_factory=Phases)

    @property
    def ok(self) -> bool:
        return (self.error <= TOLERANCE and self.grad_error <= GRAD_TOLERANCE
                and not self.traffic.mismatches(self.gradient)
                and self.traffic.halo == halo_predictions(self.gradient))


def halo_predictions(prog: Program) -> dict[str, int]:
    """The bytes each HaloExchange of ``prog`` moves, as its boxes predict."""
    return {i.edge: i.predicted_bytes for i in prog.instructions if isinstance(i, HaloStep)}


def demo_mesh() -> ProcessMesh:
    return ProcessMesh([[0, 1], [2, 3]], dim_names=["dp", "mp"])


def models(mesh: ProcessMesh) -> list[tuple[str, Callable[[], Graph], dict[str, int]]]:
    v, s = GPT_SIZES["vocab"], GPT_SIZES["seq"]
    return [
        ("MLP", lambda: mlp(mesh, batch=MLP_SIZES["batch"], seq=MLP_SIZES["seq"],
                            hidden=MLP_SIZES["hidden"], ffn=MLP_SIZES["ffn"]), {}),
        ("GPT decoder, 2 layers", lambda: gpt_decoder(
            2, mesh, batch=GPT_SIZES["batch"], seq=s, hidden=GPT_SIZES["hidden"],
            heads=GPT_SIZES["heads"], ffn=GPT_SIZES["ffn"], vocab=v),
         {"input_ids": v, "labels": v, "position_ids": s}),
        ("LLaMA decoder (GQA, RoPE, causal mask, SwiGLU), 2 layers",
         lambda: llama_decoder(2, mesh, batch=LLAMA_SIZES["batch"], seq=LLAMA_SIZES["seq"],
                               hidden=LLAMA_SIZES["hidden"], heads=LLAMA_SIZES["heads"],
                               kv_heads=LLAMA_SIZES["kv_heads"], ffn=LLAMA_SIZES["ffn"],
                               vocab=LLAMA_SIZES["vocab"]),
         {"input_ids": LLAMA_SIZES["vocab"], "labels": LLAMA_SIZES["vocab"]}),
        ("ResNet block, spatially sharded (H on dp, W on mp)",
         lambda: resnet_block(mesh, layout="spatial", batch=RESNET_SIZES["batch"],
                              channels=RESNET_SIZES["channels"], size=RESNET_SIZES["size"]), {}),
    ]


def run_model(name: str, build: Callable[[], Graph], limits: dict[str, int], *, use_mpi: bool,
              seed: int = 0) -> Outcome:
    phases = Phases()
    with phases("build + annotate"):
        g = build()
    with phases("complete"):
        r = complete(g)
    with phases("lower"):
        prog = lower(r)
    loss = prog.tensors[-1]
    with phases("reverse mode (gradient program)"):
        gp = gradient_program(prog, [loss])
    feeds = random_feeds(prog, seed, vocab_limits=limits)
    shape = prog.buffers[loss].shape
    seeds = {loss: np.random.default_rng(seed).standard_normal(shape) if shape else 1.0}
    feeds[gp.seeds[loss]] = np.asarray(seeds[loss])
    fetch = [*prog.tensors, *gp.grads.values()]
    executor = "simulated mesh (in process)"
    if use_mpi:
        from spmdrules.execution.mpi import run_mpi

        with phases("run: mpiexec -n 4 (wall, start-up included)"):
            mr = run_mpi(gp, feeds, nprocs=4, fetch=fetch, timeout=50)
        phases.add("  of which forward + reverse (slowest rank)", mr.seconds.get("run", 0.0))
        phases.add("  of which collectives (slowest rank)", mr.seconds.get("collective", 0.0))
        values, traffic, executor = mr.values, mr.traffic, "MPI, 4 ranks"
    else:
        with phases("run: simulated mesh"):
            res = run_simulated(gp, feeds)
            values, traffic = res.fetch_all(fetch), res.traffic
    with phases("serial numpy"):
        serial = run_serial(g, feeds)
    with phases("check forward"):
        err, worst = max_error({n: values[n] for n in prog.tensors}, serial)
    with phases("check gradients (numerical, serial)"):
        checks = check_gradients(g, feeds, seeds, {n: values[b] for n, b in gp.grads.items()},
                                 directions=1, entries=0)
        worst_grad = max(checks, key=lambda c: c.error)
    return Outcome(name, g, r, prog, executor, err, worst, traffic, gp, worst_grad.error,
                   worst_grad.tensor, phases)


def report(o: Outcome) -> str:
    r, g = o.result, o.graph
    annotated = [t for t in g.tensors if t.annotation is not None]
    lines = [f"== {o.name}: {g.num_ops} ops, {g.num_tensors} tensors, mesh (dp=2, mp=2) ==", "",
             "annotation table (what the user wrote; completion inferred the rest):",
             r.table(annotated), ""]
    if g.num_tensors <= 12:
        lines += ["every tensor after completion:", r.table(), ""]
    lines += [r.summary(), "", o.program.summary()]
    for e in o.program.edges:
        lines.append(f"  {e.label}: {e.plan}".replace("\n", "\n    "))
    gp = o.gradient
    predicted = o.traffic.predicted(gp)
    counted = o.traffic.planned_bytes
    n_rev = len(gp.edges) - len(o.program.edges)
    lines += [
        f"reverse mode: {gp.summary()}",
        f"  {n_rev} adjoint reshard edges (grad[...]) mirror the forward plans; "
        f"{len(gp.grads)} parameter gradients, each all-reduced into its parameter's layout",
        "",
        f"ran on: {o.executor}",
        f"bytes sent by reshards, forward and reverse: counted {counted} B, plans predict "
        f"{sum(predicted.values())} B (float64 data, so twice the float32 plan) -> "
        + ("equal" if not o.traffic.mismatches(gp) else
           f"DIFFERENT: {o.traffic.mismatches(gp)}"),
    ]
    halos = halo_predictions(gp)
    if halos:
        lines.append("halo exchanges (HaloStep, forward and adjoint): counted vs predicted by "
                     "their boxes")
        lines += [f"  {label}: {fmt_bytes(o.traffic.halo.get(label, 0))} "
                  f"(predicted {fmt_bytes(want)})" for label, want in halos.items()]
    ops_own = {k: v for k, v in o.traffic.internal.items() if not k.startswith("gradient of")}
    grad_sums = [v for k, v in o.traffic.internal.items() if k.startswith("gradient of")]
    if ops_own:
        lines.append("bytes of ops' own reductions (no reshard plan covers them): " + ", ".join(
            f"{k} {fmt_bytes(v)}" for k, v in ops_own.items()))
    if grad_sums:
        lines.append(f"bytes of the gradients' all-reduces ({len(grad_sums)} parameters "
                     f"replicated over some mesh dim): {fmt_bytes(sum(grad_sums))}")
    verdict = "MATCHES" if o.error <= TOLERANCE else "DOES NOT MATCH"
    lines += [f"result {verdict} serial numpy: max relative error {o.error:.1e} "
              f"(worst tensor {o.worst or '-'}; tolerance {TOLERANCE:.0e}) over "
              f"{g.num_tensors} tensors",
              f"gradients {'MATCH' if o.grad_error <= GRAD_TOLERANCE else 'DO NOT MATCH'} "
              f"numerical derivatives of the serial model: max relative error "
              f"{o.grad_error:.1e} (worst {o.grad_worst}; tolerance {GRAD_TOLERANCE:.0e}) over "
              f"{len(gp.grads)} parameters", "", "wall time per phase:"]
    lines += o.phases.lines()
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m spmdrules.demo", description=__doc__)
    ap.add_argument("--sim", action="store_true",
                    help="run on the in-process simulated mesh instead of mpiexec")
    args = ap.parse_args(argv)
    t_all = time.perf_counter()
    use_mpi = not args.sim
    if use_mpi:
        try:
            import mpi4py  # noqa: F401

            from spmdrules.execution.mpi import mpiexec_path

            if mpiexec_path() is None:
                raise ImportError("no mpiexec")
        except ImportError as e:
            print(f"MPI is unavailable ({e}); running on the simulated mesh instead\n")
            use_mpi = False
    ok = True
    for name, build, limits in models(demo_mesh()):
        try:
            o = run_model(name, build, limits, use_mpi=use_mpi)
        except MPIUnavailableError as e:
            print(f"MPI is unavailable ({e}); running on the simulated mesh instead\n")
            use_mpi = False
            o = run_model(name, build, limits, use_mpi=False)
        print(report(o))
        print()
        ok &= o.ok
    print(f"demo {'passed' if ok else 'FAILED'} in {time.perf_counter() - t_all:.1f} s")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
