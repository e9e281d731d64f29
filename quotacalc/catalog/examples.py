"""The example plans shipped with quotacalc (``examples/`` in the repo, ``quotacalc/examples`` in a wheel)."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict


class ShippedExample(BaseModel):
    """One example plan, its one-line description, and the files that belong to it."""

    model_config = ConfigDict(defer_build=True, frozen=True)

    name: str
    path: Path
    description: str
    #: The plan and its companions (``platform.yaml``, ``platform.secret``, ``platform/``).
    members: tuple[Path, ...]


def examples_dir() -> Path:
    """Inside the package when installed, the repo's ``examples/`` in a checkout."""
    package_dir = Path(__file__).resolve().parent.parent
    for candidate in (package_dir / "examples", package_dir.parent / "examples"):
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError(f"shipped examples not found beside {package_dir}")


def _description(path: Path) -> str:
    """The file's first sentence: its leading comment (or Markdown heading) lines up to the first full stop."""
    words: list[str] = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.startswith("#"):
            break
        words.append(line.lstrip("# ").strip())
        if words[-1].endswith(".") or not words[-1]:
            break
    return " ".join(word for word in words if word)


def _folder_examples(folder: Path) -> list[ShippedExample]:
    """Folders of inputs with a README.md of their own (``calibration/``): the README describes them."""
    return [
        ShippedExample(
            name=entry.name, path=entry / "README.md", description=_description(entry / "README.md"), members=(entry,)
        )
        for entry in sorted(folder.iterdir())
        if entry.is_dir() and (entry / "README.md").is_file()
    ]


def _named_plan(path: Path, folder: Path) -> list[Path]:
    """The example plan a scenario names (``plan: platform.yaml``): copied with it, the scenario runs where it lands."""
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("plan:"):
            named = folder / line.removeprefix("plan:").split("#", 1)[0].strip().strip("'\"")
            return [named] if named.suffix == ".yaml" and named.is_file() else []
    return []


def shipped_examples() -> tuple[ShippedExample, ...]:
    """Every example plan (a top-level ``*.yaml``), by name."""
    folder = examples_dir()
    examples = []
    for path in sorted(folder.glob("*.yaml")):
        name = path.stem
        members = tuple(
            sorted(
                {
                    *(entry for entry in folder.iterdir() if entry.name == name or entry.name.startswith(f"{name}.")),
                    *_named_plan(path, folder),
                }
            )
        )
        examples.append(ShippedExample(name=name, path=path, description=_description(path), members=members))
    return tuple(sorted([*examples, *_folder_examples(folder)], key=lambda example: example.name))
