"""Input files read safely (a FIFO, device or odd name is an error, not a hang) and atomic writes: a reader sees
the old file or the new one, never half of either."""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import tempfile
from pathlib import Path
from typing import BinaryIO

from quotacalc.errors import QuotacalcError, UsageError


def open_regular(path: str | Path, *, what: str) -> BinaryIO:
    """A regular file opened for binary reading. A missing file, a FIFO, device or directory, or a name no file can
    have (too long, a NUL byte, a loop of links) is a one-line error naming the path, never a hang or a traceback."""
    source = str(path)
    try:
        # O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer forever.
        descriptor = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except FileNotFoundError:
        raise UsageError("no such file", source=source, fix=f"check the path to the {what}") from None
    except ValueError:  # a NUL byte: no file has such a name
        raise UsageError(
            "is not a file name (it holds a NUL byte)", source=source, fix=f"give the {what}'s path"
        ) from None
    except OSError as error:
        # A path that cannot be reached or opened is the command line's problem (exit 2), as a missing one is; a file
        # read but invalid is the input's (exit 1).
        denied = error.errno in (errno.EACCES, errno.EPERM)
        usage = denied or error.errno in (errno.ENAMETOOLONG, errno.ELOOP, errno.ENOTDIR, errno.EISDIR)
        raise (UsageError if usage else QuotacalcError)(
            f"cannot read: {error.strerror or error}",
            source=source,
            fix=f"make the {what} readable by this user, or give a copy that is" if denied else None,
        ) from None
    mode = os.fstat(descriptor).st_mode
    if not stat.S_ISREG(mode):
        os.close(descriptor)
        kind = "a directory" if stat.S_ISDIR(mode) else "not a regular file (a FIFO, device or socket)"
        raise UsageError(f"is {kind}", source=source, fix=f"give the path to the {what}")
    return os.fdopen(descriptor, "rb")


def read_regular_bytes(path: str | Path, *, what: str, limit: int) -> bytes:
    """A regular file's bytes (``open_regular``), refused past ``limit`` bytes before more is read."""
    with open_regular(path, what=what) as handle:
        try:
            data = handle.read(limit + 1)
        except OSError as error:
            raise QuotacalcError(f"cannot read: {error.strerror or error}", source=str(path)) from None
    if len(data) > limit:
        size = f"{limit // 2**20} MiB" if limit >= 2**20 else f"{limit:,} bytes"
        raise QuotacalcError(f"is larger than {size}; a {what} is not that large", source=str(path))
    return data


def unwritable(error: OSError, place: str | Path, *, field: str, outcome: str = "") -> QuotacalcError:
    """The one-line error for output that could not be written: where (the file the system names, else
    ``place``), why, and a fix that fits (a full disk is not a permissions problem). ``outcome``: what the
    failure left, e.g. "; nothing was changed"."""
    full = error.errno in (errno.ENOSPC, errno.EDQUOT)
    return QuotacalcError(
        f"cannot write there: {error.strerror or error}{outcome}",
        source=str(error.filename or place),
        field=field,
        fix=f"free space on that file system, or choose another {field}"
        if full
        else "choose a directory you can write",
    )


def _default_mode(path: Path) -> int:
    """What a plain ``open(path, "w")`` would leave: an existing file keeps its permissions, a new
    one gets 0o666 less the umask (``mkstemp`` alone would make every file owner-only)."""
    try:
        return stat.S_IMODE(path.stat().st_mode)
    except FileNotFoundError:
        umask = os.umask(0)
        os.umask(umask)
        return 0o666 & ~umask


