"""Shared fixtures: an isolated on-disk cache, and the CLI run in-process; helpers for broken test configs."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

#: The architecture families' fixture configs (provenance in SOURCES.md there).
CONFIGS = Path(__file__).parent / "data" / "configs"


@pytest.fixture(scope="session", autouse=True)
def _isolated_cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Point quotacalc's on-disk cache at a per-session temp dir (monkeypatch is function-scoped)."""
    previous = os.environ.get("QUOTACALC_CACHE_DIR")
    os.environ["QUOTACALC_CACHE_DIR"] = str(tmp_path_factory.mktemp("quotacalc-cache"))
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop("QUOTACALC_CACHE_DIR", None)
        else:
            os.environ["QUOTACALC_CACHE_DIR"] = previous


RunCli = Callable[..., tuple[int, str, str]]


@pytest.fixture
def private_cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A cache of this test's own: a test that reads a fixture config parses it, not a parse another test left."""
    monkeypatch.setenv("QUOTACALC_CACHE_DIR", str(tmp_path / "cache"))


def fixture_arch(folder: str):
    """The architecture of fixture config ``folder`` (under tests/data/configs)."""
    from quotacalc.inputs.resolve import load_arch

    return load_arch(str(CONFIGS / folder))[0]


@pytest.fixture
def run_cli(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> RunCli:
    """Run ``quotacalc *args`` in-process; return (exit_code, stdout, stderr).

    The exit code is 0 when ``main()`` returns normally, else the SystemExit code.
    """
    from quotacalc.cli.app import main

    def run(*args: str) -> tuple[int, str, str]:
        capsys.readouterr()  # drop anything printed before this call
        monkeypatch.setattr(sys, "argv", ["quotacalc", *(str(arg) for arg in args)])
        try:
            main()
            code = 0
        except SystemExit as exit_:
            if exit_.code is None:
                code = 0
            elif isinstance(exit_.code, int):
                code = exit_.code
            else:  # sys.exit("message") prints the message and exits 1
                code = 1
        out, err = capsys.readouterr()
        return code, out, err

    return run


def llama70b_prompt_token_units(prompt_tokens: float) -> float:
    """Units of one prompt token of Llama 3.3 70B inside a prompt of ``prompt_tokens``, by hand.

    1 + attention FLOPs / parameter FLOPs: each of 80 layers spends 2 × 64 heads × (128 + 128)
    FLOPs per attended token, over (P + 1) / 2 tokens on average (causal), against 2 × 70,553,706,496.
    """
    return 1 + 80 * 2 * 64 * 256 * (prompt_tokens + 1) / 2 / (2 * 70_553_706_496)


#: The method's tenant (5 req/s, 2,000 prompt, 500 output) with each prompt token charged inside its
#: prompt: 5 × (2,000 × 1.01859 + 3.0931 × 500) = 17,919 units/s (17,725 at 1 unit per prompt token).
METHOD_TENANT_UNITS_PER_S = 5 * (2000 * llama70b_prompt_token_units(2000) + 3.0931 * 500)


def config_with(tmp_path: Path, folder: str, change: Callable[[dict], object]) -> str:
    """A copy of fixture ``folder``'s config.json under ``tmp_path``, changed by ``change``: its folder's path."""
    config = json.loads((CONFIGS / folder / "config.json").read_text(encoding="utf-8"))
    change(config)
    target = tmp_path / f"{folder}-changed"
    target.mkdir(parents=True)
    (target / "config.json").write_text(json.dumps(config), encoding="utf-8")
    return str(target)


def one_line_error(path: str, error: type[Exception] | None = None) -> str:
    """The message of the error reading the config at ``path`` raises (a QuotacalcError unless ``error``), checked
    to be one line."""
    from quotacalc.errors import QuotacalcError
    from quotacalc.inputs.resolve import load_arch

    with pytest.raises(error or QuotacalcError) as caught:
        load_arch(path)
    message = str(caught.value)
    assert "\n" not in message
    return message
