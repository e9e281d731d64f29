"""Start-up stays lazy, and Ctrl-C during it stays one line and exit 130.

Laziness is checked by what a run imports and builds (``sys.modules`` and the commands built, read
in a fresh interpreter), never by timing it: the timings are bench/startup.py's and docs/benchmarks.md's.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

LLAMA = ["--model", "Llama-3.3-70B-Instruct", "--gpu", "h100-sxm", "--tp", "4", "--weight-dtype", "fp8"]

#: What no pricing command needs: the other commands' modules and the heavy libraries behind them.
OTHER_COMMANDS = (
    "quotacalc.cli.calibrate",
    "quotacalc.cli.calibrate_out",
    "quotacalc.cli.simulate",
    "quotacalc.cli.sim_plot",
    "quotacalc.cli.plan_cmds",
    "quotacalc.cli.examples",
    "quotacalc.cli.models_doc",
    "quotacalc.cli.fleet",
    "quotacalc.fleet",
    "duckdb",
    "sqlglot",
    "quotacalc.core.calibrate",
    "quotacalc.inputs.benchmarks",
    "quotacalc.inputs.plan",  # read only when a plan file is given
    "quotacalc.sim",
    "quotacalc.exporters",
    "scipy",
    "numpy",
    "matplotlib",
    "transformers",
    "huggingface_hub",
    "yaml",
)
#: --json output is written without the tables (rich).
TABLES = ("quotacalc.cli.tables", "rich")

#: Runs ``quotacalc ARGS`` as the console script does, then writes what the process imported and which
#: commands it built to the file named first.
_RUN_AND_REPORT = """
import sys
report, sys.argv = sys.argv[1], ["quotacalc", *sys.argv[2:]]
from quotacalc.cli.entry import main
try:
    main()
finally:
    import json
    app = sys.modules.get("quotacalc.cli.app")
    built = sorted(app.commands.built) if app else None
    with open(report, "w") as handle:
        json.dump({"modules": sorted(sys.modules), "built": built}, handle)
"""


def _run_and_report(tmp_path: Path, *args: str) -> dict:
    report = tmp_path / "report.json"
    proc = subprocess.run([sys.executable, "-c", _RUN_AND_REPORT, str(report), *args], capture_output=True, timeout=120)
    assert proc.returncode == 0, proc.stderr.decode()[-400:]
    return json.loads(report.read_text())


def _loaded(modules: list[str], names: tuple[str, ...]) -> list[str]:
    return [module for module in modules if any(module == name or module.startswith(name + ".") for name in names)]


@pytest.mark.parametrize(
    ("args", "command"),
    [
        (["price", *LLAMA, "--json", "--batch", "128"], "price"),  # a number: typer parses it (cli/fast.py)
        (["kv", *LLAMA, "--context", "131072", "--json"], "kv"),
        (["size", *LLAMA, "--rps", "5", "--prompt-tokens", "2000", "--output-tokens", "500", "--json"], "size"),
        (["gpus", "--json"], "gpus"),
        (["models", "--json"], "models"),
    ],
    ids=["price", "kv", "size", "gpus", "models"],
)
def test_a_json_call_builds_its_command_alone(tmp_path, args, command):
    report = _run_and_report(tmp_path, *args)
    assert report["built"] == [command]
    assert _loaded(report["modules"], OTHER_COMMANDS + TABLES) == []


@pytest.mark.parametrize(
    "args",
    [
        ["price", str(Path(__file__).parent.parent / "examples" / "llama-3.3-70b-h100.yaml")],
        ["price", str(Path(__file__).parent.parent / "examples" / "llama-3.3-70b-h100.yaml"), "--json"],
        ["price", *LLAMA, "--json"],
    ],
    ids=["example", "example-json", "flags-json"],
)
def test_a_plain_price_builds_no_command_line(tmp_path, args):
    """cli/fast.py runs it: no typer, no command built, nothing of the other commands; --json without rich."""
    report = _run_and_report(tmp_path, *args)
    assert report["built"] is None  # cli/app.py never imported
    # A plan file is read (and parsed by PyYAML the first time this cache sees it).
    read = ("quotacalc.inputs.plan", "yaml") if args[1].endswith(".yaml") else ()
    others = tuple(name for name in OTHER_COMMANDS if name not in read)
    unwanted = ("typer", "click", "quotacalc.cli.app", "quotacalc.cli.lazy", *others)
    assert _loaded(report["modules"], unwanted + (TABLES if "--json" in args else ())) == []


def test_a_plan_read_again_is_not_parsed_again(tmp_path):
    """The worked example's plan is parsed once (PyYAML), then read from the cache by content; a plan without a
    calibration does not import the calibration module; a shipped model's spec needs no family reader."""
    example = Path(__file__).parent.parent / "examples" / "llama-3.3-70b-h100.yaml"
    plan = tmp_path / "plan.yaml"
    # Bytes of this test's own (another test may have cached the example's in this session's cache).
    plan.write_text(example.read_text(encoding="utf-8") + f"# {tmp_path.name}\n", encoding="utf-8")
    first = _run_and_report(tmp_path, "price", str(plan), "--json")
    again = _run_and_report(tmp_path, "price", str(plan), "--json")
    assert _loaded(first["modules"], ("yaml",)) != []
    assert _loaded(again["modules"], ("yaml", "quotacalc.core.calibrate", "quotacalc.inputs.hf_hybrid")) == []
    plan.write_text(plan.read_text(encoding="utf-8").replace("batch: 128", "batch: 64"), encoding="utf-8")
    changed = _run_and_report(tmp_path, "price", str(plan), "--json")
    assert _loaded(changed["modules"], ("yaml",)) != []  # other bytes: parsed


