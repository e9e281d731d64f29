"""Shared fixtures: an isolated on-disk cache, and the CLI run in-process."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator

import pytest


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
