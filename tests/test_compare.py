"""Comparing GPUs and TP sizes side by side: rows, reasons, and the four output formats.

Figures are checked against hand computations (docs/method.md §6: a replica costs GPUs × $/GPU-hour × hours)
and against the single-deployment command for the same deployment, never against copied output.
"""

from __future__ import annotations

import csv
import io
import json
import math
from pathlib import Path
from types import SimpleNamespace

import pytest

from quotacalc.cli.json_out import JSON_SCHEMA_VERSION
from quotacalc.core.compare import PRICE_KEYS, SIZE_KEYS, compare
from quotacalc.core.deployment import Deployment, Traffic
from quotacalc.errors import EXIT_INVALID_INPUT, EXIT_USAGE, QuotacalcError, UsageError

MODEL = ("--model", "Llama-3.3-70B-Instruct", "--weight-dtype", "fp8", "--kv-dtype", "bf16", "--context", "1700")
TENANT = ("--rps", "5", "--prompt-tokens", "2000", "--output-tokens", "500")
GPU_HOUR_USD, HOURS = 2.5, 720


def _json(run_cli, *args: str) -> dict:
    code, out, err = run_cli(*args)
    assert code == 0, err
    return json.loads(out)


@pytest.fixture
def price_rows(run_cli) -> dict:
    """price on h100-sxm and l4 at TP 2, 3 and 8, as the JSON comparison document."""
    return _json(run_cli, "price", *MODEL, "--gpu", "h100-sxm,l4", "--tp", "2,3,8", "--json")


def test_json_document_has_command_schema_and_one_row_per_combination_in_order(price_rows):
    assert price_rows["schema_version"] == JSON_SCHEMA_VERSION and price_rows["command"] == "price"
    shared = price_rows["inputs"]["deployment"]
    assert shared["model"] == "Llama-3.3-70B-Instruct" and "gpu" not in shared and "tp" not in shared
    order = [(row["gpu"], row["tp"]) for row in price_rows["rows"]]
    assert order == [(gpu, tp) for gpu in ("h100-sxm", "l4") for tp in (2, 3, 8)]
    for row in price_rows["rows"]:
        assert tuple(row) == PRICE_KEYS  # stable keys, in a stable order


def test_infeasible_rows_carry_the_reason_and_no_figures(price_rows):
    rows = {(row["gpu"], row["tp"]): row for row in price_rows["rows"]}
    for gpu in ("h100-sxm", "l4"):
        row = rows[(gpu, 3)]
        assert row["feasible"] is False
        assert row["reason"].startswith("--tp: 3 does not divide") and "heads" in row["reason"]
        assert row["usd_per_million_prompt_tokens"] is None and row["kv_pool_tokens"] is None
    # 70.55e9 FP8 parameters over 2 GPUs: 35.3 GB each, more than an L4 holds (24 GB).
    too_small = rows[("l4", 2)]
    assert too_small["feasible"] is False and "does not fit" in too_small["reason"]


def test_feasible_rows_follow_the_method(price_rows):
    rows = {(row["gpu"], row["tp"]): row for row in price_rows["rows"]}
    for (_gpu, tp), row in rows.items():
        if not row["feasible"]:
            continue
        assert row["reason"] is None
        # docs/method.md §6: a replica costs GPUs × $/GPU-hour × hours/month (TP 8: 8 × 2.5 × 720 = 14,400).
        assert math.isclose(row["dedicated_usd_per_month"], tp * GPU_HOUR_USD * HOURS)
        # Output tokens cost W prompt tokens, so the two prices differ by exactly W.
        assert math.isclose(
            row["usd_per_million_output_tokens"], row["output_weight"] * row["usd_per_million_prompt_tokens"]
        )
    # The replica budget is ceiling / prompt-token time, and prompt-token time is 1/TP: TP 8 sells twice TP 4's...
    h100 = {tp: rows[("h100-sxm", tp)] for tp in (2, 8)}
    assert math.isclose(h100[8]["replica_units_per_s"], 4 * h100[2]["replica_units_per_s"])
    # ...at the same $ per token (GPUs and budget both scale with TP).
    assert math.isclose(h100[8]["usd_per_million_prompt_tokens"], h100[2]["usd_per_million_prompt_tokens"])


