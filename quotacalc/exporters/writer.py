"""Writing generated files into an output directory without losing anything, or diffing them (``--check``).

quotacalc keeps a manifest (``.quotacalc-manifest.json``) of the files it wrote, with their sha256:
- a file in the directory that is not in the manifest is never overwritten or removed (an error names it);
- a file in the manifest whose content changed since (a hand edit) is not overwritten or removed either;
- a file quotacalc wrote before and no longer generates is removed;
- every write is atomic, files holding salts are owner-only (0600), others 0644.
All checks run before the first write, so a refused run writes nothing.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import stat
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path, PurePosixPath
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from quotacalc.errors import QuotacalcError, UsageError
from quotacalc.exporters.base import GeneratedFile
from quotacalc.fileio import unwritable

MANIFEST = ".quotacalc-manifest.json"
MANIFEST_VERSION = 1
SECRET_MODE = 0o600
PUBLIC_MODE = 0o644

Status = Literal["created", "updated", "permissions", "unchanged", "removed", "foreign", "edited"]


class FileChange(BaseModel):
    """What happened (or, with --check, would happen) to one file."""

    model_config = ConfigDict(frozen=True)

    path: str
    status: Status
    secret: bool = False
    sha256: str | None = None


class WriteReport(BaseModel):
    """The result of writing or checking an output directory."""

    model_config = ConfigDict(frozen=True)

    out_dir: str
    check: bool
    changes: tuple[FileChange, ...]
    diff: str = ""

    @property
    def drift(self) -> bool:
        """The directory's contents differ from what would be generated.

        Permissions alone are not drift: a checkout sets its own (git keeps no 0600), and ``generate``
        restores them; ``--check`` notes them.
        """
        return any(change.status not in ("unchanged", "permissions") for change in self.changes)


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _safe_relative(path: str) -> str:
    pure = PurePosixPath(path)
    if pure.is_absolute() or not pure.parts or any(part in ("", ".", "..") for part in pure.parts) or "\\" in path:
        raise ValueError(f"generated path {path!r} is not a plain relative path")
    return str(pure)


class ManifestEntry(BaseModel):
    """What quotacalc wrote at one path."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    sha256: str
    secret: bool = False
    target: str = ""
    previous: str | None = Field(None, description="while a run is under way: the content it replaces")

    def accepts(self, digest: str) -> bool:
        return digest in (self.sha256, self.previous)


def _read_manifest(out_dir: Path) -> dict[str, ManifestEntry]:
    """path -> what quotacalc wrote there."""
    file = out_dir / MANIFEST
    if not file.exists():
        return {}
    try:
        document = json.loads(file.read_text(encoding="utf-8"))
        return {_safe_relative(path): ManifestEntry.model_validate(entry) for path, entry in document["files"].items()}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        raise QuotacalcError(
            "is not a quotacalc manifest",
            source=str(file),
            fix="restore it from version control, or move the directory's files away and generate again",
        ) from None


def _manifest(entries: dict[str, ManifestEntry]) -> str:
    files = {path: entry.model_dump(exclude_none=True) for path, entry in sorted(entries.items())}
    document = {"generator": "quotacalc", "manifest_version": MANIFEST_VERSION, "files": files}
    return json.dumps(document, indent=2) + "\n"


def _entries(generated: Mapping[str, Sequence[GeneratedFile]]) -> dict[str, ManifestEntry]:
    return {
        file.path: ManifestEntry(sha256=sha256(file.text), secret=file.secret, target=target)
        for target, files in generated.items()
        for file in files
    }


def _final_manifest(generated: Mapping[str, Sequence[GeneratedFile]], owned: dict[str, ManifestEntry]) -> str:
    """This run's files, plus the files of targets this run did not generate (kept as they were)."""
    kept = {path: entry for path, entry in owned.items() if entry.target not in generated}
    return _manifest({**kept, **_entries(generated)})


def _interim_manifest(generated: Mapping[str, Sequence[GeneratedFile]], owned: dict[str, ManifestEntry]) -> str:
    """Written before any file: owns both the old and the new content of each path (and the stale files), so
    an interrupted run leaves nothing that the next run would take for a foreign or edited file."""
    entries = dict(owned)
    for path, entry in _entries(generated).items():
        old = owned.get(path)
        previous = old.sha256 if old is not None and old.sha256 != entry.sha256 else None
        entries[path] = entry.model_copy(update={"previous": previous})
    return _manifest(entries)


