"""``quotacalc examples``: list the shipped example plans, print one, or copy them out of the package."""

from __future__ import annotations

import sys
from pathlib import Path

from quotacalc.catalog.examples import ShippedExample, shipped_examples
from quotacalc.errors import QuotacalcError, UsageError, close_names
from quotacalc.exporters.writer import MANIFEST, PUBLIC_MODE, SECRET_MODE
from quotacalc.fileio import ConfinedDir, NotPlainFile, unwritable


def _find(name: str) -> ShippedExample:
    examples = shipped_examples()
    key = name.strip().lower().removesuffix(".yaml")
    for example in examples:
        if example.name.lower() == key:
            return example
    names = [example.name for example in examples]
    close = close_names(key, names, n=3, cutoff=0.4)
    fix = f"did you mean {', '.join(close)}?" if close else f"one of {', '.join(names)}"
    raise UsageError(f"unknown example '{name}'", field="NAME", fix=fix)


def _files(example: ShippedExample) -> list[tuple[Path, Path]]:
    """(source file, path relative to the examples folder) of every file that belongs to an example."""
    root = example.members[0].parent  # the examples folder: a folder example keeps its own folder in the copy
    files = []
    for member in example.members:
        found = [member] if member.is_file() else sorted(p for p in member.rglob("*") if p.is_file())
        files.extend((path, path.relative_to(root)) for path in found)
    return files


#: A shipped example file is kilobytes: a file far larger at its place is not the same file.
_MAX_EXAMPLE_BYTES = 16 * 2**20


def _holds_already(folder: ConfinedDir, relative: str, source: Path) -> bool:
    """Whether ``relative`` in the folder is a plain file with ``source``'s bytes: a companion an earlier copy wrote
    (a scenario's plan, copied with the plan's own example first), which the copy leaves as it is."""
    try:
        found = folder.read(relative, limit=_MAX_EXAMPLE_BYTES)
    except (NotPlainFile, OSError):
        return False
    return found is not None and found[0] == source.read_bytes()


def copy_examples(examples: list[ShippedExample], target: Path) -> list[Path]:
    """Copy examples into ``target``; refuses to overwrite a different file, and then writes nothing. A file
    already there with the same bytes is kept. Every path is reached from ``target``'s own descriptor without
    following a link (``ConfinedDir``): a link planted in ``target`` is refused, never written through."""
    # A scenario brings the plan it names, which may be copied as an example of its own too: once.
    planned = list(
        dict.fromkeys((source, relative.as_posix()) for example in examples for source, relative in _files(example))
    )
    with ConfinedDir(target, field="--copy", contents="the copied examples", outcome="nothing was written") as folder:
        for _, relative in planned:  # a link or a file where a folder goes: refused before anything is written
            folder.directory(ConfinedDir.parts(relative)[:-1])
        existing = [
            str(target / relative)
            for source, relative in planned
            if folder.lstat(relative) is not None and not _holds_already(folder, relative, source)
        ]
        if existing:
            raise QuotacalcError(
                f"would overwrite {existing[0]}" + (f" and {len(existing) - 1} more" if len(existing) > 1 else ""),
                field="--copy",
                fix="remove them or choose another directory",
            )
        secret = _secret_files([source for source, _ in planned])
        for source, relative in planned:
            if _holds_already(folder, relative, source):
                continue
            # A salt secret and generated salts stay owner-only in the copy, as generate writes them.
            mode = SECRET_MODE if source in secret else PUBLIC_MODE
            folder.replace(folder.stage(relative, source.read_bytes(), mode), relative)
    return [target / relative for _, relative in planned]


def _secret_files(sources: list[Path]) -> set[Path]:
    """The files a copy keeps owner-only: ``*.secret`` files and what a generate manifest marks secret."""
    import json

    secret = {source for source in sources if source.suffix == ".secret"}
    for manifest in (source for source in sources if source.name == MANIFEST):
        files = json.loads(manifest.read_text(encoding="utf-8")).get("files", {})
        secret |= {manifest.parent / path for path, entry in files.items() if entry.get("secret")}
    return secret


def examples_command(name: str | None, copy_to: str | None, as_json: bool) -> None:
    examples = [_find(name)] if name else list(shipped_examples())
    if copy_to is not None:
        if not copy_to.strip():
            raise UsageError("is empty", field="--copy", fix="name a directory, e.g. --copy .")
        target = Path(copy_to).expanduser()
        if target.exists() and not target.is_dir():
            raise UsageError("is not a directory", source=str(target), field="--copy", fix="name a directory")
        try:
            written = copy_examples(examples, target)
        except OSError as error:  # a folder it cannot create or write (/proc, a read-only file system, no space)
            raise unwritable(error, target, field="--copy") from None
        for path in written:
            sys.stdout.write(f"{path}\n")
        return
    if name and not as_json:
        sys.stdout.write(examples[0].path.read_text(encoding="utf-8"))
        return
    if as_json:
        from quotacalc.cli.json_out import JSON_SCHEMA_VERSION, emit_json

        emit_json(
            {
                "schema_version": JSON_SCHEMA_VERSION,
                "command": "examples",
                "examples": [
                    {
                        "name": example.name,
                        "description": example.description,
                        "files": [str(relative) for _, relative in _files(example)],
                    }
                    for example in examples
                ],
            }
        )
        return
    width = max(len(example.name) for example in examples)
    for example in examples:
        sys.stdout.write(f"{example.name.ljust(width)}  {example.description}\n")
    sys.stdout.write("\nquotacalc examples NAME prints one; --copy DIR writes it (and its companion files) to DIR.\n")
