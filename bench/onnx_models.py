"""The light ONNX models of the onnx wheel, imported and run on MPI: per model, the op count, the
import and completion times, the spatial run (2x2 mesh, 4 ranks, batch 1) with its largest error
against the output shipped in the wheel, and the data-parallel run (2 ranks, batch 4) with its
largest error against our serial run. The same runs are asserted in
tests/importers/test_onnx_models.py; this prints the numbers.

Each spatial line also gives the layout's leanness: the halo exchanges, the reshard edges
completion planned (gathers of a spatially split activation) and their bytes, and the first
tensor gathered with its shape. ``--layout`` prints only that (import, completion and lowering,
no MPI run).

    .venv/bin/python bench/onnx_models.py [--layout] [MODEL ...]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import onnx

import spmdrules as sr
from spmdrules import plan
from spmdrules.completion import complete
from spmdrules.execution.executor import serial_op
from spmdrules.execution.lowering import lower
from spmdrules.execution.mpi import run_mpi
from spmdrules.execution.program import HaloStep, Program
from spmdrules.importers import onnx as onnx_import

DATA = Path(onnx.__file__).parent / "backend" / "test" / "data"
LIGHT = DATA / "light"


def dummy(shape: tuple[int, ...]) -> np.ndarray:
    n = int(np.prod(shape))
    return (np.arange(n).reshape(shape) / n).astype(np.float32)


def serial(g: sr.Graph, feeds: dict[str, np.ndarray], out: str) -> np.ndarray:
    values = dict(feeds)
    for op in g.ops:
        values.update(serial_op(op, values))
    return np.asarray(values[out])


def layout(model: str) -> tuple[onnx_import.Imported, Program, str]:
    """The spatial plan's program and its leanness: halos, reshards, bytes, the first gather."""
    path = LIGHT / f"light_{model}.onnx"
    t0 = time.perf_counter()
    im = onnx_import.import_model(path, spatial_sharding=True)
    t1 = time.perf_counter()
    mesh = sr.ProcessMesh([[0, 1], [2, 3]], dim_names=["h", "w"])
    plan.apply(im.graph, mesh, {im.inputs[0]: plan.Spatial(dims={"H": "h", "W": "w"})})
    done = complete(im.graph)
    prog = lower(done)
    t2 = time.perf_counter()
    halos = sum(isinstance(i, HaloStep) for i in prog.instructions)
    first = (f", first {done.reshards[0].tensor} {list(im.graph.tensor(done.reshards[0].tensor).shape)}"
             if done.reshards else "")
    return im, prog, (
        f"{model:13s} {len(im.graph.ops):5d} ops  import {t1 - t0:5.2f} s  complete+lower "
        f"{t2 - t1:5.2f} s  spatial: {halos:3d} halo steps, {len(done.reshards)} reshards "
        f"{done.bytes_moved / 2**20:5.2f} MiB{first}")


def spatial(model: str) -> str:
    im, prog, line = layout(model)
    x = dummy(im.graph.tensor(im.inputs[0]).shape)
    out = im.outputs[0]
    run = run_mpi(prog, im.feeds(x), nprocs=4, fetch=[out], timeout=900)
    want = onnx.numpy_helper.to_array(onnx.load_tensor(str(LIGHT / f"light_{model}_output_0.pb")))
    spec = json.loads((DATA / "real" / f"test_{model}" / "data.json").read_text())
    err = float(np.max(np.abs(run.values[out] - want)))
    ok = np.allclose(run.values[out], want, rtol=spec.get("rtol", 1e-3), atol=spec.get("atol", 1e-7))
    return (f"{line}\n{'':13s} spatial 4 ranks: mpiexec {run.wall:6.1f} s, max |err| vs shipped "
            f"{err:.2e} (rtol {spec.get('rtol', 1e-3)}) {'PASS' if ok else 'FAIL'}")


def data_parallel(model: str) -> str:
    m = onnx.load(str(LIGHT / f"light_{model}.onnx"))
    inits = {i.name for i in m.graph.initializer}
    (vi,) = [i for i in m.graph.input if i.name not in inits]
    shape = [4, *(d.dim_value for d in vi.type.tensor_type.shape.dim[1:])]
    im = onnx_import.import_model(m, input_shapes={vi.name: shape}, follow_batch=True)
    mesh = sr.ProcessMesh([0, 1], dim_names=["dp"])
    plan.apply(im.graph, mesh, {im.inputs[0]: plan.DataParallel(dim="dp")})
    prog = lower(complete(im.graph))
    feeds = im.feeds(dummy(tuple(shape)))
    out = im.outputs[0]
    run = run_mpi(prog, feeds, nprocs=2, fetch=[out], timeout=900)
    t = time.perf_counter()
    ref = serial(im.graph, feeds, out)
    ts = time.perf_counter() - t
    err = float(np.max(np.abs(run.values[out] - ref)))
    return (f"{'':13s} data parallel 2 ranks, batch 4: mpiexec {run.wall:6.1f} s, serial "
            f"{ts:5.1f} s, max |err| vs serial {err:.2e} {'PASS' if err <= 1e-9 else 'FAIL'}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--layout", action="store_true",
                    help="only the spatial layout's halos and reshards (no MPI run)")
    ap.add_argument("models", nargs="*", default=sorted(
        p.stem.removeprefix("light_") for p in LIGHT.glob("*.onnx")))
    args = ap.parse_args()
    for model in args.models:
        if args.layout:
            print(layout(model)[2], flush=True)
            continue
        print(spatial(model), flush=True)
        print(data_parallel(model), flush=True)


if __name__ == "__main__":
    main()
