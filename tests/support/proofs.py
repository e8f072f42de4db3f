"""Proof by execution of a rule's answer: run the op's kernel on the answered layout.

``execute(op, inputs, info, attrs)`` scatters random values by the answered input attributes, runs
the op's local kernel on every rank of the simulated mesh, gathers the result by the answered
output attributes and compares it with the serial kernel: "ok" when equal, "wrong" when the layout
computes another value (or cannot be computed locally), as ``python -m spmdrules.verify`` judges.
A deviation from Paddle is proven by Paddle's answer executing "wrong" and ours "ok".
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np

import spmdrules as sr
from spmdrules.execution.local import get_kernel
from spmdrules.graph.shapes import TensorMeta, infer_meta
from spmdrules.verify import run_case
from spmdrules.verify.cases import Case
from spmdrules.verify.cases.case import domain_dtype


def _replicated(mesh: sr.ProcessMesh, shape: Sequence[int]) -> sr.TensorSpec:
    return sr.TensorSpec(list(shape), sr.DistAttr.replicated(mesh, len(shape)))


def execute(op: str, inputs: Sequence[sr.TensorSpec | tuple[sr.TensorSpec, ...] | None],
            info: sr.SpmdInfo, attrs: Mapping[str, Any], domains: Sequence[Any] | None = None,
            seed: int = 0) -> str:
    """The verdict of executing ``info`` (a forward answer: one attribute per input and output)."""
    first = next(t for t in inputs if t is not None)
    mesh = (first[0] if isinstance(first, tuple) else first).attr.mesh
    doms = tuple(domains) if domains is not None else ("real",) * len(inputs)
    metas = [None if t is None else
             tuple(TensorMeta(e.shape, domain_dtype(de)) for e, de in zip(t, d, strict=True))
             if isinstance(t, tuple) else TensorMeta(t.shape, domain_dtype(d))
             for t, d in zip(inputs, doms, strict=True)]
    outs = infer_meta(op, metas, dict(attrs))
    case = Case(rule=op, direction="forward", op=op, mesh=mesh, inputs=tuple(inputs),
                outputs=tuple(_replicated(mesh, m.shape) if isinstance(m, TensorMeta)
                              else tuple(_replicated(mesh, e.shape) for e in m) for m in outs
                              if isinstance(m, TensorMeta | tuple)),
                attrs=dict(attrs), domains=doms)
    result = run_case(case, info, get_kernel(op), np.random.default_rng(seed), alternatives=False)
    return result.status


def filed_cases(op: str, deviation: str) -> Iterator[tuple[dict[str, Any], sr.SpmdInfo]]:
    """Every shipped case of ``op`` that the comparator files under ``deviation``, with our
    answer to it."""
    from spmdrules.conformance.calls import agrees, call_engine
    from spmdrules.conformance.deviation import classify
    from spmdrules.conformance.runner import default_case_paths, iter_cases

    for c in iter_cases(default_case_paths(), [op]):
        try:
            got: sr.SpmdInfo | sr.SpmdError = call_engine(c)
        except sr.SpmdError as e:  # a refusal, compared with Paddle's error like any answer
            got = e
        if not agrees(c, got) and classify(c, got) == deviation:
            assert isinstance(got, sr.SpmdInfo)
            yield c, got


def recorded_answer(case: dict[str, Any]) -> sr.SpmdInfo:
    """Paddle's recorded answer to a one-tensor case, as attributes on the case's mesh."""
    m = case["mesh"]
    mesh = sr.ProcessMesh.from_shape(m["shape"], m["process_ids"])

    def one(e: dict[str, Any]) -> sr.DistAttr:
        mdm = e.get("multi_dims_mapping") or [[] if d == -1 else [d] for d in e["dims_mapping"]]
        return sr.DistAttr(mesh, multi_dims_mapping=mdm,
                           partial={int(k): v for k, v in e["partial"].items()})

    e = case["expected"]
    return sr.SpmdInfo([one(a) for a in e["inputs"]], [one(a) for a in e["outputs"]])


def execute_case(case: dict[str, Any], info: sr.SpmdInfo) -> str:
    """The verdict of executing ``info`` as an answer to a one-input case (its x, attrs)."""
    m, x = case["mesh"], case["inputs"][0]
    mesh = sr.ProcessMesh.from_shape(m["shape"], m["process_ids"])
    return execute(case["op"], [_replicated(mesh, x["shape"])], info, case["attrs"])


def prove_keeps_partial(op: str, deviation: str, count: int, slot: str) -> None:
    """A parallelism class that keeps a pending partial where Paddle reduces first: on each of
    its ``count`` cases ours holds the partial in the first tensor of ``slot`` ("inputs" or
    "outputs") and Paddle's does not, and both answers execute correctly."""
    filed = list(filed_cases(op, deviation))
    for c, got in filed:
        ours, paddle = getattr(got, slot)[0], getattr(recorded_answer(c), slot)[0]
        assert isinstance(ours, sr.DistAttr) and ours.partial_items
        assert isinstance(paddle, sr.DistAttr) and not paddle.partial_items
        assert (execute_case(c, got), execute_case(c, recorded_answer(c))) == ("ok", "ok"), \
            c["case_id"]
    assert len(filed) == count
