"""The figures' declarations (quotacalc/core/figures.py) are what price's, size's and kv's JSON and tables, price's
explain steps and docs/figures.md carry: a figure declared once reaches every output, and no output lists one the
registry does not."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from quotacalc import Deployment, price, resolve
from quotacalc.cli import units
from quotacalc.cli.json_out import price_results_json
from quotacalc.core.deployment import Traffic
from quotacalc.core.explain import fmt
from quotacalc.core.figures import FIGURES, declared, figures_markdown, json_keys, substitute
from quotacalc.core.kv import RequestKvResult, request_kv
from quotacalc.core.price import PriceResult
from quotacalc.core.traffic import SizeResult, size_traffic

ROOT = Path(__file__).resolve().parent.parent
#: PriceResult's fields that are no figure: what --explain, the warnings and the inputs carry.
NOT_FIGURES = {"steps", "warnings", "pricing_warnings", "inputs"}
#: SizeResult's and RequestKvResult's fields that are no figure: the steps, the replica (the JSON's ``replica``) and
#: the traffic sized (the JSON's ``tenant``).
NOT_SIZE_OR_KV_FIGURES = {"steps", "replica", "traffic"}
#: The worked example of docs/method.md §7, and two deployments that show the rows shown only sometimes.
EXAMPLE = dict(model="Llama-3.3-70B-Instruct", gpu="h100-sxm", tp=4, weight_dtype="fp8", kv_dtype="bf16")


@pytest.fixture(scope="module")
def worked():
    return price(resolve(Deployment(**EXAMPLE, kv_pool_tokens=646_503)))


@pytest.fixture(scope="module")
def engine_basis():
    return price(resolve(Deployment(**EXAMPLE, pricing_basis="engine")))


@pytest.fixture(scope="module")
def windowed():
    """gemma 3: windowed layers, a KV pool at context below the logged one, active below total parameters."""
    return price(resolve(Deployment(model="gemma-3-27b-it", gpu="h100-sxm", tp=2)))


def _load_script(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_price_result_field_is_declared_and_nothing_else():
    fields = set(PriceResult.model_fields) - NOT_FIGURES
    assert json_keys("price") == fields


@pytest.mark.parametrize(("command", "model"), [("size", SizeResult), ("kv", RequestKvResult)])
def test_size_and_kv_declare_every_field_of_their_results_in_its_order(command, model):
    assert [figure.key for figure in declared(command)] == [
        name for name in model.model_fields if name not in NOT_SIZE_OR_KV_FIGURES
    ]


def test_keys_are_unique_in_a_command_and_doc_rows_join_a_declared_figure_of_their_command():
    keys = [(figure.command, figure.key) for figure in FIGURES]
    assert len(keys) == len(set(keys))
    by_key = {(figure.command, figure.key): figure for figure in FIGURES}
    for figure in FIGURES:
        assert (figure.meaning is None) == (figure.doc_with is not None), figure.key
        if figure.doc_with is not None:
            head = by_key[figure.command, figure.doc_with]
            assert head.meaning is not None, figure.key
            assert keys.index((head.command, head.key)) < keys.index((figure.command, figure.key)), figure.key


def test_json_results_are_the_declared_keys_in_price_results_order(worked):
    results = price_results_json(worked)
    assert list(results) == [name for name in PriceResult.model_fields if name not in NOT_FIGURES]


def test_json_of_the_cli_carries_the_declared_keys_of_price_size_and_kv(run_cli):
    example = ROOT / "examples" / "llama-3.3-70b-h100.yaml"
    code, out, err = run_cli("price", str(example), "--json")
    assert code == 0, err
    assert set(json.loads(out)["results"]) == json_keys("price")
    for command, extra in (("kv", ["--context", "131072"]), ("size", [])):
        code, out, err = run_cli(command, str(example), *extra, "--json")
        assert code == 0, err
        document = json.loads(out)
        assert list(document["results"]) == [figure.key for figure in declared(command)], command
        assert set(document["replica"]) == json_keys("price")
    # the traffic sized is the document's tenant, not a figure among the results
    assert document["tenant"] == {"rps": 5, "prompt_tokens": 2000, "output_tokens": 500, "cached_fraction": 0}


@pytest.mark.parametrize("result", ["worked", "engine_basis", "windowed"])
def test_every_explain_step_of_a_declared_figure_has_its_declared_unit(request, result):
    priced = request.getfixturevalue(result)
    units_by_key = {figure.key: figure.unit for figure in declared("price")}
    checked = [step for step in priced.steps if step.name in units_by_key]
    assert len(checked) > 30
    for step in checked:
        assert step.unit == units_by_key[step.name], step.name


@pytest.mark.parametrize("result", ["worked", "engine_basis", "windowed"])
def test_the_table_shows_a_row_for_each_declared_row_that_applies(request, run_cli, result):
    priced = request.getfixturevalue(result)
    rows = [figure.row for figure in declared("price") if figure.row is not None]
    shown = [row for row in rows if row.shown(priced)]
    hidden = [row for row in rows if not row.shown(priced)]
    labels = [row.label(priced, units) for row in shown]
    assert len(labels) == len(set(labels)) >= 18
    if result == "worked":  # a dense model of attention only, on the roofline basis
        assert [row.label(priced, units) for row in hidden] == [
            "parameters (active)",
            "+ windowed KV per token",
            "state per sequence",
            "engine prompt token",
            "KV pool at 1,700 tokens",
        ]
    if result == "windowed":
        assert {"parameters (active)", "+ windowed KV per token", "KV pool at 1,700 tokens"} <= set(labels)
    if result == "engine_basis":
        assert "engine prompt token" in labels


def test_docs_figures_table_is_rendered_from_the_declarations():
    script = _load_script("build_figures_doc")
    page = (ROOT / "docs" / "figures.md").read_text(encoding="utf-8")
    assert script.with_table(page, figures_markdown()) == page, "run: python scripts/build_figures_doc.py"
    table = figures_markdown()
    for figure in FIGURES:
        assert f"`{figure.key}`" in table


def test_a_doc_row_lists_every_key_sharing_its_meaning():
    table = figures_markdown()
    row = next(line for line in table.splitlines() if line.startswith("| `usd_per_million_prompt_tokens`"))
    assert row.startswith(
        "| `usd_per_million_prompt_tokens`, `usd_per_million_cached_prompt_tokens`, `usd_per_million_output_tokens` |"
    )
    assert next(line for line in table.splitlines() if "`bucket_depth_units`" in line).startswith(
        "| `bucket_rate_units_per_s`, `bucket_depth_units` (size) |"
    )


def test_substitute_replaces_whole_names_longest_first():
    values = {"tp": 4, "replica_units_per_s": 18_232, "units": 2}
    assert substitute("replica_units_per_s × 3600 / tp", values) == "18,232 × 3600 / 4"
    # "units" inside another name stays: only whole names are numbers
    assert substitute("units + replica_units_per_s", values) == "2 + 18,232"
    assert substitute("tpx / tp", {"tp": 2}) == "tpx / 2"


def test_a_derived_figure_is_recorded_with_its_declared_formula_and_numbers(worked):
    step = next(step for step in worked.steps if step.name == "units_per_gpu_hour")
    assert step.formula == "replica_units_per_s × 3600 / tp"
    assert step.substituted == f"{fmt(worked.replica_units_per_s)} × 3600 / 4"
    assert step.value == worked.units_per_gpu_hour and step.unit == "units"


def test_a_derived_figure_follows_the_basis_its_inputs_follow(worked, engine_basis):
    # replica_units_per_s follows the pricing basis; so does what a GPU-hour sells
    for priced in (worked, engine_basis):
        assert priced.units_per_gpu_hour == pytest.approx(priced.replica_units_per_s * 3600 / 4, rel=1e-12)
    assert engine_basis.units_per_gpu_hour < worked.units_per_gpu_hour


def test_the_gpu_hour_row_names_one_gpu_in_the_singular():
    priced = price(resolve(Deployment(model="Llama-3.1-8B-Instruct", gpu="h100-sxm", tp=1)))
    row = next(figure.row for figure in declared("price") if figure.key == "units_per_gpu_hour")
    assert row.how(priced, units) == "replica budget × 3600 s / 1 GPU"
    assert row.value(priced, units) == f"{units.count(priced.replica_units_per_s * 3600)} units"
    assert row.value(priced, units).endswith(" M units")


def _rows(command, result):
    """The (quantity, value, how) rows the table of ``command`` shows for ``result``, from the declarations."""
    return [
        (row.label(result, units), row.value(result, units), row.how(result, units))
        for figure in declared(command)
        if (row := figure.row) is not None and row.shown(result)
    ]


def test_kv_rows_show_the_windowed_part_and_never_fill_for_a_request_larger_than_the_pool(windowed):
    """gemma 3 at 100,000 tokens: its sliding layers hold a window's KV, and the pool holds a few such requests;
    Llama 3.1 8B on one L4 (24 GB, 16 GB of bf16 weights) holds less than one 120,000-token request."""
    rows = {label: (value, how) for label, value, how in _rows("kv", request_kv(windowed, 100_000))}
    assert list(rows)[:3] == ["request KV", "per GPU", "of which windowed KV"]
    assert "of which fixed state" not in rows
    assert rows["fill the replica"][1] == "requests" and int(rows["fill the replica"][0]) >= 1
    small = price(resolve(Deployment(model="Llama-3.1-8B-Instruct", gpu="l4")))
    request = request_kv(small, 120_000)
    assert request.pool_share > 1
    assert dict((label, (value, how)) for label, value, how in _rows("kv", request))["fill the replica"] == (
        "never",
        "one request is larger than the whole pool",
    )


def test_size_rows_carry_every_figure_with_a_row_in_the_declared_order(worked):
    result = size_traffic(worked, Traffic(rps=5, prompt_tokens=2000, output_tokens=500))
    rows = _rows("size", result)
    assert [label for label, _, _ in rows] == [
        "units per request",
        "load",
        "replicas",
        "token bucket rate",
        "token bucket depth",
        "shared",
        "dedicated",
        "one request's KV",
    ]
    dedicated = rows[6]
    assert dedicated[2] == f"{result.dedicated_replicas} whole replica(s)"
    assert dedicated[1] == f"{units.usd(result.dedicated_total_usd_per_month)}/month"