def test_a_row_matches_the_single_deployment_command(run_cli, price_rows):
    single = _json(run_cli, "price", *MODEL, "--gpu", "h100-sxm", "--tp", "8", "--json")["results"]
    row = next(row for row in price_rows["rows"] if (row["gpu"], row["tp"]) == ("h100-sxm", 8))
    for key in ("usd_per_million_prompt_tokens", "usd_per_million_output_tokens", "output_weight", "kv_pool_tokens"):
        assert row[key] == single[key], key


def test_size_rows_add_the_tenant(run_cli):
    document = _json(run_cli, "size", *MODEL, *TENANT, "--gpu", "h100-sxm,h200", "--tp", "4,8", "--format", "json")
    assert document["command"] == "size"
    for row in document["rows"]:
        assert set(SIZE_KEYS) <= set(row) and set(PRICE_KEYS) <= set(row)
        assert row["feasible"], row["reason"]
        assert math.isclose(row["replicas"], row["units_per_s"] / row["replica_units_per_s"])
        assert math.isclose(row["shared_usd_per_month"], row["replicas"] * row["dedicated_usd_per_month"])
        assert row["dedicated_replicas"] == math.ceil(row["replicas"])
        assert math.isclose(
            row["dedicated_total_usd_per_month"], row["dedicated_replicas"] * row["dedicated_usd_per_month"]
        )
    # The tenant's load in units does not depend on the TP size on the same GPU (W does not).
    by = {(row["gpu"], row["tp"]): row for row in document["rows"]}
    assert math.isclose(by[("h200", 4)]["units_per_s"], by[("h200", 8)]["units_per_s"])


def test_csv_parses_with_the_json_keys(run_cli):
    code, out, err = run_cli("price", *MODEL, "--gpu", "h100-sxm,l4", "--tp", "2,8", "--format", "csv")
    assert code == 0, err
    reader = csv.DictReader(io.StringIO(out))
    assert tuple(reader.fieldnames) == PRICE_KEYS
    rows = list(reader)
    assert [(row["gpu"], row["tp"]) for row in rows] == [
        ("h100-sxm", "2"),
        ("h100-sxm", "8"),
        ("l4", "2"),
        ("l4", "8"),
    ]
    assert [row["feasible"] for row in rows] == ["true", "true", "false", "true"]
    assert {row["calibrated"] for row in rows} == {"false"}  # no plan, no calibration
    assert rows[2]["usd_per_million_prompt_tokens"] == "" and "does not fit" in rows[2]["reason"]
    assert float(rows[1]["dedicated_usd_per_month"]) == 8 * GPU_HOUR_USD * HOURS


def test_markdown_table_has_a_cell_per_column(run_cli):
    code, out, err = run_cli("size", *MODEL, *TENANT, "--gpu", "h100-sxm", "--tp", "2,3", "--format", "markdown")
    assert code == 0, err
    table = [line for line in out.splitlines() if line.startswith("|")]
    header = [cell.strip() for cell in table[0].strip("|").split("|")]
    assert header[:3] == ["GPU", "TP", "$/M prompt"] and header[-1] == "status"
    assert {"replicas", "shared $/month", "dedicated $/month"} <= set(header)
    assert set(table[1].replace("|", "").replace(":", "")) == {"-"}  # the separator row
    for line in table[2:]:
        cells = line.strip("|").split(" | ")
        assert len(cells) == len(header), line
    infeasible = next(line for line in table if line.startswith("| h100-sxm | 3 |"))
    mark = infeasible.rsplit("no [", 1)[1].split("]")[0]  # the row points at its numbered reason
    assert f"\n{mark}. h100-sxm TP 3: --tp: 3 does not divide" in out


def test_a_row_error_names_the_plan_for_a_value_the_plan_gave(run_cli, tmp_path):
    plan = tmp_path / "plan.yaml"
    plan.write_text("model: Llama-3.3-70B-Instruct\ntp: 3\n", encoding="utf-8")
    code, out, err = run_cli("price", str(plan), "--gpu", "h100-sxm,h200", "--json")
    assert code == 1 and "none of the 2 GPU and TP combinations can run it" in err
    reasons = [row["reason"] for row in json.loads(out)["rows"]]
    assert reasons == [f"{plan}: tp: 3 does not divide" + reasons[0].split("does not divide", 1)[1]] * 2


def test_table_lists_reasons_under_the_rows(run_cli):
    code, out, err = run_cli("price", *MODEL, "--gpu", "h100-sxm", "--tp", "3,8")
    assert code == 0, err
    assert "status" in out and "no [1]" in out
    assert "[1] h100-sxm TP 3: --tp: 3 does not divide" in " ".join(out.split())


