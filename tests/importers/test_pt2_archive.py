"""A crafted .pt2 file never runs code on import: every entry torch 2.13's loader would unpickle
or load as code is refused, naming the entry, before torch reads the archive (issue 23)."""

from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch", reason="needs the torch extra (make test installs it)")

from pt2_archives import CASES, Case, craft, legacy_format, save_model  # noqa: E402

from spmdrules.cli import main  # noqa: E402
from spmdrules.core.errors import SpmdError  # noqa: E402
from spmdrules.importers import sources  # noqa: E402
from spmdrules.importers.errors import ImporterError, UnsafeArchiveError  # noqa: E402


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_an_entry_torch_would_unpickle_is_refused_by_name(case: Case, tmp_path: Path) -> None:
    marker = tmp_path / "created_by_the_archive"
    path = craft(torch, case, tmp_path, marker)
    with pytest.raises(UnsafeArchiveError) as e:
        sources.read(path)
    assert not marker.exists()
    assert isinstance(e.value, ImporterError) and isinstance(e.value, SpmdError)
    assert e.value.entry == case.entry
    assert f"crafted.pt2: entry {case.entry!r} " in str(e.value)
    assert "never unpickles a model file" in str(e.value)


def test_spmdrules_import_refuses_the_audits_archive_in_one_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    marker = tmp_path / "created_by_the_archive"
    path = craft(torch, CASES[0], tmp_path, marker)
    assert main(["import", str(path), "-o", str(tmp_path / "out.json")]) == 1
    assert not marker.exists() and not (tmp_path / "out.json").exists()
    err = capsys.readouterr().err.strip()
    assert err.startswith("spmdrules: error: crafted.pt2: entry 'data/weights/weight_0' holds "
                          "weight 'fc.weight' pickled") and "\n" not in err


def test_the_older_pickled_format_is_not_read(tmp_path: Path) -> None:
    marker = tmp_path / "created_by_the_archive"
    path = legacy_format(torch, tmp_path, marker)
    with pytest.raises(ImporterError, match=r"older pickled format of torch\.export\.save is "
                                            r"not read"):
        sources.read(path)
    assert not marker.exists()


def test_a_saved_model_still_reads(tmp_path: Path) -> None:
    g = sources.read(save_model(torch, tmp_path / "clean.pt2"))
    assert {t.name for t in g.params} == {"fc.weight", "fc.bias", "shift", "constant.lifted_tensor_0"}


def test_a_file_that_cannot_be_read_is_a_typed_error(tmp_path: Path) -> None:
    (tmp_path / "folder.pt2").mkdir()
    with pytest.raises(ImporterError, match=r"folder\.pt2: cannot be read"):
        sources.read(tmp_path / "folder.pt2")
    (tmp_path / "text.pt2").write_text("not a zip")
    with pytest.raises(ImporterError, match=r"text\.pt2: not a PT2 archive"):
        sources.read(tmp_path / "text.pt2")
