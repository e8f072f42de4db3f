"""Ours: a graph imported, planned and completed; its forward bytes and collectives as
``complete`` plans them (the bytes ``sum(p.total_bytes for p in result.plans())``, the
collectives every step of those plans that moves data)."""

from __future__ import annotations

import io
from typing import Any

from quality.figures import Figure

#: plan steps that move no data
LOCAL = frozenset({"slice", "zero_partial"})


def of_completion(result: Any, halos: bool = False) -> Figure:
    """A completed graph's forward bytes and collectives, as ``complete`` plans them; with
    ``halos``, also the halo exchanges its lowering adds (each HaloStep's predicted bytes)."""
    plans = result.plans()
    moved = sum(p.total_bytes for p in plans)
    count = sum(1 for p in plans for s in p.steps if s.kind not in LOCAL)
    if halos:
        from spmdrules.execution.lowering import lower
        from spmdrules.execution.program import HaloStep

        steps = [i for i in lower(result).instructions if isinstance(i, HaloStep)]
        moved += sum(h.predicted_bytes for h in steps)
        count += len(steps)
    return Figure(moved, count)


def ours_graph(g: Any, spec: dict[str, Any], halos: bool = False) -> Figure:
    from hf_models import MESH

    from spmdrules import plan
    from spmdrules.completion import complete

    plan.apply(g, MESH, spec)
    return of_completion(complete(g), halos)


def ours_module(module: Any, inputs: tuple[Any, ...], spec: dict[str, Any]) -> Figure:
    from spmdrules.importers import torch as torch_import

    return ours_graph(torch_import.export(module, inputs).graph, spec)


#: how a CNN enters: through torch.export, or through torch's TorchScript ONNX exporter
CNN_IMPORTERS = ("torch", "onnx")


def ours_cnn(module: Any, x: Any, spec: dict[str, Any], importer: str = "torch") -> Figure:
    """A CNN imported with every convolution's spatial opt-in: through ``torch.export`` and
    spmdrules.importers.torch, or through torch's TorchScript ONNX exporter and
    spmdrules.importers.onnx (which sees each BatchNorm folded into its conv)."""
    if importer == "torch":
        from spmdrules.importers import torch as torch_import

        g = torch_import.export(module, (x,), spatial_sharding=True).graph
        return ours_graph(g, spec, True)
    if importer != "onnx":
        raise ValueError(f"importer {importer!r}: one of {', '.join(CNN_IMPORTERS)}")
    import onnx
    import torch

    from spmdrules.importers import onnx as onnx_import

    buf = io.BytesIO()
    torch.onnx.export(module, (x,), buf, dynamo=False, input_names=["x"])
    model = onnx.load_from_string(buf.getvalue())
    return ours_graph(onnx_import.import_model(model, spatial_sharding=True).graph, spec, True)
