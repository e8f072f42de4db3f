"""label_smooth(label, prior_dist?) -> out = (1 - epsilon) * label + epsilon * prior, and its
gradient rule (label_grad = (1 - epsilon) * out_grad).

Described as data: an elementwise op of label and the prior distribution, which broadcasts from
the right (Paddle's letters: a size-1 dim of the prior is the shared ``'1'``, which claims the mesh
dim it is sharded on). The result has label's letters; without a prior it is ``label``'s own
layout (the uniform prior ``1 / classes`` needs no tensor: the kernel reads the global class
count; a 0-d prior reads as absent, as Paddle reads it). A prior of higher rank than label
broadcasts through leading size-1 dims, which the result (label's shape) does not have.
Pending sums are resharded (the uniform prior would be added once per piece).
"""

from __future__ import annotations

from spmdrules.core.errors import RuleArgumentError
from spmdrules.engine import einsum
from spmdrules.engine.described import ranks, register_described
from spmdrules.engine.description import Description, letters
from spmdrules.engine.registry import A, Opt, T

Shape = tuple[int, ...]


def describe_label_smooth(label: Shape, prior_dist: Shape | None, **_: object) -> Description:
    if not label:
        raise RuleArgumentError("'label' is 0-d; give the class distributions on its last dim")
    if not prior_dist:  # absent, or 0-d (the rank0 absent convention): a uniform prior
        ll = letters(len(label))
        return Description((ll, None if prior_dist is None else ""), (ll,), pending=None)
    extra = len(prior_dist) - len(label)
    if extra > 0 and any(n != 1 for n in prior_dist[:extra]):
        raise RuleArgumentError(
            f"'prior_dist' has shape {list(prior_dist)}, which does not broadcast to label's "
            f"{list(label)}; give it label's rank or less (e.g. [1, classes])")
    (ll, pl), _out = einsum.broadcast_notations([label, prior_dist])
    # a prior of higher rank has leading size-1 dims the result lacks: they are whole
    return Description((ll, pl), (ll,), pending=None, claim_broadcast=True)


def describe_label_smooth_grad(out_grad: Shape, **_: object) -> Description:
    gl = letters(len(out_grad))
    return Description((gl,), (gl,), pending=None)


register_described(
    "label_smooth", describe_label_smooth, inputs=[T("label"), Opt("prior_dist")],
    outputs=[T("out")], attrs=[A("epsilon", "float", 0.0)],
    doc="LabelSmoothInferSpmd: label and prior_dist merged elementwise; out has label's layout.",
)
register_described(
    "label_smooth_grad", describe_label_smooth_grad, inputs=[T("out_grad")],
    outputs=[T("label_grad")], attrs=[A("epsilon", "float", 0.0)], reverse=False, key=ranks,
    doc="LabelSmoothGradInferSpmd: label_grad takes out_grad's layout.",
)
