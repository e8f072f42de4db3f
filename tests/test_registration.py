"""One registration: every op table refuses a taken name with one error, and ``register_op``
fills every layer's table for an op, or none of them.

Registrations that succeed run in a process of their own (the suite's process keeps the
package's tables as they are); the refusals run here, since a refused registration writes
nothing.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import spmdrules as sr
from spmdrules.engine.description import Description
from spmdrules.engine.registry import T, register_rule
from spmdrules.execution.adjoint import register_reverse
from spmdrules.execution.halo import HALO_OPS, register_windows
from spmdrules.execution.local import register_kernel, register_vjp
from spmdrules.execution.lowering import register_lowering
from spmdrules.execution.single_op import COLLECTIVES
from spmdrules.graph.shapes import shape_rule
from spmdrules.graph.shapes.shape_rule import SHAPE_RULES
from spmdrules.importers.converters import aten_converter, onnx_converter
from spmdrules.plan.chunks import WEIGHT_USES, register_weight_use
from spmdrules.verify.cases.case import FAMILIES, register_cases

HERE = Path(__file__).name


def _nothing(*args: Any, **kwargs: Any) -> Any:
    raise AssertionError("a refused registration never runs what it registers")


def _same(x: sr.TensorSpec) -> sr.SpmdInfo:
    return sr.SpmdInfo([x.attr], [x.attr])


#: (table, op, where its first entry was registered, a second registration)
SECOND: list[tuple[str, str, str, Callable[[], object]]] = [
    ("rule", "relu", "rules/elementwise.py",
     lambda: register_rule("relu", forward=_same, inputs=[T("x")], outputs=[T("out")])),
    ("shape rule", "softmax", "graph/shapes/softmax.py",
     lambda: shape_rule.register(("softmax",), _nothing, shape_rule.same_dtype)),
    ("kernel", "matmul", "execution/kernels/matmul.py", lambda: register_kernel("matmul")(_nothing)),
    ("VJP", "cumsum", "execution/vjp/cumulative.py", lambda: register_vjp("cumsum")(_nothing)),
    ("verify case generator", "softmax", "verify/cases/softmax.py",
     lambda: register_cases(_nothing, family="softmax")),
    ("lowering hook", "softmax_with_cross_entropy", "execution/lowering.py",
     lambda: register_lowering(("softmax_with_cross_entropy",), _nothing)),
    ("reverse lowering hook", "c_softmax_with_cross_entropy", "execution/adjoint.py",
     lambda: register_reverse(("c_softmax_with_cross_entropy",), _nothing)),
    ("halo window", "conv2d", "graph/halo_windows.py",
     lambda: register_windows(("conv2d",), HALO_OPS["pool2d"])),
    ("plan weight use", "bmm", "plan/chunks.py",
     lambda: register_weight_use(("bmm",), WEIGHT_USES["matmul"])),
    ("in-op collective", "cross_entropy_with_softmax", "execution/single_op.py",
     lambda: COLLECTIVES.add("cross_entropy_with_softmax", COLLECTIVES["cross_entropy_with_softmax"])),
    ("converter", "Relu", "spmdrules.importers.onnx_ops", lambda: onnx_converter("Relu")),
    ("converter", "gather.default", "spmdrules.importers.aten_indexing",
     lambda: aten_converter("aten::gather")),
]


@pytest.mark.parametrize(("table", "op", "first", "second"), SECOND,
                         ids=[f"{t}:{o}" for t, o, _, _ in SECOND])
def test_every_table_refuses_a_taken_name_with_one_error(
        table: str, op: str, first: str, second: Callable[[], object]) -> None:
    with pytest.raises(sr.DuplicateRegistrationError) as err:
        second()
    e = err.value
    assert (e.op, e.table) == (op, table)
    assert first in e.first, e.first
    assert HERE in e.second, e.second  # this file, the line of the second registration
    assert str(e).startswith(f"{op!r}: a {table} is already registered for it, at ")


def _spec(name: str, **fields: Any) -> sr.OpSpec:
    return sr.OpSpec(name, inputs=[T("x")], outputs=[T("out")], shape=_nothing,
                     describe=lambda x: Description.of("ab->ab"), **fields)


def test_register_op_checks_every_table_before_it_writes_any() -> None:
    # a new name, but a family whose case generator is taken: nothing of it is registered
    spec = _spec("plugin_half_op", family="softmax", kernel=_nothing, cases=_nothing)
    with pytest.raises(sr.DuplicateRegistrationError, match="'softmax': a verify case generator"):
        sr.register_op(spec)
    assert "plugin_half_op" not in sr.list_rules()
    assert "plugin_half_op" not in SHAPE_RULES
    assert FAMILIES["softmax"].__module__ == "spmdrules.verify.cases.softmax"
    with pytest.raises(sr.UnknownOpError):
        sr.get_rule("plugin_half_op")


@pytest.mark.parametrize(("fields", "error"), [
    ({"name": "two words"}, "an op name is a Python identifier"),
    ({"describe": None}, "give its rule once"),
    ({"forward": _same}, "give its rule once"),
    ({"reverse": _same}, "a described op derives its reverse rule"),
    ({"kernel": 3}, "kernel= must be callable, got int"),
    ({"vjp": _nothing}, "a VJP without a kernel cannot run"),
    ({"windows": _nothing}, "windows= must be a HaloWindows, got function"),
])
def test_a_spec_that_cannot_be_registered_is_refused(fields: dict[str, Any], error: str) -> None:
    base: dict[str, Any] = {"name": "plugin_bad_op", "inputs": [T("x")], "outputs": [T("out")],
                            "shape": _nothing, "describe": lambda x: Description.of("ab->ab")}
    with pytest.raises(sr.OpSpecError, match=error):
        sr.OpSpec(**{**base, **fields})
    with pytest.raises(sr.OpSpecError, match="expected an OpSpec, got dict"):
        sr.register_op(base)  # type: ignore[arg-type]


_EVERY_HOOK = """
import spmdrules as sr
from spmdrules.engine.description import Description
from spmdrules.engine.registry import A, T
from spmdrules.execution import adjoint, halo, lowering, single_op
from spmdrules.execution.local import get_kernel, get_vjp
from spmdrules.graph.shapes.shape_rule import SHAPE_RULES
from spmdrules.plan.chunks import WEIGHT_USES
from spmdrules.verify.cases.case import FAMILIES