def test_one_gpu_and_tp_keeps_the_single_deployment_output(run_cli):
    plain = run_cli("price", *MODEL, "--gpu", "h100-sxm", "--tp", "4")
    assert plain[0] == 0 and "quantity" in plain[1] and "status" not in plain[1]
    repeated = run_cli("price", *MODEL, "--gpu", "h100-sxm,h100-sxm", "--tp", "4,4")  # one combination
    assert repeated == plain


@pytest.mark.parametrize(
    ("args", "code", "needles"),
    [
        (("--gpu", "h100-sxm", "--tp", "4,x"), EXIT_USAGE, ("--tp", "'x' is not a whole number")),
        (("--gpu", "h100-sxm", "--tp", "4,8.0"), EXIT_USAGE, ("--tp", "'8.0' is not a whole number")),
        (("--gpu", "h100-sxm", "--tp", "4,,8"), EXIT_USAGE, ("--tp", "empty item")),
        (("--gpu", "h100-sxm,", "--tp", "4"), EXIT_USAGE, ("--gpu", "empty item")),
        (("--gpu", "h100-sxm", "--tp", "4,0"), EXIT_INVALID_INPUT, ("--tp", "positive", "0")),
        (("--gpu", "h100-sxm,h1000", "--tp", "4"), EXIT_USAGE, ("h1000",)),
        (("--gpu", "h100-sxm", "--tp", "4", "--format", "xml"), EXIT_USAGE, ("--format", "xml", "markdown")),
        (("--gpu", "h100-sxm", "--tp", "4", "--format", "csv", "--json"), EXIT_USAGE, ("--format", "--json")),
    ],
)
def test_bad_lists_and_formats(run_cli, args, code, needles):
    exit_code, out, err = run_cli("price", *MODEL, *args)
    assert exit_code == code and out == "", err
    assert len(err.splitlines()) == 1 and err.startswith("quotacalc: error: "), err
    for needle in needles:
        assert needle in err, (needle, err)


# --------------------------------------------------------------------------- the core function alone


def _deployment(gpu: str, tp: int) -> Deployment:
    return Deployment(model="m", gpu=gpu, tp=tp)


def test_compare_turns_input_errors_into_rows_and_keeps_usage_errors():
    def evaluate(deployment: Deployment):
        raise QuotacalcError("does not fit", field="tp", fix="raise --tp")

    rows = compare([_deployment("x", 1)], evaluate)
    assert rows[0].feasible is False and rows[0].reason == "tp: does not fit (raise --tp)"

    def typo(deployment: Deployment):
        raise UsageError("unknown GPU 'x'", field="gpu")

    with pytest.raises(UsageError):
        compare([_deployment("x", 1)], typo)


def test_a_measured_pool_is_kept_where_measured_and_estimated_elsewhere_with_a_warning(run_cli, tmp_path):
    from pathlib import Path

    example = Path(__file__).resolve().parents[1] / "examples" / "llama-3.3-70b-h100.yaml"
    document = _json(run_cli, "price", str(example), "--gpu", "h100-sxm,h200", "--tp", "4,8", "--json")
    rows = {(row["gpu"], row["tp"]): row for row in document["rows"]}
    # The plan's pool was measured on h100-sxm at TP 4 (its kv_pool_measured_with): kept there, unwarned.
    measured = rows[("h100-sxm", 4)]
    assert (measured["kv_pool_tokens"], measured["kv_pool_source"], measured["warnings"]) == (646503, "measured", [])
    # Elsewhere the pool is the estimate the plan would give without its measurement, and the row says so.
    unmeasured = tmp_path / "unmeasured.yaml"
    unmeasured.write_text(
        "".join(line for line in example.read_text().splitlines(True) if not line.startswith("kv_pool")),
        encoding="utf-8",
    )
    changes = {
        ("h100-sxm", 8): "tp 4 -> 8",
        ("h200", 4): "gpu h100-sxm -> h200",
        ("h200", 8): "gpu h100-sxm -> h200, tp 4 -> 8",
    }
    for (gpu, tp), changed in changes.items():
        row = rows[(gpu, tp)]
        alone = _json(run_cli, "price", str(unmeasured), "--gpu", gpu, "--tp", str(tp), "--json")
        assert row["feasible"] and row["kv_pool_source"] == "estimated"
        assert row["kv_pool_tokens"] == alone["results"]["kv_pool_tokens"]
        assert row["warnings"][0] == (
            f"KV pool estimated: the measured pool of 646,503 tokens was measured on another deployment ({changed})"
        )
    # --strict counts those warnings: a CI gate learns that some rows rest on an estimate.
    code, _, err = run_cli("price", str(example), "--gpu", "h100-sxm,h200", "--tp", "4", "--strict")
    assert code == EXIT_INVALID_INPUT and "1 deployment(s) with warnings under --strict" in err


