"""``quotacalc emulate``'s bad flags and plans: one line naming the flag or the file, a non-zero exit, and no
server started (these all fail before it would listen)."""

from __future__ import annotations

import pytest

PLAN = "examples/llama-3.3-70b-h100.yaml"
PLATFORM = "examples/platform.yaml"
#: emulate refuses, in one line, where aiohttp is missing before it reads the plan: the plan's errors need the server's
#: library installed (the ``emulate`` extra); without it they skip, as the other extras' tests do.
try:
    import aiohttp  # noqa: F401

    HAS_AIOHTTP = True
except ImportError:
    HAS_AIOHTTP = False
needs_aiohttp = pytest.mark.skipif(not HAS_AIOHTTP, reason="the emulate extra (aiohttp) is not installed")


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (["--speed", "0"], 2, "error: --speed: must be above 0 and at most 10000, got 0"),
        (["--speed", "nan"], 2, "must be a finite number, got 'nan'"),
        (["--fail-rate", "1.5"], 2, "error: --fail-rate: must be from 0 to 1, got 1.5"),
        (["--port", "70000"], 2, "error: --port: must be from 0 to 65535, got 70000"),
        (["--port", "80.5"], 2, "must be a whole number, got '80.5'"),
        (["--replicas", "0"], 2, "error: --replicas: must be from 1 to 1024, got 0"),
        (["--scheduling-policy", "lifo"], 2, "error: --scheduling-policy: must be fcfs or priority, got 'lifo'"),
        (["--output-tokens", "0"], 2, "error: --output-tokens: must be at least 1, got 0"),
    ],
)
def test_bad_flags_are_one_line(run_cli, args, code, message):
    exit_code, out, err = run_cli("emulate", PLAN, *args)
    assert exit_code == code and out == ""
    assert len(err.splitlines()) == 1 and message in err


@needs_aiohttp
def test_an_unknown_pool_is_named_with_the_choices(run_cli):
    code, _, err = run_cli("emulate", PLATFORM, "--pool", "sharde")
    assert code == 2
    assert err == f"quotacalc: error: --pool: no pool 'sharde' in {PLATFORM} (did you mean shared?)\n"


@needs_aiohttp
def test_a_missing_plan_names_the_file(run_cli, tmp_path):
    missing = tmp_path / "nope.yaml"
    code, _, err = run_cli("emulate", str(missing))
    # As check and generate say it (exit 2: the argument names nothing).
    assert (code, err) == (2, f"quotacalc: error: {missing}: no such file (check the path to the plan)\n")


@needs_aiohttp
def test_a_bad_plan_value_names_the_file_and_field(run_cli, tmp_path):
    plan = tmp_path / "plan.yaml"
    plan.write_text("model: meta-llama/Llama-3.3-70B-Instruct\ngpu: h100-sxm\ntp: three\n")
    code, _, err = run_cli("emulate", str(plan))
    assert code == 1 and len(err.splitlines()) == 1
    assert str(plan) in err and "tp" in err


@needs_aiohttp
def test_pools_whose_ports_would_pass_65535_are_one_line(run_cli):
    code, out, err = run_cli("emulate", PLATFORM, "--port", "65534")
    assert (code, out) == (2, "")
    assert err == (
        "quotacalc: error: --port: 3 pools need ports 65534 to 65536, past 65535 "
        "(choose a lower port, 0 for free ones, or --pool to serve one)\n"
    )