def write_bytes_atomic(path: Path, data: bytes, *, mode: int | None = None) -> None:
    """Write ``data`` to ``path`` via a temporary file in the same directory and an atomic rename.

    ``mode``: the file's permissions (e.g. 0o600 for secrets), set before the rename so the file is
    never readable by others, even for a moment; default: an existing file's, else 0o666 less the umask.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    final_mode = _default_mode(path) if mode is None else mode
    descriptor, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(descriptor, final_mode)
        with os.fdopen(descriptor, "wb") as handle:
            handle.write(data)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def write_text_atomic(path: Path, text: str, *, mode: int | None = None) -> None:
    """``write_bytes_atomic`` of ``text`` as UTF-8, newlines as given (the same bytes on every platform)."""
    write_bytes_atomic(path, text.encode("utf-8"), mode=mode)


_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_DIRECTORY = getattr(os, "O_DIRECTORY", 0)
_NONBLOCK = getattr(os, "O_NONBLOCK", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
#: What opening a link with O_NOFOLLOW raises: ELOOP (Linux, macOS), EMLINK (FreeBSD), EFTYPE (NetBSD).
_LINK_ERRNOS = {errno.ELOOP, errno.EMLINK, getattr(errno, "EFTYPE", errno.ELOOP)}


class NotPlainFile(Exception):
    """A path inside a confined folder that is not a plain file: a link, FIFO, device, folder, or one too large."""


class ConfinedDir:
    """A folder given on the command line, and every path under it reached one name at a time from the folder's own
    descriptor, each folder opened with O_NOFOLLOW and each file with O_NOFOLLOW and O_NONBLOCK.

    A symbolic link planted inside the folder (by whoever can write it: a repository that CI runs quotacalc in) is
    refused, never followed, so nothing written, removed, read back or printed resolves outside the folder; and a
    link swapped in after a check cannot redirect an operation already holding the folder's descriptor. The folder
    itself is opened as given: a link the user names is the user's choice.

    ``field`` (``--out``) and ``contents`` ("the generated files") word the one-line refusals; ``outcome`` is what a
    refusal left ("nothing was written").
    """

    def __init__(self, root: Path, *, field: str, contents: str, outcome: str) -> None:
        self.root = Path(root)
        self.field = field
        self.contents = contents
        self.outcome = outcome
        self._descriptors: dict[tuple[str, ...], int] = {}
        #: Folders this run made, outermost first: the folder's own missing parents, then folders inside it.
        self.made: list[Path] = []

    def __enter__(self) -> ConfinedDir:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        for descriptor in self._descriptors.values():
            os.close(descriptor)
        self._descriptors.clear()

    @staticmethod
    def parts(relative: str) -> tuple[str, ...]:
        return tuple(part for part in relative.split("/") if part)

    def _refusal(self, parts: tuple[str, ...], parent: int) -> QuotacalcError:
        place = str(self.root.joinpath(*parts))
        try:
            is_link = stat.S_ISLNK(os.stat(parts[-1], dir_fd=parent, follow_symlinks=False).st_mode)
        except OSError:
            is_link = False
        if is_link:
            return QuotacalcError(
                f"is a symbolic link where a directory of {self.contents} goes (quotacalc follows no link inside "
                f"{self.field}); {self.outcome}",
                source=place,
                field=self.field,
                fix=f"replace the link with a plain directory, or choose another {self.field}",
            )
        return QuotacalcError(
            f"is a file where a directory of {self.contents} goes; {self.outcome}",
            source=place,
            field=self.field,
            fix=f"choose another {self.field}, or move the file away",
        )

    def _open_root(self, *, create: bool) -> int | None:
        if create and not self.root.is_dir():
            for folder in reversed([self.root, *self.root.parents]):  # mkdir -p, remembering what it made
                if not folder.exists():
                    try:
                        folder.mkdir()
                    except FileExistsError:  # made by a run beside this one
                        continue
                    self.made.append(folder)
        try:
            descriptor = os.open(self.root, os.O_RDONLY | _DIRECTORY | _CLOEXEC)
        except FileNotFoundError:
            return None
        except NotADirectoryError:
            if not self.root.exists():  # a file above it: nothing there yet, as for a missing folder
                return None
            raise UsageError(
                "is not a directory", source=str(self.root), field=self.field, fix="name a directory"
            ) from None
        self._descriptors[()] = descriptor
        return descriptor

    def directory(self, parts: tuple[str, ...], *, create: bool = False) -> int | None:
        """The descriptor of the folder ``parts`` below the root (made when ``create``), None when it is absent."""
        if parts in self._descriptors:
            return self._descriptors[parts]
        if not parts:
            return self._open_root(create=create)
        parent = self.directory(parts[:-1], create=create)
        if parent is None:
            return None
        flags = os.O_RDONLY | _DIRECTORY | _NOFOLLOW | _CLOEXEC
        try:
            descriptor = os.open(parts[-1], flags, dir_fd=parent)
        except FileNotFoundError:
            if not create:
                return None
            os.mkdir(parts[-1], 0o777, dir_fd=parent)
            self.made.append(self.root.joinpath(*parts))
            descriptor = os.open(parts[-1], flags, dir_fd=parent)
        except OSError as error:
            if error.errno in _LINK_ERRNOS or error.errno == errno.ENOTDIR:
                raise self._refusal(parts, parent) from None
            raise
        self._descriptors[parts] = descriptor
        return descriptor

    def lock(self, *, exclusive: bool, wait_s: float, doing: str) -> None:
        """Hold the folder for this run: ``exclusive`` for one that writes, shared for one that only reads. The lock
        is the kernel's (flock) on the folder itself, so it leaves no file behind, and a run that dies releases it.
        A folder held past ``wait_s`` seconds is a one-line error (``doing``: what the other run is doing)."""
        try:
            import fcntl
        except ImportError:  # no flock on this platform: runs are not serialised
            return
        import time

        descriptor = self.directory(())
        if descriptor is None:
            return
        mode = (fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH) | fcntl.LOCK_NB
        deadline = time.monotonic() + wait_s
        while True:
            try:
                fcntl.flock(descriptor, mode)
                return
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise QuotacalcError(
                        f"another quotacalc run is {doing} this folder (waited {wait_s:g} s); {self.outcome}",
                        source=str(self.root),
                        field=self.field,
                        fix=f"run again when it is done, or give each run its own {self.field}",
                    ) from None
                time.sleep(0.05)
            except OSError:  # a file system without locks (some network mounts): runs are not serialised
                return

    def _place(self, relative: str, *, create: bool = False) -> tuple[int | None, str]:
        *folders, name = self.parts(relative)
        return self.directory(tuple(folders), create=create), name

    def lstat(self, relative: str) -> os.stat_result | None:
        """The entry at ``relative`` itself (a link is not followed), None when absent."""
        folder, name = self._place(relative)
        if folder is None:
            return None
        try:
            return os.stat(name, dir_fd=folder, follow_symlinks=False)
        except FileNotFoundError:
            return None

    def read(self, relative: str, *, limit: int) -> tuple[bytes, int] | None:
        """(bytes, permission bits) of the plain file at ``relative``, None when absent. A link, FIFO, device or
        folder there, or a file over ``limit`` bytes, raises :class:`NotPlainFile` without reading it."""
        folder, name = self._place(relative)
        if folder is None:
            return None
        try:
            descriptor = os.open(name, os.O_RDONLY | _NOFOLLOW | _NONBLOCK | _CLOEXEC, dir_fd=folder)
        except FileNotFoundError:
            return None
        except OSError as error:
            if error.errno in _LINK_ERRNOS:
                raise NotPlainFile("a symbolic link") from None
            raise
        with os.fdopen(descriptor, "rb") as handle:
            status = os.fstat(descriptor)
            if not stat.S_ISREG(status.st_mode):
                raise NotPlainFile("not a regular file")
            if status.st_size > limit:
                raise NotPlainFile(f"larger than {limit:,} bytes")
            data = handle.read(limit + 1)  # and a file growing while it is read stops here
        if len(data) > limit:
            raise NotPlainFile(f"larger than {limit:,} bytes")
        return data, stat.S_IMODE(status.st_mode)

    def stage(self, relative: str, data: bytes, mode: int) -> str:
        """Write ``data`` to a new temporary file beside ``relative`` (its folders made), with ``mode`` set before
        any byte is written; the temporary file's name. ``replace`` then moves it into place."""
        import secrets

        folder, name = self._place(relative, create=True)
        assert folder is not None
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW | _CLOEXEC
        while True:
            temporary = f".{name}.{secrets.token_hex(4)}.tmp"
            try:
                descriptor = os.open(temporary, flags, 0o600, dir_fd=folder)
                break
            except FileExistsError:
                continue
        try:
            os.fchmod(descriptor, mode)
            with os.fdopen(descriptor, "wb") as handle:
                handle.write(data)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(temporary, dir_fd=folder)
            raise
        return temporary

    def replace(self, temporary: str, relative: str) -> None:
        """Move a staged file into place (atomic: a reader sees the old file or the new, never a mix). A link at
        ``relative`` is replaced, never followed."""
        folder, name = self._place(relative)
        os.replace(temporary, name, src_dir_fd=folder, dst_dir_fd=folder)

    def discard(self, temporary: str, relative: str) -> None:
        folder, _ = self._place(relative)
        if folder is not None:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(temporary, dir_fd=folder)

    def unlink(self, relative: str) -> None:
        """Remove the entry at ``relative`` (a link itself, never what it points to)."""
        folder, name = self._place(relative)
        if folder is not None:
            os.unlink(name, dir_fd=folder)

    def remove_empty_parents(self, relative: str) -> None:
        """Remove the folders above ``relative`` inside the root that are left empty (the root stays)."""
        folders = self.parts(relative)[:-1]
        while folders:
            parent = self.directory(folders[:-1])
            if parent is None:
                return
            try:
                os.rmdir(folders[-1], dir_fd=parent)
            except OSError:
                return
            descriptor = self._descriptors.pop(folders, None)
            if descriptor is not None:
                os.close(descriptor)
            folders = folders[:-1]

    def remove_made(self) -> None:
        """Remove the folders this run made (innermost first), where they are still empty."""
        self.close()
        for folder in reversed(self.made):
            with contextlib.suppress(OSError):
                folder.rmdir()
        self.made.clear()