def _priced(**overrides):
    """A stand-in for PriceResult with the attributes a row copies (the row takes them as given)."""
    figures = {
        "usd_per_million_prompt_tokens": 0.25,
        "usd_per_million_output_tokens": 1.5,
        "output_weight": 6.0,
        "replica_units_per_s": 4000.0,
        "kv_pool_tokens": 90_000,
        "kv_pool_source": "measured",
        "kv_pool_tokens_at_context": 30_000,
        "dedicated_usd_per_month": 14_400.0,
        "decode_batch": 96,
        "itl_s": 0.03,
        "ttft_s": 0.12,
        "max_load_output_tokens_per_s": 2_500.0,
        "warnings": ("a warning the price carried",),
    }
    return SimpleNamespace(**{**figures, **overrides})


def _sized():
    return SimpleNamespace(
        units_per_s=1000.0,
        replicas=0.25,
        shared_usd_per_month=3600.0,
        dedicated_replicas=1,
        dedicated_total_usd_per_month=14_400.0,
    )


def test_a_feasible_row_copies_the_price_and_the_calibration():
    rows = compare([_deployment("x", 8)], lambda deployment: _priced(), is_calibrated=lambda priced: True)
    row = rows[0]
    assert (row.gpu, row.tp, row.feasible, row.reason) == ("x", 8, True, None)
    assert row.kv_pool_source == "measured" and row.kv_pool_tokens == 90_000
    assert row.kv_pool_tokens_at_context == 30_000
    assert row.warnings == ("a warning the price carried",)
    assert row.calibrated is True
    assert row.usd_per_million_prompt_tokens == 0.25 and row.dedicated_usd_per_month == 14_400.0
    # The batch priced and the latencies behind the price, for a buyer comparing more than dollars.
    assert (row.decode_batch, row.itl_s, row.ttft_s, row.max_load_output_tokens_per_s) == (96, 0.03, 0.12, 2_500.0)
    # No tenant: no size figures.
    assert row.units_per_s is None and row.replicas is None


def test_a_row_is_uncalibrated_unless_the_caller_says_otherwise():
    assert compare([_deployment("x", 8)], lambda deployment: _priced())[0].calibrated is False
    estimated = compare([_deployment("x", 8)], lambda d: _priced(kv_pool_source="estimated"), is_calibrated=bool)
    assert estimated[0].kv_pool_source == "estimated" and estimated[0].calibrated is True
    assert compare([_deployment("x", 8)], lambda d: _priced(), is_calibrated=lambda p: False)[0].calibrated is False


def test_sizing_uses_the_given_function_and_only_with_a_tenant():
    tenant = Traffic(rps=1, prompt_tokens=800, output_tokens=200)
    calls = []

    def size(priced, sized_tenant):
        calls.append(sized_tenant)
        return _sized()

    (row,) = compare([_deployment("x", 8)], lambda d: _priced(), tenant, size=size)
    assert calls == [tenant]
    assert (row.units_per_s, row.replicas, row.dedicated_replicas) == (1000.0, 0.25, 1)
    assert row.shared_usd_per_month == 3600.0 and row.dedicated_total_usd_per_month == 14_400.0
    # A size function but no tenant: nothing to size.
    (row,) = compare([_deployment("x", 8)], lambda d: _priced(), None, size=size)
    assert calls == [tenant] and row.units_per_s is None


def test_size_rows_put_the_tenant_columns_before_reason_and_warnings():
    row = compare([_deployment("x", 8)], lambda d: _priced())[0]
    assert row.keys_for("price") == PRICE_KEYS
    assert row.keys_for("size") == (
        *("gpu", "tp", "gpu_hour_usd", "feasible", "usd_per_million_prompt_tokens", "usd_per_million_output_tokens"),
        *("output_weight", "replica_units_per_s", "kv_pool_tokens", "kv_pool_source", "kv_pool_tokens_at_context"),
        "dedicated_usd_per_month",
        *("decode_batch", "itl_s", "ttft_s", "max_load_output_tokens_per_s"),
        "calibrated",
        *("units_per_s", "replicas", "shared_usd_per_month", "dedicated_replicas", "dedicated_total_usd_per_month"),
        "reason",
        "warnings",
    )


