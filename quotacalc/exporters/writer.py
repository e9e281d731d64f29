"""Writing generated files into an output directory without losing anything, or diffing them (``--check``).

quotacalc keeps a manifest (``.quotacalc-manifest.json``) of the files it wrote, with their sha256:
- a file in the directory that is not in the manifest is never overwritten or removed (an error names it);
- a file in the manifest whose content changed since (a hand edit) is not overwritten or removed either;
- a file quotacalc wrote before and no longer generates is removed;
- every write is atomic, files holding salts are owner-only (0600), others 0644.
All checks run before the first write, so a refused run writes nothing.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from quotacalc.errors import QuotacalcError, UsageError
from quotacalc.exporters.base import GeneratedFile
from quotacalc.fileio import ConfinedDir, NotPlainFile, unwritable

MANIFEST = ".quotacalc-manifest.json"
MANIFEST_VERSION = 1
SECRET_MODE = 0o600
PUBLIC_MODE = 0o644
#: A manifest lists a line per file: hundreds of bytes each. Past this it is not one (or it is /dev/zero).
MAX_MANIFEST_BYTES = 16 * 2**20
#: A generated file read back (to compare or diff) is kilobytes; past this it is not quotacalc's.
MAX_GENERATED_BYTES = 64 * 2**20
#: How long a run waits for another run writing the same --out (a run's writes take well under a second).
LOCK_WAIT_S = 10.0

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


def _read_manifest(folder: ConfinedDir) -> dict[str, ManifestEntry]:
    """path -> what quotacalc wrote there. Read as a plain file of bounded size (never through a link, never a FIFO
    that would hang the run or a device that would fill memory); anything else is a one-line error."""
    source = str(folder.root / MANIFEST)
    fix = "restore it from version control, or move the directory's files away and generate again"
    try:
        found = folder.read(MANIFEST, limit=MAX_MANIFEST_BYTES)
    except NotPlainFile as why:
        raise QuotacalcError(f"is {why}, not a quotacalc manifest", source=source, fix=fix) from None
    if found is None:
        return {}
    try:
        document = json.loads(found[0].decode("utf-8"))
        return {_safe_relative(path): ManifestEntry.model_validate(entry) for path, entry in document["files"].items()}
    except (ValueError, KeyError, TypeError, AttributeError, RecursionError):
        # RecursionError: JSON nested thousands deep, which no manifest is.
        raise QuotacalcError("is not a quotacalc manifest", source=source, fix=fix) from None


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


def _disk(folder: ConfinedDir, path: str) -> tuple[str | None, int | None]:
    """(text, permission bits) of a file in the folder, (None, None) when absent."""
    try:
        found = folder.read(path, limit=MAX_GENERATED_BYTES)
    except NotPlainFile:
        return "", None  # a link, FIFO or folder: never quotacalc's, never followed
    if found is None:
        return None, None
    data, mode = found
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
    folder: ConfinedDir, generated: Mapping[str, Sequence[GeneratedFile]]
) -> tuple[list[FileChange], dict[str, ManifestEntry]]:
    """Each file's change (stale files, owned by a generated target but no longer generated, last)."""
    owned = _read_manifest(folder)
    files = [file for target_files in generated.values() for file in target_files]
    paths = [_safe_relative(file.path) for file in files]
    if len(set(paths)) != len(paths) or MANIFEST in paths:
        raise ValueError("exporters generated the same path twice, or the manifest's name")
    changes = []
    for file in files:
        text, mode = _disk(folder, file.path)
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
        text, _ = _disk(folder, path)
        if text is not None:
            status = "removed" if entry.accepts(sha256(text)) else "edited"
            changes.append(FileChange(path=path, status=status, secret=entry.secret))
    return changes, owned


def _confined(out_dir: Path, outcome: str) -> ConfinedDir:
    return ConfinedDir(out_dir, field="--out", contents="the generated files", outcome=outcome)


def check_files(out_dir: Path, generated: Mapping[str, Sequence[GeneratedFile]]) -> WriteReport:
    """Compare the directory with what would be generated (target -> files); write nothing. Salts never show."""
    out_dir = Path(out_dir)
    with _confined(out_dir, "nothing was compared") as folder:
        folder.lock(exclusive=False, wait_s=LOCK_WAIT_S, doing="writing")
        changes, owned = _plan(folder, generated)
        by_path = {file.path: file for files in generated.values() for file in files}
        parts = []
        for change in changes:
            if change.status in ("unchanged", "permissions"):
                continue
            old, _ = _disk(folder, change.path)
            new = by_path[change.path].text if change.path in by_path else None
            parts.append(_diff(change.path, old, new, change.secret))
        manifest_now, _ = _disk(folder, MANIFEST)
    wanted = _final_manifest(generated, owned)
    if manifest_now != wanted:
        changes.append(FileChange(path=MANIFEST, status="created" if manifest_now is None else "updated"))
        parts.append(_diff(MANIFEST, manifest_now, wanted, False))
    else:
        changes.append(FileChange(path=MANIFEST, status="unchanged"))
    return WriteReport(out_dir=str(out_dir), check=True, changes=tuple(changes), diff="".join(parts))


