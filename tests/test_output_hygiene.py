"""Output that fits pipes and people: nothing cut at any width, warnings on stderr, dollars to 3 significant
figures, --help with defaults and units, and a JSON envelope on every command."""

from __future__ import annotations

import json
import typing
from pathlib import Path

import pytest
from pydantic import BaseModel

from quotacalc.cli import units
from quotacalc.core.deployment import Deployment, Traffic

LLAMA_70B = ("--model", "Llama-3.3-70B-Instruct", "--gpu", "h100-sxm", "--tp", "4")
LLAMA_8B = ("--model", "Llama-3.1-8B-Instruct", "--gpu", "h100-sxm")
WIDTHS = (20, 60, 80)


def _json(run_cli, *args: str) -> dict:
    code, out, err = run_cli(*args, "--json")
    assert code == 0, err
    return json.loads(out)


# --------------------------------------------------------------------------- nothing cut, at any width


@pytest.mark.parametrize("width", WIDTHS)
def test_models_listing_keeps_every_name_and_figure(run_cli, monkeypatch, width):
    models = _json(run_cli, "models")["models"]
    monkeypatch.setenv("COLUMNS", str(width))  # stdout is a pipe here, as in `quotacalc models | cat`
    code, out, err = run_cli("models")
    assert code == 0, err
    assert "…" not in out
    for model in models:
        assert model["name"] in out, (width, model["name"])
        assert model["model_type"] in out, (width, model["model_type"])
        assert f"{model['kv_bytes_per_token_bf16']:,.0f}" in out, (width, model["name"])


@pytest.mark.parametrize("width", WIDTHS)
def test_gpus_listing_keeps_every_id(run_cli, monkeypatch, width):
    gpus = _json(run_cli, "gpus")["gpus"]
    monkeypatch.setenv("COLUMNS", str(width))
    code, out, _ = run_cli("gpus")
    assert code == 0 and "…" not in out
    for gpu in gpus:
        assert gpu["id"] in out, (width, gpu["id"])
        assert f"{gpu['memory_bytes'] / 2**30:.2f} GiB" in out, (width, gpu["id"])


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("command", ["price", "size", "kv"])
def test_tables_keep_ids_and_numbers_whole(run_cli, monkeypatch, width, command):
    extra = {
        "price": (),
        "size": ("--rps", "5", "--prompt-tokens", "2000", "--output-tokens", "500"),
        "kv": ("--context", "131072"),
    }[command]
    monkeypatch.setenv("COLUMNS", str(width))
    code, out, err = run_cli(command, *LLAMA_70B, *extra)
    assert code == 0, err
    assert "…" not in out
    assert "Llama-3.3-70B-Instruct" in out  # the title wraps in the terminal, never inside the id
    if command == "price":
        assert "70,553,706,496" in out  # total parameters, the widest figure
        assert "327,680 B" in out  # KV bytes per token


def test_a_model_name_with_markup_and_escapes_is_printed_as_text(run_cli, monkeypatch, tmp_path):
    source = json.loads((Path(__file__).parent.parent / "models/Llama-3.1-8B-Instruct/config.json").read_text())
    folder = tmp_path / "[bold]x\x1b[31m"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(source))
    monkeypatch.setenv("COLUMNS", "200")
    code, out, err = run_cli("price", "--model", str(folder), "--gpu", "h100-sxm")
    assert code == 0, err
    assert "[bold]x?[31m" in out  # markup shown as typed, the escape as '?'
    assert "\x1b" not in out


# --------------------------------------------------------------------------- warnings go to stderr


def test_warnings_go_to_stderr_in_tables_and_json(run_cli):
    # 100,000 sequences of 1,700 tokens need 100,000 x 1,700 x 131,072 B = 22 TB of KV: no H100 holds that.
    code, out, err = run_cli("price", *LLAMA_8B, "--batch", "100000")
    assert code == 0, err
    assert "warning" not in out
    assert err.startswith("quotacalc: warning: ") and "KV pool" in err
    code, out, err = run_cli("price", *LLAMA_8B, "--batch", "100000", "--json")
    document = json.loads(out)
    assert document["warnings"] and err.count("quotacalc: warning: ") == len(document["warnings"])


# --------------------------------------------------------------------------- dollars


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        (0.0247, "$0.0247"),
        (0.024749, "$0.0247"),
        (0.15, "$0.150"),
        (7200, "$7,200"),
        (7213.4, "$7,213"),
        (7076.21, "$7,076"),
        (24.66, "$24.7"),
        (999.4, "$999"),
        (999.6, "$1,000"),
        (-7213.6, "-$7,214"),
        (1_234_567, "$1,234,567"),
        (0.0000123456, "$0.0000123"),
        (0, "$0"),
    ],
)
def test_dollars_have_three_significant_figures_below_a_thousand_then_whole_dollars(value, shown):
    assert units.usd(value) == shown


def test_price_table_shows_dollars_to_three_figures(run_cli, monkeypatch):
    # 4 GPUs x $2.5 x 720 h = $7,200 a month; $ per 1M prompt tokens = 7,200 / (units/s x 3,600 x 720) x 1e6 is
    # a figure below $1, shown with three significant digits.
    monkeypatch.setenv("COLUMNS", "200")
    code, out, _ = run_cli("price", *LLAMA_70B, "--weight-dtype", "fp8")
    assert code == 0
    assert "$7,200/month" in out
    line = next(line for line in out.splitlines() if "$ per 1M prompt tokens" in line)
    figure = next(word for word in line.split() if word.startswith("$0."))
    digits = figure.removeprefix("$0.").lstrip("0")
    assert len(digits) == 3, line