def test_what_no_gpu_can_fix_is_an_error_not_rows(run_cli):
    plan = str(Path(__file__).resolve().parent.parent / "examples" / "llama-3.3-70b-h100.yaml")
    code, out, err = run_cli("price", plan, "--context", "200000", "--gpu", "h100-sxm,h200", "--tp", "4,8")
    assert code == 1 and out == "" and err.count("\n") == 1
    assert "context: 200,000 tokens exceed the model's maximum context of 131,072" in err
    # Every combination infeasible: the rows are printed, and the run fails.
    code, out, err = run_cli("price", plan, "--gpu", "h100-sxm", "--tp", "3,5", "--format", "csv")
    assert code == 1 and len(out.splitlines()) == 3
    assert "none of the 2 GPU and TP combinations can run it" in err


def test_rows_name_each_gpu_once_by_its_catalog_id(run_cli):
    plan = str(Path(__file__).resolve().parent.parent / "examples" / "llama-3.3-70b-h100.yaml")
    code, out, _ = run_cli("price", plan, "--gpu", "H100,h100-sxm,h200", "--tp", "4,04", "--format", "json")
    assert code == 0 and [(row["gpu"], row["tp"]) for row in json.loads(out)["rows"]] == [("h100-sxm", 4), ("h200", 4)]


def test_explain_is_refused_where_rows_carry_no_explanation(run_cli):
    plan = str(Path(__file__).resolve().parent.parent / "examples" / "llama-3.3-70b-h100.yaml")
    for extra in (("--gpu", "h100-sxm,h200"), ("--format", "csv")):
        code, out, err = run_cli("price", plan, *extra, "--explain")
        assert code == 2 and out == "" and "--explain: explains one deployment, not rows" in err
    code, out, err = run_cli("models", "--json", "--markdown")
    assert code == 2 and "--markdown: --markdown prints docs/models.md, not --json" in err


def test_one_pool_from_the_command_line_on_several_rows_warns_on_each(run_cli):
    code, out, err = run_cli(
        "price", *MODEL, "--gpu", "h100-sxm,h200", "--tp", "4", "--kv-pool-tokens", "646503", "--json"
    )
    assert code == 0, err
    rows = json.loads(out)["rows"]
    assert [row["kv_pool_tokens"] for row in rows] == [646_503, 646_503]
    for row in rows:
        assert any(
            warning.startswith("KV pool 646,503 tokens from --kv-pool-tokens, used as given on every row")
            for warning in row["warnings"]
        )
    # One row: the flag is the user's statement about that deployment, as in a single price.
    code, out, err = run_cli(
        "price", *MODEL, "--gpu", "h100-sxm", "--tp", "4", "--kv-pool-tokens", "646503", "--format", "json"
    )
    assert code == 0 and json.loads(out)["rows"][0]["warnings"] == []


def test_a_context_above_the_models_maximum_names_its_origin(run_cli, tmp_path):
    code, out, err = run_cli("price", "--model", "Llama-3.1-8B-Instruct", "--gpu", "h100,h200", "--context", "200000")
    assert (code, out) == (1, "")
    assert err.startswith("quotacalc: error: --context: 200,000 tokens exceed the model's maximum context of 131,072")
    plan = tmp_path / "plan.yaml"
    plan.write_text("model: Llama-3.1-8B-Instruct\ncontext: 200000\n", encoding="utf-8")
    code, _, err = run_cli("price", str(plan), "--gpu", "h100,h200")
    assert code == 1 and err.startswith(f"quotacalc: error: {plan}: context: 200,000 tokens exceed")


