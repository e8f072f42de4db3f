"""``python -m spmdrules.demo``: a Megatron-style MLP, annotated, inferred op by op, printed.

The block is ``y = gelu(x @ W1 + b1) @ W2 + b2`` on a 2x2 mesh with dims (dp, mp). Only x (batch
on dp) and the weights (W1 column-parallel, W2 row-parallel on mp) are annotated; every other
tensor's attribute comes from the rules, forward op by op. The row-parallel matmul leaves a pending
sum on mp: that is the one all-reduce of a Megatron MLP.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass

from spmdrules import DistAttr, ProcessMesh, TensorSpec, get_rule


@dataclass(frozen=True)
class Step:
    op: str
    inputs: tuple[str, ...]
    output: str
    attrs: tuple[object, ...] = ()


def mlp_steps() -> tuple[Step, ...]:
    return (
        Step("matmul", ("x", "w1"), "h1", (False, False)),
        Step("add", ("h1", "b1"), "h1b"),
        Step("gelu", ("h1b",), "a", (False,)),
        Step("matmul", ("a", "w2"), "h2", (False, False)),
        Step("add", ("h2", "b2"), "y"),
    )


def run(batch: int = 8, seq: int = 128, hidden: int = 256) -> list[tuple[str, str, str, str]]:
    mesh = ProcessMesh([[0, 1], [2, 3]], dim_names=["dp", "mp"])
    ffn = 4 * hidden
    specs: dict[str, TensorSpec] = {
        "x": TensorSpec([batch, seq, hidden], DistAttr(mesh, ["dp", None, None])),
        "w1": TensorSpec([hidden, ffn], DistAttr(mesh, [None, "mp"])),
        "b1": TensorSpec([ffn], DistAttr(mesh, ["mp"])),
        "w2": TensorSpec([ffn, hidden], DistAttr(mesh, ["mp", None])),
        "b2": TensorSpec([hidden], DistAttr(mesh, [None])),
    }
    rows = [
        (name, str(list(s.shape)), s.attr.mapping_str(), "annotated") for name, s in specs.items()
    ]
    shapes = {
        "h1": [batch, seq, ffn],
        "h1b": [batch, seq, ffn],
        "a": [batch, seq, ffn],
        "h2": [batch, seq, hidden],
        "y": [batch, seq, hidden],
    }
    for step in mlp_steps():
        info = get_rule(step.op).infer_forward(*(specs[n] for n in step.inputs), *step.attrs)
        for name, want in zip(step.inputs, info.inputs, strict=True):
            assert isinstance(want, DistAttr)
            if want != specs[name].attr:
                rows.append((name, "", want.mapping_str(), f"{step.op} wants it as"))
        out = info.outputs[0]
        assert isinstance(out, DistAttr)
        specs[step.output] = TensorSpec(shapes[step.output], out)
        rows.append((step.output, str(shapes[step.output]), out.mapping_str(), f"{step.op} output"))
    return rows


def main() -> int:
    t0 = time.perf_counter()
    rows = run()
    elapsed = time.perf_counter() - t0
    print("Megatron-style MLP on mesh [[0,1],[2,3]] (dp, mp): y = gelu(x @ W1 + b1) @ W2 + b2")
    print(
        "dims_mapping: tensor dim -> mesh dim (0 = dp, 1 = mp, -1 = replicated); P{d:sum} = pending"
    )
    print()
    head = ("tensor", "shape", "attribute", "source")
    widths = [max(len(r[i]) for r in (*rows, head)) for i in range(4)]
    print("  ".join(h.ljust(w) for h, w in zip(head, widths, strict=True)))
    print("  ".join("-" * w for w in widths))
    for r in rows:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)))
    print()
    print(
        f"inferred {sum(1 for r in rows if r[3].endswith('output'))} tensors in {elapsed * 1e3:.1f} ms"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
