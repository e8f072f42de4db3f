"""``python -m spmdrules.rules --stats``: the share of registered names whose forward and reverse
the engine derives from a Description or a DimTrans, pinned at what the code reaches."""

from __future__ import annotations

import subprocess
import sys

import pytest
from spmdrules.rules.__main__ import main

import spmdrules as sr
from spmdrules.engine import derived
from spmdrules.engine.derived import derivation, shares
from spmdrules.engine.described import register_described
from spmdrules.engine.description import Description, letters
from spmdrules.engine.registry import RULES, T, register_rule

#: (names, derived) per family that this code moved onto descriptions, and the total
PINNED = {
    "elementwise": (98, 97),  # swiglu: with a rank-0 y, the output's shape picks the notation
    "reduction": (20, 17),  # argmax/argmin (a flattened index of either rank), mean_all_grad
    "softmax": (2, 2), "transpose": (2, 2), "norm": (2, 2), "constant": (3, 3),
    "reshape": (6, 6),
    "matmul": (4, 3),  # bmm_grad: it combines three products
    "einsum_op": (2, 1),  # einsum_grad
    "concat_split": (6, 6), "generic": (3, 3), "cross_entropy": (4, 4),
    "pool": (2, 2), "upsample": (2, 2),
    "embedding": (4, 3),  # c_embedding_grad: its table's pending sums and Paddle's echo
}
TOTAL = (225, 203)


def test_the_share_of_derived_names_is_pinned() -> None:
    """Per family in this process; the total in a fresh one (tests and docs register more)."""
    rows, _ = shares()
    by_family = {r.family: (r.names, r.derived) for r in rows}
    assert {f: by_family[f] for f in PINNED} == PINNED
    done = subprocess.run([sys.executable, "-m", "spmdrules.rules", "--stats"],
                          capture_output=True, text=True, check=True, timeout=120)
    total = done.stdout.splitlines()[-1].split()
    assert total[:3] == ["TOTAL", str(TOTAL[0]), str(TOTAL[1])]


def test_only_registrations_without_hand_written_functions_count(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # the scratch ops leave the registry and the derived names as they were (the layering
    # test reads every registered rule's family)
    monkeypatch.setattr(derived, "_DERIVED", dict(derived._DERIVED))
    with RULES.restored():
        _scratch_registrations()


def _scratch_registrations() -> None:
    assert derivation("add") == "description" and derivation("reshape") == "dim_trans"
    assert derivation("matmul") == "description"
    assert derivation("swiglu") is None and derivation("bmm_grad") is None

    def hand_written(x: sr.TensorSpec) -> sr.SpmdInfo:
        return sr.SpmdInfo([x.attr], [x.attr])

    register_rule("test_stats_hand_written", forward=hand_written, inputs=[T("x")],
                  outputs=[T("out")], family="test_stats")
    register_described("test_stats_described", lambda x: Description((letters(len(x)),),
                                                                      (letters(len(x)),)),
                       inputs=[T("x")], outputs=[T("out")], family="test_stats")
    assert derivation("test_stats_hand_written") is None
    assert derivation("test_stats_described") == "description"
    with pytest.raises(sr.UnknownOpError):
        derivation("no_such_op")


def test_the_command_prints_every_family_and_the_total(capsys: pytest.CaptureFixture[str]
                                                       ) -> None:
    assert main(["--stats"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["family", "names", "derived", "share"]
    assert "elementwise" in lines[1 + sorted(r.family for r in shares()[0]).index("elementwise")]
    assert lines[-1].split()[0] == "TOTAL"
    assert main([]) == 2  # without --stats: the help, and a usage exit code
