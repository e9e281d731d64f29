"""The documentation's pointers hold: every relative link in the README, CONTRIBUTING.md and docs/ reaches a file
that exists (and a heading there, when it names one), and every repository path the architecture page and the
contributing recipes name exists, so a page cannot keep pointing at a file or section that moved."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = sorted([ROOT / "README.md", ROOT / "CONTRIBUTING.md", *(ROOT / "docs").glob("*.md")])
#: [text](target): the target up to whitespace or the closing parenthesis.
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
#: A path in backticks: the repository's top-level folders, or the package's parts as docs/architecture.md names them.
REPO_PATH = re.compile(r"`((?:quotacalc|tests|scripts|examples|models|docs|bench|\.ci)/[\w./-]*)`")
PACKAGE_PATH = re.compile(r"`((?:cli|core|inputs|exporters|sim|catalog|priced|admission|emulate|fleet)/[\w./-]*)`")


def _without_code_blocks(text: str) -> str:
    return re.sub(r"^```.*?^```", "", text, flags=re.MULTILINE | re.DOTALL)


def _anchor(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation but '-' and '_' dropped, spaces as '-'."""
    text = heading.strip().lower().replace("`", "")
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    text = _without_code_blocks(page.read_text(encoding="utf-8"))
    return {_anchor(line.lstrip("#")) for line in text.splitlines() if re.match(r"^#{1,6} ", line)}


def _links(page: Path) -> list[str]:
    text = _without_code_blocks(page.read_text(encoding="utf-8"))
    return [target for target in LINK.findall(text) if not re.match(r"^[a-z]+:", target)]


def test_the_anchor_rule_matches_githubs():
    assert _anchor("Assumptions (all inputs, with documented defaults)") == (
        "assumptions-all-inputs-with-documented-defaults"
    )
    assert _anchor("`size` of a plan") == "size-of-a-plan"
    assert _anchor("Config targets: `quotacalc generate`") == "config-targets-quotacalc-generate"


@pytest.mark.parametrize("page", PAGES, ids=lambda page: str(page.relative_to(ROOT)))
def test_every_relative_link_reaches_its_file_and_heading(page):
    broken = []
    for target in _links(page):
        path_part, _, anchor = target.partition("#")
        linked = (page.parent / path_part).resolve() if path_part else page
        if not linked.exists():
            broken.append(f"{target}: no file {linked.relative_to(ROOT) if linked.is_relative_to(ROOT) else linked}")
        elif anchor and linked.suffix == ".md" and anchor not in _anchors(linked):
            broken.append(f"{target}: no heading '#{anchor}' in {linked.relative_to(ROOT)}")
    assert not broken, f"{page.relative_to(ROOT)}:\n" + "\n".join(broken)


def _named_paths(text: str) -> list[Path]:
    named = [ROOT / path for path in REPO_PATH.findall(text)]
    return named + [ROOT / "quotacalc" / path for path in PACKAGE_PATH.findall(text)]


def _recipes() -> dict[str, str]:
    """CONTRIBUTING.md's sections by heading (``### Add a GPU`` -> its text)."""
    text = (ROOT / "CONTRIBUTING.md").read_text(encoding="utf-8")
    parts = re.split(r"^#{2,3} (.+)$", text, flags=re.MULTILINE)
    return dict(zip(parts[1::2], parts[2::2], strict=True))


@pytest.mark.parametrize("heading", sorted(_recipes()))
def test_every_path_a_contributing_section_names_exists(heading):
    missing = [str(path.relative_to(ROOT)) for path in _named_paths(_recipes()[heading]) if not path.exists()]
    assert not missing, f"CONTRIBUTING.md, {heading}: names paths that do not exist: {missing}"


def test_the_recipes_name_their_files():
    recipes = _recipes()
    for heading in ("Add a config target", "Add an admission policy", "Add a GPU", "Add a model family"):
        assert _named_paths(recipes[heading]), f"CONTRIBUTING.md, {heading}: names no file"
    assert _named_paths(recipes["Add a price figure"])


def test_every_path_the_architecture_page_names_exists():
    named = _named_paths((ROOT / "docs" / "architecture.md").read_text(encoding="utf-8"))
    assert named
    missing = [str(path.relative_to(ROOT)) for path in named if not path.exists()]
    assert not missing, f"docs/architecture.md names paths that do not exist: {missing}"


def test_the_readme_stays_an_introduction():
    """The reference lives in docs/; the README is an introduction with room for short feature sections."""
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 300, f"README.md has {len(lines)} lines: move reference material into docs/"


def test_the_commands_page_lists_every_command():
    """docs/commands.md's table has one row per command ``quotacalc --help`` lists, and no row for any other."""
    from quotacalc.cli.app import commands

    text = (ROOT / "docs" / "commands.md").read_text(encoding="utf-8")
    table = text.split("## The commands", 1)[1].split("\n\n", 2)[1]
    documented = {match for match in re.findall(r"^\| `quotacalc ([a-z]+)", table, flags=re.MULTILINE)}
    assert documented == set(commands), (
        f"docs/commands.md, The commands: missing {sorted(set(commands) - documented)}, "
        f"extra {sorted(documented - set(commands))}"
    )