# --------------------------------------------------------------------------- --help


def _structured(annotation: object) -> bool:
    members = typing.get_args(annotation) or (annotation,)
    return any(isinstance(member, type) and issubclass(member, BaseModel) for member in members)


def _shown(value: object) -> str:
    from enum import Enum

    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, Enum):  # as typed on the command line: roofline, not PricingBasis.ROOFLINE
        return str(value.value)
    return f"{value:g}" if isinstance(value, float) else str(value)


@pytest.mark.parametrize(("command", "models"), [("price", (Deployment,)), ("size", (Deployment, Traffic))])
def test_help_shows_every_default_and_no_bool_placeholder(run_cli, command, models):
    code, out, _ = run_cli(command, "--help")
    assert code == 0
    assert "<bool>" not in out
    flat = " ".join(out.split())
    for model in models:
        for name, field in model.model_fields.items():
            if _structured(field.annotation):
                continue  # a mapping (measured-with, ...) is a file's business, with no flag
            flag = "--" + name.replace("_", "-")
            assert flag in flat, flag
            if field.default is not None and not field.is_required():
                assert f"[default: {_shown(field.default)}]" in flat, flag
    assert "--expert-parallel / --no-expert-parallel" in flat


@pytest.mark.parametrize(
    ("flag", "unit"),
    [
        ("--tp", "GPUs"),
        ("--context", "tokens"),
        ("--gpu-hour-usd", "USD"),
        ("--runtime-reserve-gib", "GiB"),
        ("--burst-s", "s of"),
        ("--mfu", "fraction"),
        ("--hours-per-month", "h "),
    ],
)
def test_help_states_units(run_cli, flag, unit):
    _, out, _ = run_cli("price", "--help")
    flat = " ".join(out.split())
    after = flat.split(f" {flag} ", 1)[1].split(" --", 1)[0]
    assert unit in after, (flag, after)


def _commands() -> list[str]:
    from quotacalc.cli.app import commands

    return list(commands)


@pytest.mark.parametrize("command", _commands())
def test_help_shows_no_developer_notes(run_cli, command):
    """A docstring's notes for developers (reST literals, module paths) stay out of --help."""
    code, out, _ = run_cli(command, "--help")
    assert code == 0 and "Usage" in out
    for leak in ("``", "cli/app.py", "deployment_flags", "with_options"):
        assert leak not in out, (command, leak)


@pytest.mark.parametrize("args", [(), ("price",), ("kv",), ("models",), ("gpus",)])
def test_no_help_shows_bool_placeholders(run_cli, args):
    _, out, _ = run_cli(*args, "--help")
    assert "Usage" in out and "<bool>" not in out


# --------------------------------------------------------------------------- the JSON envelope


@pytest.mark.parametrize(
    "args",
    [
        ("price", *LLAMA_8B),
        ("size", *LLAMA_8B, "--rps", "1", "--prompt-tokens", "10", "--output-tokens", "10"),
        ("kv", *LLAMA_8B, "--context", "1000"),
        ("models",),
        ("gpus",),
    ],
    ids=["price", "size", "kv", "models", "gpus"],
)
def test_every_json_output_names_its_command_and_schema(run_cli, args):
    document = _json(run_cli, *args)
    assert document["command"] == args[0]
    assert isinstance(document["schema_version"], int) and document["schema_version"] >= 2


def test_size_json_keeps_its_inputs_once_and_compact(run_cli):
    code, out, _ = run_cli(
        "size", *LLAMA_70B, "--rps", "5", "--prompt-tokens", "2000", "--output-tokens", "500", "--json"
    )
    assert code == 0
    document = json.loads(out)
    assert out.count('"params_by_group"') == 1  # the model's inputs appear once
    assert "sources" not in document["inputs"]["gpu"]  # `quotacalc gpus --json` has them
    assert "explain" not in document  # only with --explain
    # 14.5 kB before: the steps and the GPU's sources every time (6.5 kB with the GPU's matmul efficiencies and
    # window_kv_bytes_per_token)
    assert len(out) < 7_000, len(out)
    with_steps = _json(
        run_cli, "size", *LLAMA_70B, "--rps", "5", "--prompt-tokens", "2000", "--output-tokens", "500", "--explain"
    )
    assert with_steps["explain"] and with_steps["results"] == document["results"]


@pytest.mark.parametrize("width", WIDTHS)
def test_platform_size_and_check_tables_keep_names_and_figures(run_cli, monkeypatch, width):
    plan = str(Path(__file__).parent.parent / "examples" / "platform.yaml")
    rows = _json(run_cli, "size", plan)["tenants"]
    monkeypatch.setenv("COLUMNS", str(width))
    _, out, _ = run_cli("size", plan)
    assert "…" not in out
    for row in rows:
        assert row["name"] in out and row["pool"] in out and row["tier"] in out, (width, row["name"])
        assert f"{row['units_per_s']:,.0f}" in out, (width, row["name"])
    _, out, _ = run_cli("check", plan)
    assert "…" not in out and "tenants.stark" in out


def test_a_number_of_hundreds_of_digits_is_abbreviated_in_an_error_line():
    from quotacalc.errors import printable

    # 10**400 from an unquoted YAML 1e400: its 401 digits filled the line; a digest or a 39-digit figure stays.
    assert printable(f"got {10**400}") == "got 1.000e+400 (a 401-digit number)"
    assert printable("got 1,234" + ",567" * 13) == "got 1.234e+42 (a 43-digit number)"
    assert printable("sha " + "a1" * 32) == "sha " + "a1" * 32
    assert printable("x " + "9" * 39) == "x " + "9" * 39