def test_help_builds_no_command_and_imports_no_model(tmp_path):
    report = _run_and_report(tmp_path, "--help")
    assert report["built"] == []
    # No option table, so no input model and no pydantic; the listing comes from the declared summaries.
    assert (
        _loaded(report["modules"], ("pydantic", "quotacalc.core", "quotacalc.inputs", *OTHER_COMMANDS, *TABLES)) == []
    )


def test_a_command_help_builds_that_command_alone(tmp_path):
    report = _run_and_report(tmp_path, "calibrate", "--help")
    assert report["built"] == ["calibrate"]
    assert _loaded(report["modules"], ("scipy", "quotacalc.core.calibrate", "quotacalc.cli.simulate")) == []


def test_the_listing_is_what_each_command_says_of_itself(run_cli):
    """Each declared summary is the first paragraph of the built command's help, and the top-level listing
    (from summaries) reads as typer's own listing of the built commands."""
    import typer
    from typer.core import TyperGroup

    from quotacalc.cli.app import app, commands

    built = {name: commands[name] for name in commands}
    assert list(built) == [
        *("price", "size", "kv", "models", "gpus", "engines", "schema", "check", "generate", "targets", "examples"),
        "simulate",
        "calibrate",
        "emulate",
        "fleet",
    ]
    for name, command in built.items():
        assert command.help.split("\n\n")[0] == commands.summary(name), name
    group = typer.main.get_command(app)
    for width in (40, 80, 200):
        ctx = typer.Context(group, info_name="quotacalc", terminal_width=width)
        lazy, eager = ctx.make_formatter(), ctx.make_formatter()
        group.format_commands(ctx, lazy)
        TyperGroup(commands=built, rich_markup_mode=None).format_commands(ctx, eager)
        assert lazy.getvalue() == eager.getvalue()
        assert all(f"  {name}  " in lazy.getvalue() for name in built)
    code, out, _ = run_cli("--help")
    assert code == 0 and all(f"  {name} " in out for name in built)


# --------------------------------------------------------------------------- Ctrl-C during start-up


def test_the_console_script_imports_nothing_before_its_guard():
    """What runs before ``entry.main``'s guard is up: the package's and cli's __init__ and entry.py, nothing else."""
    code = (
        "import json, sys; before = set(sys.modules); import quotacalc.cli.entry; "
        "print(json.dumps(sorted(set(sys.modules) - before)))"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert set(json.loads(proc.stdout)) <= {"__future__", "quotacalc", "quotacalc.cli", "quotacalc.cli.entry"}


#: Ctrl-C, deterministically: an import hook interrupts the first import of one module, by raising
#: KeyboardInterrupt or by sending the process SIGINT (Python's handler raises it at the next instruction).
_INTERRUPT_AT_IMPORT = """
import os, signal, sys
module, how, mark = sys.argv[1:4]
sys.argv = ["quotacalc", *sys.argv[4:]]

class Interrupt:
    def find_spec(self, name, path=None, target=None):
        if name == module:
            sys.meta_path.remove(self)
            open(mark, "w").close()
            if how == "signal":
                os.kill(os.getpid(), signal.SIGINT)
            raise KeyboardInterrupt
        return None

sys.meta_path.insert(0, Interrupt())
from quotacalc.cli.entry import main
main()
"""


#: A price the full command line parses (a number among its flags), and one cli/fast.py runs.
_FULL = ["price", *LLAMA, "--json", "--batch", "128"]
_FAST = ["price", *LLAMA, "--json"]


@pytest.mark.parametrize(
    ("module", "how", "args"),
    [
        ("typing", "signal", _FULL),  # the first import of all: typer's, once the package's __init__ imported none
        ("typer", "raise", _FULL),  # importing the CLI's libraries
        ("quotacalc.cli.lazy", "signal", _FULL),
        ("pydantic", "signal", _FULL),  # parsing the options
        ("quotacalc.core.deployment", "raise", _FULL),  # building the command's options
        ("quotacalc.inputs.resolve", "raise", _FULL),  # running the command
        ("quotacalc.cli.json_out", "signal", _FULL),  # writing its output
        ("quotacalc.cli.fast", "raise", _FAST),  # recognising a plain price
        ("quotacalc.core.deployment", "signal", _FAST),  # reading its options
        ("quotacalc.cli.outcome", "raise", _FAST),
        ("quotacalc.inputs.resolve", "signal", _FAST),
        ("quotacalc.cli.json_out", "raise", _FAST),
    ],
)
def test_ctrl_c_while_importing_is_one_line_and_130(tmp_path, module, how, args):
    mark = tmp_path / "interrupted"
    proc = subprocess.run(
        [sys.executable, "-c", _INTERRUPT_AT_IMPORT, module, how, str(mark), *args],
        capture_output=True,
        timeout=120,
        env={key: value for key, value in os.environ.items() if key != "QUOTACALC_DEBUG"},
    )
    assert mark.exists(), f"{module} was never imported: the test interrupted nothing"
    assert proc.returncode == 130, proc.stderr.decode()[-400:]
    assert proc.stderr.decode().splitlines() == ["quotacalc: interrupted"]
    assert proc.stdout == b""
