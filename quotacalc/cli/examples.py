"""``quotacalc examples``: list the shipped example plans, print one, or copy them out of the package."""

from __future__ import annotations

import sys
from pathlib import Path

from quotacalc.catalog.examples import ShippedExample, shipped_examples
from quotacalc.errors import QuotacalcError, UsageError, close_names
from quotacalc.fileio import write_text_atomic


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
    root = example.path.parent
    files = []
    for member in example.members:
        found = [member] if member.is_file() else sorted(p for p in member.rglob("*") if p.is_file())
        files.extend((path, path.relative_to(root)) for path in found)
    return files


def copy_examples(examples: list[ShippedExample], target: Path) -> list[Path]:
    """Copy examples into ``target``; refuses to overwrite, and writes nothing if any file exists."""
    planned = [(source, target / relative) for example in examples for source, relative in _files(example)]
    existing = [str(destination) for _, destination in planned if destination.exists()]
    if existing:
        raise QuotacalcError(
            f"would overwrite {existing[0]}" + (f" and {len(existing) - 1} more" if len(existing) > 1 else ""),
            field="--copy",
            fix="remove them or choose another directory",
        )
    for source, destination in planned:
        write_text_atomic(destination, source.read_text(encoding="utf-8"))
    return [destination for _, destination in planned]


def examples_command(name: str | None, copy_to: str | None, as_json: bool) -> None:
    examples = [_find(name)] if name else list(shipped_examples())
    if copy_to is not None:
        written = copy_examples(examples, Path(copy_to).expanduser())
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
