"""cli/fast.py: a plain ``quotacalc price`` runs without building the command line, to the same bytes, errors and
exit codes as the full command line; anything it does not recognise in full goes to the full command line."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from quotacalc.cli import fast

EXAMPLE = str(Path(__file__).parent.parent / "examples" / "llama-3.3-70b-h100.yaml")
LLAMA = ["--model", "Llama-3.3-70B-Instruct", "--gpu", "h100-sxm", "--tp", "4", "--weight-dtype", "fp8"]

#: Plain invocations (cli/fast.py runs them): results, comparisons, and errors of every stage after parsing.
PLAIN = {
    "example": [EXAMPLE],
    "example-json": [EXAMPLE, "--json"],
    "json-first": ["--json", EXAMPLE],
    "explain": [EXAMPLE, "--explain"],
    "json-explain": [EXAMPLE, "--json", "--explain"],
    "strict-clean": [EXAMPLE, "--strict"],
    "flags": LLAMA,
    "flags-json": [*LLAMA, "--json"],
    "flag-over-plan": [EXAMPLE, "--model", "Llama-3.3-70B-Instruct", "--json"],
    "per-gpu-price": [EXAMPLE, "--gpu-hour-usd", "h100-sxm=3", "--json"],
    "comparison": [EXAMPLE, "--tp", "4,8"],
    "comparison-json": [EXAMPLE, "--gpu", "h100-sxm,h200", "--json"],
    "comparison-explain": [EXAMPLE, "--gpu", "h100-sxm,h200", "--explain"],
    "pool-record-differs": [EXAMPLE, "--kv-dtype", "fp8"],
    "unknown-gpu": [EXAMPLE, "--gpu", "no-such-gpu"],
    "empty-gpu": [EXAMPLE, "--gpu", ""],
    "empty-list-item": [EXAMPLE, "--tp", "4,,8"],
    "tp-not-whole": [*LLAMA[:4], "--tp", "4.0"],
    "unknown-model": ["--model", "no-such-model", "--gpu", "h100-sxm"],
    "unicode-model": ["--model", "Llama-3.3-70B-Instruct-ü", "--gpu", "h100-sxm", "--json"],
    "no-model": ["--gpu", "h100-sxm"],
    "nothing": [],
    "empty-plan": ["", *LLAMA],
    "missing-plan": ["no-such-plan.yaml"],
    "platform-needs-pool": [str(Path(EXAMPLE).with_name("platform.yaml"))],
}


def _run(path: str, args: list[str], *, env: dict[str, str] | None = None) -> tuple[int, bytes, bytes]:
    """``quotacalc price ARGS`` in a fresh process: by the console script's entry (``fast``), or by cli/app.py's
    ``main``, the full command line (``full``)."""
    run = {
        "fast": "from quotacalc.cli.entry import main",
        "full": "from quotacalc.cli.app import main",
    }[path]
    code = f"import sys\nsys.argv = ['quotacalc', *sys.argv[1:]]\n{run}\nmain()\n"
    proc = subprocess.run(
        [sys.executable, "-c", code, "price", *args],
        capture_output=True,
        timeout=120,
        env=env or {key: value for key, value in os.environ.items() if key != "QUOTACALC_DEBUG"},
    )
    return proc.returncode, proc.stdout, proc.stderr


def _in_process(capsys, args: list[str]) -> tuple[int, str, str]:
    capsys.readouterr()
    try:
        served = fast.serve(["price", *args])
        code = 0
    except SystemExit as exit_:
        served, code = True, exit_.code if isinstance(exit_.code, int) else (0 if exit_.code is None else 1)
    assert served, f"cli/fast.py did not take {args}"
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("args", PLAIN.values(), ids=PLAIN.keys())
def test_the_fast_path_writes_what_the_command_line_writes(run_cli, capsys, args):
    assert fast.parse_plain_price(["price", *args]) is not None
    assert _in_process(capsys, args) == run_cli("price", *args)


@pytest.mark.parametrize("name", ["example", "example-json", "comparison-json", "pool-record-differs", "missing-plan"])
def test_the_fast_path_writes_the_same_bytes_in_a_process_of_its_own(name):
    """The console script's process, streams and exit code, against cli/app.py's ``main`` on the same arguments."""
    fast_run = _run("fast", PLAIN[name])
    assert fast_run == _run("full", PLAIN[name])
    assert (fast_run[0] == 0) == (name in ("example", "example-json", "comparison-json"))


def test_a_warning_and_strict_end_the_same(tmp_path, run_cli, capsys):
    """Warnings on stderr after the table, and --strict failing on them before anything is printed; from a flag and
    from the plan file (each names its origin)."""
    plan = tmp_path / "plan.yaml"
    plan.write_text(Path(EXAMPLE).read_text(encoding="utf-8") + "state_dtype: float32\n", encoding="utf-8")
    for given in ([*LLAMA, "--state-dtype", "float32"], [str(plan)]):
        for extra in ([], ["--json"], ["--strict"], ["--json", "--strict"]):
            code, out, err = _in_process(capsys, [*given, *extra])
            assert (code, out, err) == run_cli("price", *given, *extra)
            assert "quotacalc: warning: state_dtype float32 changes nothing" in err
            assert code == (1 if "--strict" in extra else 0)


@pytest.mark.parametrize(
    "args",
    [
        ["--version"],
        ["kv", *LLAMA],
        ["price", "--help"],
        ["price", EXAMPLE, EXAMPLE],  # a second argument
        ["price", EXAMPLE, "--json", "--json"],
        ["price", EXAMPLE, "--gpu", "h100-sxm", "--gpu", "h200"],
        ["price", "--model=Llama-3.3-70B-Instruct"],
        ["price", "--model", "--json"],  # a value that looks like an option
        ["price", "--model"],  # no value
        ["price", EXAMPLE, "--batch", "64"],  # a number: typer checks it
        ["price", EXAMPLE, "--expert-parallel"],  # a deployment switch
        ["price", EXAMPLE, "--format", "csv"],
        ["price", EXAMPLE, "--pool", "shared"],
        ["price", EXAMPLE, "--no-such-option"],
        ["price", "-j"],
        ["price", "--", EXAMPLE],
        ["price", "\udcff.yaml"],  # an undecodable byte in the argument
    ],
)
def test_anything_else_goes_to_the_full_command_line(args):
    assert fast.parse_plain_price(args) is None


@pytest.mark.parametrize("variable", ["QUOTACALC_DEBUG", "_QUOTACALC_COMPLETE"])
def test_debugging_and_completion_go_to_the_full_command_line(monkeypatch, variable):
    monkeypatch.setenv(variable, "1")
    assert fast.parse_plain_price(["price", EXAMPLE]) is None


def test_a_fallback_writes_what_the_command_line_writes():
    """An argument the fast path leaves (a number) runs the full command line from the console script."""
    args = [EXAMPLE, "--batch", "64", "--json"]
    assert fast.parse_plain_price(["price", *args]) is None
    assert _run("fast", args) == _run("full", args)


def test_its_options_are_the_built_commands():
    """The switches, defaults and text-valued flags cli/fast.py parses are the built ``price`` command's: a new or
    changed option of price fails here until cli/fast.py agrees."""
    from quotacalc.cli.app import commands

    params = {param.name: param for param in commands["price"].params}
    deployment = fast.deployment_option_names()
    assert list(params) == [*fast.DEFAULTS, *deployment]
    for flag, name in fast.SWITCHES.items():
        switch = params[name]
        assert switch.is_flag and switch.opts == [flag] and switch.secondary_opts == []
        assert switch.default is False and fast.DEFAULTS[name] is False
    for name, default in fast.DEFAULTS.items():
        assert params[name].default == default, name
    texts = {}
    for param in params.values():  # nothing read from the environment, no callback, one value each
        assert param.envvar is None and param.callback is None and not param.multiple and param.nargs == 1
    for name in deployment:
        param = params[name]
        info = param.type_descriptor.parameter_info
        if param.type_descriptor.annotation is str and not param.is_flag and info.parser is None:
            (flag,) = param.opts
            texts[flag] = name
    assert fast.text_options() == texts
    assert {"--model", "--gpu", "--tp", "--weight-dtype"} <= set(texts)
    # The command's own options besides the switches are not parsed by the fast path.
    assert params["plan"].opts == ["plan"] and params["output_format"].opts == ["--format"]


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full (a device that is always full)")
@pytest.mark.parametrize("extra", [[], ["--json"]], ids=["table", "json"])
def test_output_that_cannot_be_written_ends_the_same(extra):
    """stdout on a full device: the same one-line error and exit code from both paths."""
    ended = {}
    for path, run in (("fast", "quotacalc.cli.entry"), ("full", "quotacalc.cli.app")):
        code = f"import sys\nsys.argv = ['quotacalc', *sys.argv[1:]]\nfrom {run} import main\nmain()\n"
        with open("/dev/full", "w") as full:
            proc = subprocess.run(
                [sys.executable, "-c", code, "price", EXAMPLE, *extra], stdout=full, stderr=subprocess.PIPE, timeout=120
            )
        ended[path] = (proc.returncode, proc.stderr)
    assert ended["fast"] == ended["full"]
    assert ended["fast"][0] == 1 and b"No space left on device" in ended["fast"][1]


def test_a_calibrated_plan_prices_the_same(tmp_path, run_cli, capsys):
    """A plan with a calibration: its figures and its warning (a batch its runs do not cover), a comparison whose
    other GPU it does not hold for, and the measured pool's record refusing another GPU."""
    import json
    import shutil

    plan = tmp_path / "plan.yaml"
    shutil.copy(EXAMPLE, plan)
    bench = Path(EXAMPLE).parent / "calibration" / "synthetic-llama-3.3-70b-h100-tp4.csv"
    assert run_cli("calibrate", plan, "--bench", bench, "--write", plan)[0] == 0
    assert "calibration:" in plan.read_text(encoding="utf-8")
    ended = {}
    for extra in ([], ["--json"], ["--gpu", "h100-sxm,h200", "--json"], ["--gpu", "h200", "--strict"]):
        ended[" ".join(extra)] = _in_process(capsys, [str(plan), *extra])
        assert ended[" ".join(extra)] == run_cli("price", str(plan), *extra), extra
    assert ended["--json"][0] == 0 and json.loads(ended["--json"][1])["calibrated"]
    rows = {row["gpu"]: row for row in json.loads(ended["--gpu h100-sxm,h200 --json"][1])["rows"]}
    assert rows["h100-sxm"]["calibrated"] is True and rows["h200"]["calibrated"] is False
    assert ended["--gpu h200 --strict"][0] != 0
