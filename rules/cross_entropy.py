"""cross_entropy_with_softmax / softmax_with_cross_entropy: ``a..k..,a..1.. -> a..k..,a..1..``.

x holds logits with the classes on ``axis`` (letter k); a hard label has size 1 there ('1'), a soft
label has the classes (k). The outputs are softmax (x's letters) and loss ('1' on the class axis).
The class axis may be sharded only when the vocab-parallel kernel (c_softmax_with_cross_entropy)
can run: softmax on, hard labels, classes on the last axis. It reduces the loss over the shards
itself, so the loss is complete, not partial. Partial inputs are resharded to replicated.
"""

from __future__ import annotations

from spmdrules.core.errors import RuleArgumentError, UnsupportedError
from spmdrules.engine import einsum
from spmdrules.engine.described import register_described
from spmdrules.engine.description import Description, letters
from spmdrules.engine.policy import Policy
from spmdrules.engine.registry import A, T
from spmdrules.engine.rulekit import normalise_axis

Shape = tuple[int, ...]

CE_OPS = ("cross_entropy_with_softmax", "softmax_with_cross_entropy")
_CLASS = "k"


def _notation(ndim: int, axis: int, soft_label: bool) -> tuple[str, str, str]:
    """(x letters, label letters, loss letters)."""
    if ndim > len(einsum.ALPHABET):
        raise RuleArgumentError(f"'x' of rank {ndim} exceeds the {len(einsum.ALPHABET)} letters")
    base = einsum.ALPHABET[:ndim]
    x = base[:axis] + _CLASS + base[axis + 1 :]
    loss = base[:axis] + einsum.BROADCAST + base[axis + 1 :]
    return x, (x if soft_label else loss), loss


def _check_shapes(x: Shape, label: Shape, axis: int, soft_label: bool) -> None:
    want = x if soft_label else (*x[:axis], 1, *x[axis + 1 :])
    if label != want:
        kind = "soft labels have x's shape" if soft_label else "hard labels have size 1 on axis"
        raise RuleArgumentError(
            f"'label' has shape {list(label)} but must be {list(want)} ({kind} {axis})"
        )


def _axis(x: Shape, axis: int) -> int:
    if not x:
        raise RuleArgumentError("'x' is 0-d; cross entropy needs a class axis")
    return normalise_axis("cross_entropy", "x", axis, len(x))


def _class_axis_shardable(ndim: int, axis: int, soft_label: bool, use_softmax: bool) -> str:
    """Why the class axis may not be sharded, or '' if it may."""
    if soft_label:
        return "soft_label=True"
    if axis != ndim - 1:
        return f"the class axis {axis} is not the last axis"
    if not use_softmax:
        return "use_softmax=False"
    return ""


def cross_entropy(x: Shape, label: Shape, *, soft_label: bool, use_softmax: bool, axis: int
                  ) -> Description:
    """``x, label -> softmax_out, loss``; the label's size-1 class dim claims its mesh dim (the
    '1' letter merges). Where the vocab-parallel kernel cannot run, a class split of x is
    refused, and the label's (soft labels share x's class letter) is gathered: the loss cannot be
    computed on class shards, so the class letter is claimed, whole in every answer."""
    ax = _axis(x, axis)
    _check_shapes(x, label, ax, soft_label)
    xl, ll, lossl = _notation(len(x), ax, soft_label)
    why = _class_axis_shardable(len(x), ax, soft_label, use_softmax)
    refused = ((0, _CLASS, f"the vocab-parallel kernel does not support it with {why}"),
               ) if why else ()
    return Description((xl, ll), (xl, lossl), claim_broadcast=True,
                       claimed=frozenset(_CLASS if why else ""), reverse_merge=(3, 2),
                       policy=Policy(refused=refused))


def _check_outputs(x: Shape, label: Shape, softmax_out: Shape, loss: Shape, soft_label: bool,
                   use_softmax: bool, numeric_stable_mode: bool, ignore_index: int, axis: int
                   ) -> None:
    ax = _axis(x, axis)
    _check_shapes(x, label, ax, soft_label)
    if softmax_out != x:
        raise RuleArgumentError(
            f"'softmax_out' has shape {list(softmax_out)} but 'x' has {list(x)}"
        )
    if loss != (*x[:ax], 1, *x[ax + 1 :]):
        raise RuleArgumentError(
            f"'loss' has shape {list(loss)} but must be x's shape with size 1 on axis {ax}"
        )
    if not use_softmax:
        raise UnsupportedError(
            "reverse inference with use_softmax=False is not supported (Paddle refuses it too); "
            "infer forward from x and label instead"
        )