def write_files(out_dir: Path, generated: Mapping[str, Sequence[GeneratedFile]]) -> WriteReport:
    """Write each target's files under ``out_dir`` (atomically), remove its stale ones, update the manifest.

    Refuses, before writing anything, when a path holds a file quotacalc did not write or one edited since, or a
    link or file stands where a folder of the generated files goes. Every path is reached from ``out_dir``'s own
    descriptor without following a link (``ConfinedDir``), so no write or removal lands outside it.
    """
    out_dir = Path(out_dir)
    _check_out_dir(out_dir)
    with _confined(out_dir, "nothing was written") as folder:
        # Held from the manifest's reading to the last rename: two runs' renames interleaved would leave one run's
        # files under the other's manifest, which every later run refuses as edited.
        folder.directory((), create=True)
        folder.lock(exclusive=True, wait_s=LOCK_WAIT_S, doing="writing")
        for file in (file for files in generated.values() for file in files):
            folder.directory(ConfinedDir.parts(file.path)[:-1])  # a link or a file on the way: refused now
        changes, owned = _plan(folder, generated)
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
            (change.path, by_path[change.path].text, SECRET_MODE if change.secret else PUBLIC_MODE)
            for change in changes
            if change.status in ("created", "updated", "permissions")
        ]
        interim = (
            [(MANIFEST, _interim_manifest(generated, owned), PUBLIC_MODE)]
            if any(change.status != "unchanged" for change in changes)
            else []
        )
        final = _final_manifest(generated, owned)
        finals = [(MANIFEST, final, PUBLIC_MODE)] if _disk(folder, MANIFEST)[0] != final else []
        # Every new file is first written beside its place; only when all of them are on disk does any replace what
        # is there, so a full disk or a read-only folder leaves the earlier output as it was, not half of each.
        staged = _stage(folder, [*interim, *writes, *finals])
        done = 0
        try:
            # The interim manifest first: it owns old and new content alike, so a run stopped among the renames
            # leaves nothing the next run calls foreign or edited.
            for temporary, path in staged[: len(interim) + len(writes)]:
                _put(temporary, path)
                done += 1
            for change in changes:
                if change.status == "removed":
                    folder.unlink(change.path)
                    folder.remove_empty_parents(change.path)
            for temporary, path in staged[len(interim) + len(writes) :]:
                _put(temporary, path)
                done += 1
        except BaseException:
            for temporary, path in staged[done:]:
                temporary.folder.discard(temporary.name, path)
            raise
    return WriteReport(out_dir=str(out_dir), check=False, changes=tuple(changes))


@dataclass(frozen=True)
class _Staged:
    """A file written beside its place in ``folder``, under the temporary ``name``."""

    folder: ConfinedDir
    name: str


def _put(temporary: _Staged, path: str) -> None:
    """Move a staged file into its place (atomic: a reader sees the old file or the new, never a mix)."""
    temporary.folder.replace(temporary.name, path)


def _stage(folder: ConfinedDir, writes: Sequence[tuple[str, str, int]]) -> list[tuple[_Staged, str]]:
    """Write each (path, text, mode) to a temporary file beside its path: (temporary, path) pairs, in order.

    On any failure nothing stays behind (the temporary files and the folders made for them are removed) and the
    error names the file it was for: nothing has replaced anything yet.
    """
    staged: list[tuple[_Staged, str]] = []
    path = MANIFEST
    try:
        for path, text, mode in writes:
            staged.append((_Staged(folder, folder.stage(path, text.encode("utf-8"), mode)), path))
    except BaseException as error:
        for temporary, where in staged:
            folder.discard(temporary.name, where)
        folder.remove_made()
        if not isinstance(error, OSError):
            raise
        # Named by the file being staged when the write failed, never by its temporary name.
        reason = OSError(error.errno, error.strerror)
        raise unwritable(reason, folder.root / path, field="--out", outcome="; nothing was changed") from None
    return staged


def _check_out_dir(out_dir: Path) -> None:
    """Refuse, before anything is written, where ``--out`` or a folder above it is a file (the folders inside it are
    walked by ``ConfinedDir``)."""
    for directory in sorted({out_dir, *out_dir.parents}, key=lambda entry: len(entry.parts)):
        if directory == out_dir and out_dir.exists() and not out_dir.is_dir():
            raise UsageError("is not a directory", source=str(out_dir), field="--out", fix="name a directory")
        if directory.exists() and not directory.is_dir():
            raise QuotacalcError(
                "is a file where a directory of the generated files goes; nothing was written",
                source=str(directory),
                field="--out",
                fix="choose another --out, or move the file away",
            )