def hook(*args, **kwargs):
    return False

rule = sr.register_op(sr.OpSpec(
    "plugin_op", inputs=[T("x"), T("w")], outputs=[T("out")], aliases=["plugin_op_v2"],
    attrs=[A("scale", "float", 1.0)], describe=lambda x, w, **_: Description.of("mk,kn->mn"),
    shape=lambda ctx, args, attrs: ((args[0].shape[0], args[1].shape[1]),), kernel=hook,
    vjp=hook, cases=hook, lowering=hook, lowering_reverse=hook,
    collective=single_op.COLLECTIVES["cross_entropy_with_softmax"],
    windows=halo.HALO_OPS["pool2d"], weight_use=WEIGHT_USES["matmul"],
    onnx={"mydomain.PluginOp": hook}, family="plugin_family"))
import spmdrules.importers.onnx_ops as onnx_ops
tables = [sr.get_rule("plugin_op_v2") is rule, SHAPE_RULES["plugin_op_v2"].family,
          get_kernel("plugin_op") is hook, get_vjp("plugin_op_v2") is hook,
          FAMILIES["plugin_family"] is hook, lowering.LOWERINGS["plugin_op"] is hook,
          adjoint.REVERSE_LOWERINGS["plugin_op"] is hook, "plugin_op_v2" in single_op.COLLECTIVES,
          "plugin_op" in halo.HALO_OPS, "plugin_op_v2" in WEIGHT_USES,
          "mydomain.PluginOp" in onnx_ops.OPS, rule.family]
print(tables)
print(lowering.LOWERINGS.origin("plugin_op"))
print(rule.infer_forward(
    sr.TensorSpec([4, 6], sr.DistAttr(sr.ProcessMesh([0, 1]), [0, -1])),
    sr.TensorSpec([6, 8], sr.DistAttr(sr.ProcessMesh([0, 1]), [-1, -1]))).outputs[0].dims_mapping)
"""


def test_register_op_fills_every_layer_s_table(tmp_path: Path) -> None:
    script = tmp_path / "every_hook.py"
    script.write_text(_EVERY_HOOK)
    run = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                         timeout=300, cwd=tmp_path)
    assert run.returncode == 0, run.stderr[-3000:]
    tables, origin, mapping = run.stdout.splitlines()
    assert tables == str([True, "plugin_family", *[True] * 9, "plugin_family"])
    assert origin.startswith(f"{script}:")  # the line of the register_op call
    assert mapping == "(0, -1)"


def test_the_package_s_tables_stay_closed_to_plain_writes() -> None:
    with pytest.raises(TypeError):
        SHAPE_RULES["softmax"] = SHAPE_RULES["softmax"]  # type: ignore[index]