# Reverse merges loss, then softmax_out (reverse_merge).
for _name in CE_OPS:
    register_described(
        _name, cross_entropy, inputs=[T("x"), T("label")],
        outputs=[T("softmax_out"), T("loss")],
        attrs=[
            A("soft_label", "bool", False), A("use_softmax", "bool", True),
            A("numeric_stable_mode", "bool", True), A("ignore_index", "int", -100),
            A("axis", "int", -1),
        ],
        check_reverse=_check_outputs,
        doc="CrossEntropyWithSoftmaxInferSpmdStatic: the class axis may be sharded only for the "
        "vocab-parallel kernel (softmax on, hard labels, last axis).",
    )


# ---- c_softmax_with_cross_entropy(x, label) -> softmax, loss: the vocab-parallel kernel itself ---
def describe_c_softmax_ce(x: tuple[int, ...], label: tuple[int, ...], **_: object) -> Description:
    """Classes on x's last dim, hard labels with size 1 there: x's class shards stay (the kernel
    reduces the row max, sum and target logit over them), the other dims merge with label's."""
    if not x:
        raise RuleArgumentError("'x' is 0-d; cross entropy needs a class axis")
    if label != (*x[:-1], 1):
        raise RuleArgumentError(
            f"'label' has shape {list(label)} but must be {[*x[:-1], 1]} (hard labels, size 1 on "
            "the class axis, the last)")
    xl = letters(len(x))
    ll = xl[:-1] + einsum.BROADCAST
    return Description((xl, ll), (xl, ll), pending=None)


register_described(
    "c_softmax_with_cross_entropy", describe_c_softmax_ce, inputs=[T("x"), T("label")],
    outputs=[T("softmax"), T("loss")],
    attrs=[A("ignore_index", "int", -100), A("rank", "int", 0), A("nranks", "int", 1)],
    doc="CSoftmaxWithCrossEntropyInferSpmd: the class dim keeps its shard (vocab parallel); "
    "x and label merged on the other dims.",
)


# ---- c_softmax_with_multi_label_cross_entropy(x, label, smooth_weight) -> softmax, loss ---------
def describe_c_softmax_multi_label_ce(
    x: tuple[int, ...], label: tuple[int, ...], smooth_weight: tuple[int, ...], *,
    sum_multi_label_loss: bool = True, **_: object,
) -> Description:
    """Classes on x's last dim; label and smooth_weight share x's other dims and end in the
    labels of each row (a letter of their own). x's class shards stay (the kernel reduces the row
    max, the sum and the target logits over them). Summed over the labels, the loss has no label
    dim, so a label split would leave each rank a part of the sum while the rule promises a whole
    loss: the labels are gathered instead (``pending=None``)."""
    if not x:
        raise RuleArgumentError("'x' is 0-d; cross entropy needs a class axis (the last)")
    if len(label) != len(x) or label[:-1] != x[:-1] or label[-1] < 1:
        raise RuleArgumentError(
            f"'label' has shape {list(label)} but must be {[*x[:-1], 'C']} with C >= 1 (x's "
            "shape with the number of labels per row last)")
    if smooth_weight != label:
        raise RuleArgumentError(
            f"'smooth_weight' has shape {list(smooth_weight)} but must be label's {list(label)} "
            "(one weight per label)")
    xl = letters(len(x))
    ll = xl[:-1] + letters(len(x) + 1)[-1]
    loss = xl[:-1] + einsum.BROADCAST if sum_multi_label_loss else ll
    return Description((xl, ll, ll), (xl, loss), pending=None)


register_described(
    "c_softmax_with_multi_label_cross_entropy", describe_c_softmax_multi_label_ce,
    inputs=[T("x"), T("label"), T("smooth_weight")], outputs=[T("softmax"), T("loss")],
    attrs=[A("ignore_index", "int", -100), A("sum_multi_label_loss", "bool", True),
           A("rank", "int", 0), A("nranks", "int", 1)],
    op_attrs=[A("ring_id", "int", 0)],
    doc="CSoftmaxWithMultiLabelCrossEntropyInferSpmd: the class dim keeps its shard (vocab "
    "parallel); x, label and smooth_weight merged on the other dims; with the loss summed over "
    "the labels, a label split is gathered.",
)
