"""The vector-Jacobian product of label_smooth (:mod:`spmdrules.execution.kernels.label_smooth`)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from spmdrules.execution.local import LocalContext, LocalValue, array, cotangent, register_vjp


@register_vjp("label_smooth")
def label_smooth_vjp(ctx: LocalContext, ins: Sequence[LocalValue], outs: Sequence[LocalValue],
                     cts: Sequence[LocalValue]) -> tuple[LocalValue, ...]:
    label = array(ctx, ins, 0, "label")
    eps = float(ctx.attrs["epsilon"])
    g = cotangent(cts, 0, array(ctx, outs, 0, "out"))
    d_prior: LocalValue = None
    if ins[1] is not None:
        prior = array(ctx, ins, 1, "prior_dist")
        if prior.ndim == 0:
            d_prior = np.zeros_like(prior)
        else:
            # the prior broadcasts to label: sum the cotangent over what it broadcast along
            lead = g.ndim - prior.ndim
            gp = g.sum(axis=tuple(range(lead))) if lead > 0 else g.reshape(
                (1,) * -lead + g.shape)
            keep = tuple(i for i, n in enumerate(prior.shape) if n == 1 and gp.shape[i] != 1)
            d_prior = np.asarray(eps * gp.sum(axis=keep, keepdims=True)).reshape(prior.shape)
    return (np.asarray((1.0 - eps) * g, dtype=label.dtype), d_prior)
