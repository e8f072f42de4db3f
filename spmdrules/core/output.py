"""Writing an output file (``spmdrules complete -o``, ``import -o``, ``example -o``,
``graph.exchange.dump``): one writer, so that every command treats its target alike.

* Only a regular file, or a name that does not exist yet, is written. A symbolic link, a folder,
  a FIFO, a device or a socket is refused with an ``OutputPathError`` before anything is created
  or opened: replacing ``/dev/null`` or a link with a regular file would break what the name
  stood for, and writing through a link or into a FIFO would not be atomic.
* The write is atomic: a temporary file beside the target (so the rename stays on one file
  system), written and ``fsync``-ed, then renamed over the target, and the folder ``fsync``-ed.
  A failed write leaves the previous file as it was and no temporary file behind.
* A file that existed keeps its permission bits and, where the process may set them, its owner
  and group. A new file gets the mode the umask gives (0644 under umask 022): the temporary file
  is created with mode 0666 and the kernel applies the umask (or the folder's default ACL).

The target is checked again just before the rename, so the window in which another process
could put a link or a device in its place is the rename itself; a rename over a link replaces
the link, never what it points to.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import stat
from pathlib import Path

from spmdrules.core.errors import OutputPathError

#: what a name that is not a regular file is, for the message
_KINDS = ((stat.S_ISLNK, "a symbolic link"), (stat.S_ISDIR, "a folder"),
          (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))
_CREATE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
#: how many temporary names to try before giving up (tempfile's TMP_MAX is 10,000; names are
#: 64 random bits, so a second try is already a sign of something odd)
_TRIES = 100


def check_target(path: str | os.PathLike[str]) -> os.stat_result | None:
    """The target's ``lstat``, or None when it does not exist; ``OutputPathError`` when it is
    anything but a regular file. Commands call it before their work, to fail early."""
    if os.fspath(path).endswith(os.sep):
        raise OutputPathError(f"{os.fspath(path)!r} ends with {os.sep!r}, so it names a folder; "
                              "give the path of a file to write")
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    if not stat.S_ISREG(st.st_mode):
        kind = next((k for test, k in _KINDS if test(st.st_mode)), "not a regular file")
        raise OutputPathError(
            f"{os.fspath(path)!r} is {kind}, left as it is: spmdrules writes only over a "
            "regular file or a new name; give the path of a file to write")
    return st


def write_text(path: str | os.PathLike[str], text: str) -> None:
    """Write ``text`` (UTF-8) to ``path`` atomically; see the module docs."""
    before = check_target(path)
    p = Path(path)
    data = text.encode("utf-8")
    fd, tmp = _create_beside(p)
    try:
        with os.fdopen(fd, "wb") as f:
            if before is not None:
                _keep_owner_and_mode(f.fileno(), before)
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        check_target(p)
        os.replace(tmp, p)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    _sync_folder(p.parent)


def _create_beside(p: Path) -> tuple[int, Path]:
    """A new, empty temporary file in ``p``'s folder, made with mode 0666 less the umask."""
    for _ in range(_TRIES):
        tmp = p.with_name(f".{p.name[:200]}.{secrets.token_hex(8)}.tmp")
        try:
            return os.open(tmp, _CREATE, 0o666), tmp
        except FileExistsError:
            continue
        except OSError as e:  # name the target, not the temporary file
            raise OSError(e.errno, e.strerror, os.fspath(p)) from e
    raise FileExistsError(f"{os.fspath(p)!r}: {_TRIES} temporary names beside it were taken")


def _keep_owner_and_mode(fd: int, before: os.stat_result) -> None:
    # the owner first: a change of owner clears the set-id bits, which the mode then restores
    mine = os.fstat(fd)
    if (mine.st_uid, mine.st_gid) != (before.st_uid, before.st_gid):
        with contextlib.suppress(PermissionError):  # only root may give a file away
            os.fchown(fd, before.st_uid, before.st_gid)
    os.fchmod(fd, stat.S_IMODE(before.st_mode))


def _sync_folder(folder: Path) -> None:
    """Make the rename durable. Some file systems cannot fsync a folder (EINVAL); the file's own
    data is already on disk then, and the rename is as durable as that file system makes it."""
    try:
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
