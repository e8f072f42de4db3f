"""Output files (issue 23, item 3): every command that writes (``complete -o``, ``import -o``,
``example -o``) and ``exchange.dump`` go through one writer, which writes atomically over a
regular file or a new name only, keeps an existing file's mode and gives a new one the umask's.

Each refusal is checked to touch nothing: the target keeps its ``lstat`` (inode, type, mode,
times), a link's target keeps its text, and the folder holds no temporary file."""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Iterator
from pathlib import Path

import onnx
import pytest

from spmdrules import cli, examples
from spmdrules.core.mesh import ProcessMesh
from spmdrules.graph import exchange

MESH = ProcessMesh([[0, 1, 2, 3], [4, 5, 6, 7]], dim_names=["dp", "mp"])
SQUEEZENET = Path(onnx.__file__).parent / "backend/test/data/light/light_squeezenet.onnx"


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("model") / "mlp.json"
    exchange.dump(examples.mlp(MESH), path)
    return path


#: argv of each command that writes a file, for an output path
Command = Callable[[str | Path], list[str]]
COMMANDS: dict[str, Callable[[Path], Command]] = {
    "complete": lambda m: lambda out: ["complete", str(m), "-o", str(out)],
    "import": lambda m: lambda out: ["import", str(SQUEEZENET), "-o", str(out)],
    "example": lambda m: lambda out: ["example", "mlp", "-o", str(out)],
}


@pytest.fixture(params=sorted(COMMANDS))
def command(request: pytest.FixtureRequest, model: Path) -> Command:
    return COMMANDS[request.param](model)


@pytest.fixture
def umask() -> Iterator[Callable[[int], None]]:
    old = os.umask(0o022)
    os.umask(old)
    yield os.umask
    os.umask(old)


def _snapshot(p: Path) -> tuple[int, int, int, int, int]:
    st = os.lstat(p)
    return st.st_ino, st.st_mode, st.st_size, st.st_mtime_ns, st.st_rdev


def _refused(argv: list[str], capsys: pytest.CaptureFixture[str], kind: str) -> None:
    assert cli.main(argv) == 1
    err = capsys.readouterr().err
    assert err.startswith("spmdrules: error: ") and err.count("\n") == 1, err
    assert f"is {kind}, left as it is" in err and "regular file" in err, err


def test_a_symbolic_link_is_refused_and_it_and_its_target_stay(
        tmp_path: Path, command: Command, capsys: pytest.CaptureFixture[str]) -> None:
    target = tmp_path / "target.json"
    target.write_text("the target")
    link = tmp_path / "out.json"
    link.symlink_to(target)
    before = _snapshot(link), _snapshot(target)
    _refused(command(link), capsys, "a symbolic link")
    assert (_snapshot(link), _snapshot(target)) == before
    assert os.readlink(link) == str(target) and target.read_text() == "the target"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.json", "target.json"]


def test_a_dangling_link_is_refused_and_creates_nothing(
        tmp_path: Path, command: Command, capsys: pytest.CaptureFixture[str]) -> None:
    link = tmp_path / "out.json"
    link.symlink_to(tmp_path / "nowhere.json")
    _refused(command(link), capsys, "a symbolic link")
    assert link.is_symlink() and sorted(p.name for p in tmp_path.iterdir()) == ["out.json"]


