"""The local kernels of the generic rules (default_data_parallel, default_, replicated)
(spmdrules/execution/kernels/generic.py), proven by execution with the harness in
tests/support/kernel_harness.py."""

from __future__ import annotations

import numpy as np
import pytest
from kernel_harness import (
    Op,
    _x,
    check_serial,
    check_sharded,
    mesh_of,
)

from spmdrules.core.attr import DistAttr
from spmdrules.core.errors import UnsupportedError


@pytest.mark.parametrize("name", ["default_data_parallel", "default_", "replicated"])
def test_generic_rules_run_the_row_wise_identity(name: str) -> None:
    ins = [_x(8, 3), _x(8), _x(5, 2)]
    op = Op(name, [ins], outs=[(8, 3), (8,)])
    want = ([ins[0], ins[1]],)
    check_serial(op, want, exact=True)
    assert check_sharded(op, want, exact=True, seed=8) > 0


def test_generic_rules_refuse_an_output_without_its_input() -> None:
    mesh = mesh_of((2,))
    op = Op("replicated", [[_x(4, 3)]], outs=[(4, 3), (4,)])
    a = DistAttr(mesh, [-1, -1])
    with pytest.raises(UnsupportedError, match=r"outs\[1\].*no ins\[1\]"):
        op.run([[a]], [(a, DistAttr(mesh, [-1]))], np.random.default_rng(0))

