"""Progress bars for long passes (import, decomposition, completion, lowering): shown on a
terminal for graphs past ``THRESHOLD`` ops, never in a pipe or log unless asked, and off with
``SPMDRULES_PROGRESS=0`` or the CLI's ``--no-progress`` (issue 26, item 7)."""

from __future__ import annotations

import io
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import spmdrules as sr
from spmdrules.cli import main
from spmdrules.completion import complete
from spmdrules.core import progress
from spmdrules.execution.lowering import lower
from spmdrules.graph import examples
from spmdrules.graph.graph import Graph


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.fixture
def small_threshold(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Bars from 10 items, so a test graph of a few dozen ops counts as long."""
    monkeypatch.setattr(progress, "THRESHOLD", 10)
    monkeypatch.delenv("SPMDRULES_PROGRESS", raising=False)
    yield
    progress.enabled(None)


def test_when_a_bar_is_shown(small_threshold: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "stderr", io.StringIO())
    assert not progress.shown(10_000)  # not a terminal
    monkeypatch.setattr(sys, "stderr", Terminal())
    assert progress.shown(10) and not progress.shown(9)
    monkeypatch.setenv("SPMDRULES_PROGRESS", "0")
    assert not progress.shown(10_000)
    monkeypatch.setenv("SPMDRULES_PROGRESS", "1")
    monkeypatch.setattr(sys, "stderr", io.StringIO())
    assert progress.shown(10_000)
    progress.enabled(False)
    assert not progress.shown(10_000)


def _gpt() -> Graph:
    return examples.gpt_decoder(2, sr.ProcessMesh([[0, 1], [2, 3]], dim_names=["dp", "mp"]))


def test_completion_and_lowering_show_bars_on_a_terminal(
        small_threshold: None, monkeypatch: pytest.MonkeyPatch) -> None:
    err = Terminal()
    monkeypatch.setattr(sys, "stderr", err)
    lower(complete(_gpt()))
    text = err.getvalue()
    assert "complete (" in text and "ops)" in text
    assert "lower:" in text and "/51 " in text


def test_no_bar_in_a_pipe(small_threshold: None, monkeypatch: pytest.MonkeyPatch) -> None:
    err = io.StringIO()
    monkeypatch.setattr(sys, "stderr", err)
    lower(complete(_gpt()))
    assert err.getvalue() == ""


torch = pytest.importorskip("torch", reason="needs the torch extra (make test installs it)")


def _pt2(tmp_path: Path) -> Path:
    layers = [torch.nn.Linear(8, 8) if i % 2 == 0 else torch.nn.ReLU() for i in range(12)]
    src = tmp_path / "deep.pt2"
    torch.export.save(torch.export.export(torch.nn.Sequential(*layers), (torch.randn(2, 8),)),
                      str(src))
    return src


def test_the_import_shows_its_decomposition_and_mapping(
        small_threshold: None, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    src = _pt2(tmp_path)
    err = Terminal()
    monkeypatch.setattr(sys, "stderr", err)
    assert main(["import", str(src), "-o", str(tmp_path / "o.json")]) == 0
    text = err.getvalue()
    assert "decompose (" in text and "nodes)" in text
    assert "import:" in text and "/26 " in text


def test_no_progress_turns_them_off(small_threshold: None, monkeypatch: pytest.MonkeyPatch,
                                    tmp_path: Path) -> None:
    src = _pt2(tmp_path)
    err = Terminal()
    monkeypatch.setattr(sys, "stderr", err)
    monkeypatch.setenv("SPMDRULES_PROGRESS", "1")
    assert main(["import", str(src), "--no-progress", "-o", str(tmp_path / "o.json")]) == 0
    assert err.getvalue() == ""
