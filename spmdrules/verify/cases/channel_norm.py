"""Cases of the channel norms: batch_norm (training and global statistics), group_norm,
instance_norm (its gradient rule's cases come from instance_norm's). A probe gives instance_norm
one sample or one channel, split: its gradient rule sums scale_grad and bias_grad over both."""

from __future__ import annotations

from spmdrules.verify.cases.case import (
    Draft,
    Rng,
    Split,
    draw_rank,
    draw_shape,
    pick,
    register_cases,
    size_one_probe,
)


@register_cases
def channel_norm(op: str, rng: Rng) -> Draft:
    x = draw_shape(rng, draw_rank(rng, 2, 4))
    last = rng.random() < 0.3 and op != "instance_norm"
    fmt = "NHWC" if last else "NCHW"
    c = x[-1] if last else x[1]
    if op == "batch_norm":
        mode = pick(rng, ("train", "test", "global", "trainable"))
        attrs = {"is_test": mode in ("test", "trainable"), "momentum": 0.9, "epsilon": 1e-5,
                 "data_format": fmt, "use_global_stats": mode == "global",
                 "trainable_statistics": mode == "trainable"}
        return Draft(op, (x, (c,), (c,), (c,), (c,)),
                     ("real", "real", "positive", "positive", "real"), attrs)
    scale = (c,) if rng.random() < 0.7 else None
    bias = (c,) if rng.random() < 0.7 else None
    domains = ("real", None if scale is None else "positive", None if bias is None else "real")
    if op == "group_norm":
        groups = pick(rng, [g for g in range(1, c + 1) if c % g == 0])
        return Draft(op, (x, scale, bias), domains,
                     {"epsilon": 1e-5, "groups": groups, "data_format": fmt})
    if not size_one_probe(rng):
        return Draft(op, (x, scale, bias), domains, {"epsilon": 1e-5})
    # N or C of size 1: x, y and the saved [N, C] statistics (inputs 0..2, outputs 3..5) hold
    # both, scale and bias C
    dim = int(rng.integers(2))
    x = (*x[:dim], 1, *x[dim + 1:])
    if dim:
        scale, bias = (None if scale is None else (1,)), (None if bias is None else (1,))
    split = [Split(a, dim) for a in (0, 3, 4, 5)]
    split += [Split(a, 0) for a, t in ((1, scale), (2, bias)) if dim and t is not None]
    return Draft(op, (x, scale, bias), domains, {"epsilon": 1e-5}, tuple(split))