@pytest.mark.parametrize("fmt", ["table", "json", "csv", "markdown"])
def test_a_windowed_model_compares_its_pool_at_the_context(run_cli, monkeypatch, fmt):
    """Gemma 3's 52 sliding layers cost a 1,700-token sequence its whole 1,024-token window: the rows carry what the
    pool holds at --context (price's kv_pool_tokens_at_context) beside vLLM's count, and the table shows it."""
    monkeypatch.setenv("COLUMNS", "250")
    args = ("price", "--model", "gemma-3-27b-it", "--gpu", "h100-sxm,h200", "--tp", "2,4")
    code, out, err = run_cli(*args, "--format", "json")
    assert code == 0, err
    rows = json.loads(out)["rows"]
    for row in rows:
        single = run_cli("price", "--model", "gemma-3-27b-it", "--gpu", row["gpu"], "--tp", str(row["tp"]), "--json")
        results = json.loads(single[1])["results"]
        assert row["kv_pool_tokens_at_context"] == results["kv_pool_tokens_at_context"]
        assert row["kv_pool_tokens_at_context"] < row["kv_pool_tokens"] / 3
    code, out, err = run_cli(*args, "--format", fmt)
    assert code == 0, err
    if fmt in ("json", "csv"):
        assert "kv_pool_tokens_at_context" in out and str(rows[0]["kv_pool_tokens_at_context"]) in out
    else:
        assert "KV pool at context" in out and f"{rows[0]['kv_pool_tokens_at_context']:,}" in out
    # A model whose every layer grows has one pool: no second column.
    code, out, err = run_cli("price", "--model", "Llama-3.1-8B-Instruct", "--gpu", "h100-sxm,h200", "--tp", "1,2")
    assert code == 0 and "KV pool at context" not in out


def test_each_gpu_of_a_comparison_can_take_its_own_price(run_cli, monkeypatch):
    """--gpu-hour-usd h100-sxm=2.5,b200=6: each row priced at its GPU's $/GPU-h (one price for a B200 and an H100
    compared nothing), the row saying which; a replica's month is TP x price x 720 h."""
    monkeypatch.setenv("COLUMNS", "200")
    args = (
        "price",
        "--model",
        "Llama-3.3-70B-Instruct",
        "--weight-dtype",
        "fp8",
        "--gpu",
        "h100-sxm,b200",
        "--tp",
        "4",
    )
    code, out, err = run_cli(*args, "--gpu-hour-usd", "h100=2.5,b200=6", "--format", "json")
    assert code == 0, err
    rows = {row["gpu"]: row for row in json.loads(out)["rows"]}
    assert (rows["h100-sxm"]["gpu_hour_usd"], rows["b200"]["gpu_hour_usd"]) == (2.5, 6.0)
    assert rows["b200"]["dedicated_usd_per_month"] == pytest.approx(4 * 6.0 * 720)
    # The same row as a single deployment at that price.
    single = run_cli("price", *args[1:5], "--gpu", "b200", "--tp", "4", "--gpu-hour-usd", "6", "--json")
    results = json.loads(single[1])["results"]
    assert rows["b200"]["usd_per_million_output_tokens"] == pytest.approx(results["usd_per_million_output_tokens"])
    code, out, err = run_cli(*args, "--gpu-hour-usd", "h100=2.5,b200=6")
    assert code == 0 and "$/GPU-h" in out and "each GPU at its own $/GPU-h" in out and "$6.00" in out
    # One price: no column, the title gives it.
    code, out, err = run_cli(*args, "--gpu-hour-usd", "3")
    assert code == 0 and "$/GPU-h ┃" not in out and "$3.0/GPU-h" in out


@pytest.mark.parametrize(
    ("value", "code", "message"),
    [
        ("2.5,6", 2, "'2.5,6' lists prices without their GPUs"),
        ("h100=2.5", 2, "no price for b200"),
        ("h100=2.5,b200=6,h200=4", 2, "h200 is priced but not compared"),
        ("h100=2.5,h100-sxm=3,b200=6", 2, "h100-sxm is priced twice"),
        ("h100=cheap,b200=6", 2, "'cheap' is not a price"),
        ("h100=nan,b200=6", 1, "must be a finite number, got nan"),
        ("h100=-1,b200=6", 1, "must not be negative"),
        ("x100=1,b200=6", 2, "unknown GPU"),
    ],
)
def test_per_gpu_prices_name_every_gpu_compared_once(run_cli, value, code, message):
    args = (
        "price",
        "--model",
        "Llama-3.3-70B-Instruct",
        "--gpu",
        "h100-sxm,b200",
        "--tp",
        "4",
        "--gpu-hour-usd",
        value,
    )
    got, out, err = run_cli(*args)
    assert (got, out) == (code, "") and message in err and err.count("\n") == 1, err