def test_a_fifo_is_refused_unopened(tmp_path: Path, command: Command,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    fifo = tmp_path / "out.json"
    os.mkfifo(fifo)
    before = _snapshot(fifo)
    _refused(command(fifo), capsys, "a FIFO")  # opening it to write would block: it returned
    assert _snapshot(fifo) == before and stat.S_ISFIFO(os.lstat(fifo).st_mode)
    assert [p.name for p in tmp_path.iterdir()] == ["out.json"]


def test_a_folder_is_refused(tmp_path: Path, command: Command,
                             capsys: pytest.CaptureFixture[str]) -> None:
    folder = tmp_path / "out.json"
    folder.mkdir()
    _refused(command(folder), capsys, "a folder")
    assert folder.is_dir() and not any(folder.iterdir())
    assert cli.main(command(f"{tmp_path / 'new'}/")) == 1  # a trailing slash: a folder
    assert "names a folder" in capsys.readouterr().err
    assert [p.name for p in tmp_path.iterdir()] == ["out.json"]


def test_a_device_is_refused_before_anything_is_opened(
        command: Command, capsys: pytest.CaptureFixture[str]) -> None:
    """/dev/null itself, which only a refusal before any write can leave unharmed: the writer's
    own check runs first (on a spmdrules without it this test stops at the import, before the
    command runs), then the command, with /dev/null's lstat and /dev's listing compared."""
    from spmdrules.core.errors import OutputPathError
    from spmdrules.core.output import check_target

    with pytest.raises(OutputPathError, match="'/dev/null' is a character device"):
        check_target("/dev/null")
    before, listing = _snapshot(Path("/dev/null")), sorted(os.listdir("/dev"))
    _refused(command(Path("/dev/null")), capsys, "a character device")
    assert _snapshot(Path("/dev/null")) == before and sorted(os.listdir("/dev")) == listing


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o600, 0o664], ids=lambda m: f"{m:04o}")
def test_an_existing_file_keeps_its_mode(tmp_path: Path, command: Command, mode: int,
                                         umask: Callable[[int], None],
                                         capsys: pytest.CaptureFixture[str]) -> None:
    umask(0o077)  # the umask does not apply to a file that exists
    out = tmp_path / "out.json"
    out.write_text("the previous file")
    out.chmod(mode)
    assert cli.main(command(out)) == 0, capsys.readouterr().err
    assert stat.S_IMODE(os.lstat(out).st_mode) == mode
    assert exchange.load(out).ops and [p.name for p in tmp_path.iterdir()] == ["out.json"]


@pytest.mark.parametrize(("mask", "mode"), [(0o022, 0o644), (0o077, 0o600), (0o002, 0o664)],
                         ids=["umask022", "umask077", "umask002"])
def test_a_new_file_gets_the_umasks_mode(tmp_path: Path, command: Command, mask: int, mode: int,
                                         umask: Callable[[int], None],
                                         capsys: pytest.CaptureFixture[str]) -> None:
    umask(mask)
    out = tmp_path / "out.json"
    assert cli.main(command(out)) == 0, capsys.readouterr().err
    assert stat.S_IMODE(os.lstat(out).st_mode) == mode and stat.S_ISREG(os.lstat(out).st_mode)
    assert exchange.load(out).ops and [p.name for p in tmp_path.iterdir()] == ["out.json"]


@pytest.mark.skipif(os.geteuid() != 0, reason="only root may give a file to another owner")
def test_root_keeps_an_existing_files_owner(tmp_path: Path) -> None:
    out = tmp_path / "out.json"
    out.write_text("someone else's file")
    os.chown(out, 12345, 23456)
    out.chmod(0o640)
    exchange.dump(examples.mlp(MESH), out)
    st = os.lstat(out)
    assert (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) == (12345, 23456, 0o640)


def test_dump_refuses_what_the_cli_refuses(tmp_path: Path) -> None:
    from spmdrules.core.errors import OutputPathError, SpmdError

    link = tmp_path / "link.json"
    link.symlink_to(tmp_path / "target.json")
    with pytest.raises(OutputPathError, match="is a symbolic link") as e:
        exchange.dump(examples.mlp(MESH), link)
    assert isinstance(e.value, SpmdError) and not (tmp_path / "target.json").exists()


def test_a_missing_folder_names_the_output_not_a_temporary_file(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "no" / "out.json"
    assert cli.main(["example", "mlp", "-o", str(out)]) == 1
    err = capsys.readouterr().err
    assert "No such file or directory" in err and f"'{out}'" in err and ".tmp" not in err


def test_the_data_is_synced_before_the_rename_and_the_folder_after(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from spmdrules.core import output

    calls: list[tuple[str, str]] = []
    fsync, replace = os.fsync, os.replace

    def record_fsync(fd: int) -> None:
        calls.append(("fsync", os.readlink(f"/proc/self/fd/{fd}")))
        fsync(fd)

    def record_replace(src: Path, dst: Path) -> None:
        calls.append(("replace", f"{Path(src).parent}"))
        replace(src, dst)

    monkeypatch.setattr(output.os, "fsync", record_fsync)
    monkeypatch.setattr(output.os, "replace", record_replace)
    output.write_text(tmp_path / "out.json", "{}")
    [(f, tmp), (r, beside), (d, folder)] = calls
    assert (f, r, d) == ("fsync", "replace", "fsync")
    assert Path(tmp).name.startswith(".out.json.") and Path(tmp).parent == tmp_path
    assert beside == folder == str(tmp_path)
    assert (tmp_path / "out.json").read_text() == "{}"
