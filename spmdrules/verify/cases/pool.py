"""Cases of pool2d and pool3d: random kernels, strides, paddings, ceil_mode, exclusive, layouts,
max and avg, windowed, adaptive and global; the spatial dims keep their shards (halos). A probe
gives one spatial dim size 1, split: adaptive and global pooling reduce across it."""

from __future__ import annotations

from typing import Any

from spmdrules.verify.cases.case import Draft, Rng, Split, pick, register_cases, size_one_probe


@register_cases
def pool(op: str, rng: Rng) -> Draft:
    nsp = 3 if op == "pool3d" else 2
    last = rng.random() < 0.3
    sp = [int(pick(rng, (2, 3, 4, 5, 6, 7, 8, 9, 11))) for _ in range(nsp)]
    probe = int(rng.integers(nsp)) if size_one_probe(rng) else -1
    if probe >= 0:
        sp[probe] = 1
    n, c = int(pick(rng, (1, 2, 3))), int(pick(rng, (1, 2, 3, 4)))
    kind = rng.random()
    attrs: dict[str, Any] = {
        "pooling_type": pick(rng, ("max", "avg")), "ceil_mode": bool(rng.random() < 0.3),
        "exclusive": bool(rng.random() < 0.6),
        "data_format": ("NDHWC" if nsp == 3 else "NHWC") if last else
        ("NCDHW" if nsp == 3 else "NCHW"),
        "global_pooling": kind < 0.1, "adaptive": 0.1 <= kind < 0.25,
        "padding_algorithm": "EXPLICIT",
    }
    if attrs["adaptive"]:
        attrs["kernel_size"] = [int(rng.integers(1, s + 1)) for s in sp]
    else:
        k = [int(rng.integers(1, min(4, s) + 1)) for s in sp]
        attrs["kernel_size"] = k
        attrs["strides"] = [int(rng.integers(1, 4)) for _ in sp]
        pads = [int(rng.integers(0, ki // 2 + 1)) for ki in k for _ in (0, 1)]
        attrs["paddings"] = pads if rng.random() < 0.5 else pads[0::2]
        attrs["padding_algorithm"] = pick(rng, ("EXPLICIT", "EXPLICIT", "EXPLICIT", "SAME",
                                                "VALID"))
    x = (n, *sp, c) if last else (n, c, *sp)
    split = (Split(0, probe + (1 if last else 2)),) if probe >= 0 else ()
    return Draft(op, (x,), ("real",), attrs, split)