def _disk(path: Path) -> tuple[str | None, int | None]:
    """(text, permission bits) of a file on disk, (None, None) when absent."""
    if path.is_symlink() or (path.exists() and not path.is_file()):
        return "", None  # not a plain file: never quotacalc's, never followed
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None, None
    mode = stat.S_IMODE(path.stat().st_mode)
    try:
        return data.decode("utf-8"), mode
    except UnicodeDecodeError:
        return "", mode


def _diff(path: str, old: str | None, new: str | None, secret: bool) -> str:
    if secret:
        what = "would be created" if old is None else "would be removed" if new is None else "differs"
        return f"--- a/{path}\n+++ b/{path}\n@@ holds salts: {what}, contents not shown @@\n"
    import difflib

    lines = difflib.unified_diff(
        [] if old is None else old.splitlines(keepends=True),
        [] if new is None else new.splitlines(keepends=True),
        fromfile="/dev/null" if old is None else f"a/{path}",
        tofile="/dev/null" if new is None else f"b/{path}",
    )
    return "".join(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n" for line in lines)


def _plan(
    out_dir: Path, generated: Mapping[str, Sequence[GeneratedFile]]
) -> tuple[list[FileChange], dict[str, ManifestEntry]]:
    """Each file's change (stale files, owned by a generated target but no longer generated, last)."""
    if out_dir.exists() and not out_dir.is_dir():
        raise UsageError("is not a directory", source=str(out_dir), field="--out", fix="name a directory")
    owned = _read_manifest(out_dir) if out_dir.is_dir() else {}
    files = [file for target_files in generated.values() for file in target_files]
    paths = [_safe_relative(file.path) for file in files]
    if len(set(paths)) != len(paths) or MANIFEST in paths:
        raise ValueError("exporters generated the same path twice, or the manifest's name")
    changes = []
    for file in files:
        text, mode = _disk(out_dir / file.path)
        want_mode = SECRET_MODE if file.secret else PUBLIC_MODE
        entry = owned.get(file.path)
        if text is None:
            status: Status = "created"
        elif entry is None:
            status = "foreign"
        elif not entry.accepts(sha256(text)):
            status = "edited"
        elif text == file.text:
            # Only a secret's permissions matter; others follow the checkout's umask.
            status = "permissions" if file.secret and mode != want_mode else "unchanged"
        else:
            status = "updated"
        changes.append(FileChange(path=file.path, status=status, secret=file.secret, sha256=sha256(file.text)))
    for path in sorted(set(owned) - set(paths)):
        entry = owned[path]
        if entry.target not in generated:
            continue  # another target's file: this run leaves it alone
        text, _ = _disk(out_dir / path)
        if text is not None:
            status = "removed" if entry.accepts(sha256(text)) else "edited"
            changes.append(FileChange(path=path, status=status, secret=entry.secret))
    return changes, owned


def check_files(out_dir: Path, generated: Mapping[str, Sequence[GeneratedFile]]) -> WriteReport:
    """Compare the directory with what would be generated (target -> files); write nothing. Salts never show."""
    out_dir = Path(out_dir)
    changes, owned = _plan(out_dir, generated)
    by_path = {file.path: file for files in generated.values() for file in files}
    parts = []
    for change in changes:
        if change.status in ("unchanged", "permissions"):
            continue
        old, _ = _disk(out_dir / change.path)
        new = by_path[change.path].text if change.path in by_path else None
        parts.append(_diff(change.path, old, new, change.secret))
    manifest_now, _ = _disk(out_dir / MANIFEST)
    wanted = _final_manifest(generated, owned)
    if manifest_now != wanted:
        changes.append(FileChange(path=MANIFEST, status="created" if manifest_now is None else "updated"))
        parts.append(_diff(MANIFEST, manifest_now, wanted, False))
    else:
        changes.append(FileChange(path=MANIFEST, status="unchanged"))
    return WriteReport(out_dir=str(out_dir), check=True, changes=tuple(changes), diff="".join(parts))


def write_files(out_dir: Path, generated: Mapping[str, Sequence[GeneratedFile]]) -> WriteReport:
    """Write each target's files under ``out_dir`` (atomically), remove its stale ones, update the manifest.

    Refuses, before writing anything, when a path holds a file quotacalc did not write or one edited since.
    """
    out_dir = Path(out_dir)
    _check_directories(out_dir, [file.path for files in generated.values() for file in files])
    changes, owned = _plan(out_dir, generated)
    for change in changes:
        if change.status == "foreign":
            raise QuotacalcError(
                "exists and quotacalc did not write it (not in the manifest); nothing was written",
                source=str(out_dir / change.path),
                fix="move it away, or choose another --out",
            )
        if change.status == "edited":
            raise QuotacalcError(
                "was edited since quotacalc wrote it; nothing was written",
                source=str(out_dir / change.path),
                fix="move the change into the plan, then delete the file and generate again",
            )
    by_path = {file.path: file for files in generated.values() for file in files}
    writes = [
        (out_dir / change.path, by_path[change.path].text, SECRET_MODE if change.secret else PUBLIC_MODE)
        for change in changes
        if change.status in ("created", "updated", "permissions")
    ]
    interim = (
        [(out_dir / MANIFEST, _interim_manifest(generated, owned), PUBLIC_MODE)]
        if any(change.status != "unchanged" for change in changes)
        else []
    )
    final = _final_manifest(generated, owned)
    finals = [(out_dir / MANIFEST, final, PUBLIC_MODE)] if _disk(out_dir / MANIFEST)[0] != final else []
    # Every new file is first written beside its place; only when all of them are on disk does any replace what
    # is there, so a full disk or a read-only folder leaves the earlier output as it was, not half of each.
    staged = _stage(out_dir, [*interim, *writes, *finals])
    done = 0
    try:
        # The interim manifest first: it owns old and new content alike, so a run stopped among the renames
        # leaves nothing the next run calls foreign or edited.
        for temporary, path in staged[: len(interim) + len(writes)]:
            _put(temporary, path)
            done += 1
        for change in changes:
            if change.status == "removed":
                (out_dir / change.path).unlink()
                _remove_empty_parents(out_dir, out_dir / change.path)
        for temporary, path in staged[len(interim) + len(writes) :]:
            _put(temporary, path)
            done += 1
    except BaseException:
        for temporary, _ in staged[done:]:
            Path(temporary).unlink(missing_ok=True)
        raise
    return WriteReport(out_dir=str(out_dir), check=False, changes=tuple(changes))


def _put(temporary: str, path: Path) -> None:
    """Move a staged file into its place (atomic: a reader sees the old file or the new, never a mix)."""
    os.replace(temporary, path)


def _stage(out_dir: Path, writes: Sequence[tuple[Path, str, int]]) -> list[tuple[str, Path]]:
    """Write each (path, text, mode) to a temporary file beside its path: (temporary, path) pairs, in order.

    On any failure nothing stays behind (the temporary files and the folders made for them are removed) and the
    error names the file it was for: nothing has replaced anything yet.
    """
    staged: list[tuple[str, Path]] = []
    made: list[Path] = []
    path = out_dir
    try:
        for path, text, mode in writes:
            for parent in reversed(path.parents):  # --out's own missing parents too (--out new/generated)
                if not parent.exists():
                    parent.mkdir()
                    made.append(parent)
            descriptor, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
            staged.append((temporary, path))
            os.fchmod(descriptor, mode)
            with os.fdopen(descriptor, "wb") as handle:
                handle.write(text.encode("utf-8"))
    except BaseException as error:
        for temporary, _ in staged:
            Path(temporary).unlink(missing_ok=True)
        for folder in reversed(made):
            with contextlib.suppress(OSError):
                folder.rmdir()
        if not isinstance(error, OSError):
            raise
        # Named by the file being staged when the write failed, never by its temporary name.
        reason = OSError(error.errno, error.strerror)
        raise unwritable(reason, path, field="--out", outcome="; nothing was changed") from None
    return staged


def _check_directories(out_dir: Path, paths: Sequence[str]) -> None:
    """Refuse, before anything is written, where a directory the files need is a file (``--out`` names a file, or
    a file sits where a target's directory goes)."""
    needed = {out_dir, *out_dir.parents}
    for path in paths:
        needed.update(parent for parent in (out_dir / path).parents if out_dir in parent.parents or parent == out_dir)
    for directory in sorted(needed, key=lambda entry: len(entry.parts)):
        if directory == out_dir and out_dir.exists() and not out_dir.is_dir():
            raise UsageError("is not a directory", source=str(out_dir), field="--out", fix="name a directory")
        if directory != out_dir and out_dir in directory.parents and directory.is_symlink():
            # A link would carry the writes, and the removal of stale files, out of --out.
            raise QuotacalcError(
                "is a symbolic link where a directory of the generated files goes; nothing was written",
                source=str(directory),
                field="--out",
                fix="replace the link with a plain directory, or choose another --out",
            )
        if directory.exists() and not directory.is_dir():
            raise QuotacalcError(
                "is a file where a directory of the generated files goes; nothing was written",
                source=str(directory),
                field="--out",
                fix="choose another --out, or move the file away",
            )


def _remove_empty_parents(out_dir: Path, path: Path) -> None:
    parent = path.parent
    while parent != out_dir and out_dir in parent.parents:
        try:
            parent.rmdir()
        except OSError:
            return
        parent = parent.parent
