"""roi_align: ``nchw,ro,n -> rcpq``: bilinear pooling of each box's region of one image.

x is [N, C, H, W] (letters ``nchw``), boxes [R, 4] (``ro``: x1, y1, x2, y2 per region of
interest), boxes_num [N] (``n``: how many boxes each image has), out [R, C, pooled_height,
pooled_width] (``rcpq``). A box reads a window of its image anywhere in H and W, the boxes are
assigned to images by the running count of boxes_num, so every letter but the channels is
whole: only ``c`` may stay split (Paddle's RoiAlignInferSpmd). The gradient rule
(RoiAlignGradInferSpmd, Paddle's backward slot) merges x's and out_grad's channels likewise;
x_grad follows x.
"""

from __future__ import annotations

from spmdrules.core.errors import RuleArgumentError
from spmdrules.engine.described import register_described
from spmdrules.engine.description import Description, ShapeArg
from spmdrules.engine.registry import A, T

WHOLE = frozenset("nhwropq")


def check_roi(x: ShapeArg, boxes: ShapeArg, boxes_num: ShapeArg) -> None:
    if not isinstance(x, tuple) or len(x) != 4:
        raise RuleArgumentError(f"'x' must be 4-D [N, C, H, W], got shape {x}")
    if not isinstance(boxes, tuple) or len(boxes) != 2 or boxes[1] != 4:
        raise RuleArgumentError(f"'boxes' must be [num_rois, 4] (x1, y1, x2, y2), got {boxes}")
    if boxes_num is not None and (not isinstance(boxes_num, tuple) or len(boxes_num) != 1):
        raise RuleArgumentError(f"'boxes_num' must be 1-D [N], got {boxes_num}")


def describe_roi_align(x: ShapeArg, boxes: ShapeArg, boxes_num: ShapeArg) -> Description:
    check_roi(x, boxes, boxes_num)
    return Description(("nchw", "ro", "n"), ("rcpq",), whole=WHOLE, pending=None)


def describe_roi_align_grad(x: ShapeArg, boxes: ShapeArg, boxes_num: ShapeArg,
                            out_grad: ShapeArg) -> Description:
    check_roi(x, boxes, boxes_num)
    if not isinstance(out_grad, tuple) or len(out_grad) != 4 or out_grad[:2] != (
            boxes[0], x[1]):  # type: ignore[index]
        raise RuleArgumentError(
            f"'out_grad' has shape {out_grad} but out is [num_rois, C, pooled_height, "
            "pooled_width]"
        )
    return Description(("nchw", "ro", "n", "rcpq"), ("nchw",), whole=WHOLE, pending=None)


ROI_ATTRS = [A("pooled_height", "int", 1), A("pooled_width", "int", 1),
             A("spatial_scale", "float", 1.0), A("sampling_ratio", "int", -1),
             A("aligned", "bool", False)]

register_described(
    "roi_align", describe_roi_align, inputs=[T("x"), T("boxes"), T("boxes_num")],
    outputs=[T("out")], attrs=ROI_ATTRS, reverse=False,
    doc="RoiAlignInferSpmd: only the channels stay split.",
)
register_described(
    "roi_align_grad", describe_roi_align_grad,
    inputs=[T("x"), T("boxes"), T("boxes_num"), T("out_grad")], outputs=[T("x_grad")],
    attrs=ROI_ATTRS, reverse=False,
    doc="RoiAlignGradInferSpmd: x's and out_grad's channels merge; x_grad follows x.",
)
