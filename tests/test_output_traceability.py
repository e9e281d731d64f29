"""Each figure a command prints is traceable, and what it cannot honour it says.

- flat ``size`` warns (and fails --strict) where its token bucket cannot hold one of the tenant's mean requests,
  by the rule and in the words ``check`` uses for a platform plan's tenants (core/traffic.bucket_shortfall);
- ``price --pricing-basis engine`` shows which prompt token is 1 unit, and its W and budget name that figure;
- rows (``--format json|csv|markdown``) name a GPU by its catalog id, one GPU or several;
- ``kv`` given a list of GPUs or TP sizes says it prices one deployment;
- small KV shows in a unit that shows it, large replica counts carry thousands separators, and a comparison's
  title names the model as resolved.

Figures are derived by hand here (the formula in a comment) or from the command's own JSON, never copied output.
"""

from __future__ import annotations

import csv
import io
import json
import re
from pathlib import Path

import pytest
from conftest import llama70b_prompt_token_units

from quotacalc.cli import units
from quotacalc.core.traffic import bucket_shortfall

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
LLAMA = ("--model", "Llama-3.3-70B-Instruct", "--weight-dtype", "fp8")
#: The QA case: 0.01 req/s of 2,000 prompt and 500 output tokens on the method's deployment (4× H100 SXM, FP8).
SMALL_TENANT = ("--rps", "0.01", "--prompt-tokens", "2000", "--output-tokens", "500")


def _json(run_cli, *args: str) -> dict:
    code, out, err = run_cli(*args)
    assert code == 0, err
    return json.loads(out)


def _row(out: str, quantity: str) -> tuple[str, str]:
    """(value, how) of the table row named ``quantity``."""
    for line in out.splitlines():
        cells = [cell.strip() for cell in line.split("│")]
        if cells[0] == quantity:
            return cells[1], cells[2]
    raise AssertionError(f"no row {quantity!r} in:\n{out}")


def _warnings(err: str) -> list[str]:
    return [line.removeprefix("quotacalc: warning: ") for line in err.splitlines() if "warning:" in line]


# --------------------------------------------------------------------------- 1. a bucket below the mean request


def _mean_request_units(output_weight: float) -> float:
    # units_per_request = prompt × prompt_token_units(prompt) + W × output (docs/method.md §1), nothing cached:
    # 2,000 × 1.0186 + 3.09 × 500 = 3,583.7 units.
    return 2000 * llama70b_prompt_token_units(2000) + output_weight * 500


def test_flat_size_warns_where_its_bucket_cannot_hold_one_mean_request(run_cli):
    code, out, err = run_cli("size", *LLAMA, "--gpu", "h100", "--tp", "4", *SMALL_TENANT, "--json")
    assert code == 0, err
    document = json.loads(out)
    request = _mean_request_units(document["replica"]["output_weight"])
    assert document["results"]["units_per_request"] == pytest.approx(request)
    # depth = burst_s × rps × units_per_request = 60 × 0.01 × 3,583.7 = 2,150.2 units, below one request; the burst
    # that holds one is units_per_request / rate = 1 / rps = 100 s.
    depth = 60 * 0.01 * request
    assert document["results"]["bucket_depth_units"] == pytest.approx(depth)
    warning = (
        f"tenant: its bucket holds {depth:,.1f} units, less than one of its mean requests ({request:,.1f} units): "
        "the gateway rejects every one (raise --burst-s to at least 100.00 s)"
    )
    assert f"{depth:,.1f}" == "2,150.2" and f"{request:,.1f}" == "3,583.7"
    assert document["warnings"] == [warning]
    assert _warnings(err) == [warning]
    assert "warnings" not in document["results"]  # the document's own list, once

    # The table says it too (stderr), and --strict fails on it.
    code, out, err = run_cli("size", *LLAMA, "--gpu", "h100", "--tp", "4", *SMALL_TENANT)
    assert code == 0 and _warnings(err) == [warning]
    assert _row(out, "token bucket depth")[0] == "2,150 units"
    code, out, err = run_cli("size", *LLAMA, "--gpu", "h100", "--tp", "4", *SMALL_TENANT, "--strict")
    # Failed under --strict: the warning and the error on stderr, and no figures on stdout for a CI job to keep.
    assert code == 1 and out == ""
    assert _warnings(err) == [warning]
    assert err.splitlines()[-1] == (
        "quotacalc: error: --strict: 1 warning(s) under --strict (see the warnings above; nothing was printed)"
    )


def test_flat_size_bucket_warning_follows_burst_s(run_cli):
    # --burst-s 1: 1 × 0.01 × 3,583.7 = 35.8 units (QA's figure); 99.5 s is still short of 100 s; 100.5 s holds one.
    document = _json(
        run_cli, "size", *LLAMA, "--gpu", "h100-sxm", "--tp", "4", *SMALL_TENANT, "--burst-s", "1", "--json"
    )
    request = _mean_request_units(document["replica"]["output_weight"])
    assert document["results"]["bucket_depth_units"] == pytest.approx(0.01 * request)
    assert document["warnings"] == [
        f"tenant: its bucket holds {0.01 * request:,.1f} units, less than one of its mean requests "
        f"({request:,.1f} units): the gateway rejects every one (raise --burst-s to at least 100.00 s)"
    ]
    assert f"{0.01 * request:,.1f}" == "35.8"
    short = _json(
        run_cli, "size", *LLAMA, "--gpu", "h100-sxm", "--tp", "4", *SMALL_TENANT, "--burst-s", "99.5", "--json"
    )
    assert len(short["warnings"]) == 1 and "less than one of its mean requests" in short["warnings"][0]
    held = _json(
        run_cli, "size", *LLAMA, "--gpu", "h100-sxm", "--tp", "4", *SMALL_TENANT, "--burst-s", "100.5", "--json"
    )
    assert held["warnings"] == []
    # The method's tenant (5 req/s): 60 × 5 × 3,583.7 units, 300 requests deep; no warning.
    assert _json(run_cli, "size", str(EXAMPLES / "llama-3.3-70b-h100.yaml"), "--json")["warnings"] == []


def test_flat_size_warns_where_its_bucket_holds_not_even_the_smallest_request(run_cli):
    # 1 req/s of 1 prompt and 1 output token: u(1) + W units/s, a 0.5 s bucket holds half of one; the smallest
    # request is 1 + W units (one prompt and one output token, as check counts it), so the burst that holds it is
    # (1 + W) / (u(1) + W) s, a hair under 1 s.
    args = ("size", *LLAMA, "--gpu", "h100-sxm", "--tp", "4", "--rps", "1", "--prompt-tokens", "1")
    code, out, err = run_cli(*args, "--output-tokens", "1", "--burst-s", "0.5", "--json")
    assert code == 0, err
    document = json.loads(out)
    w = document["replica"]["output_weight"]
    rate = llama70b_prompt_token_units(1) + w
    assert document["results"]["bucket_rate_units_per_s"] == pytest.approx(rate)
    assert document["warnings"] == [
        f"tenant: its bucket holds {0.5 * rate:,.2f} units, less than the smallest request (one prompt and one output "
        f"token: 1 + {w:.2f} units): the gateway rejects every request (raise --burst-s to at least "
        f"{(1 + w) / rate:,.2f} s)"
    ]
    assert f"{(1 + w) / rate:,.2f}" == "1.00"


def test_flat_size_and_check_state_the_same_rule_in_the_same_words(run_cli, tmp_path):
    # The same tenant as a platform plan's traffic tenant: check's finding and flat size's warning are one rule.
    plan = tmp_path / "platform.yaml"
    plan.write_text(
        "deployment: {model: Llama-3.3-70B-Instruct, gpu: h100-sxm, tp: 4, weight_dtype: fp8}\n"
        "pools:\n  - {name: shared, replicas: 1}\n"
        "tiers:\n  - {name: std, max_context_tokens: 8192, kv_cap_tokens_per_replica: 65536, "
        "max_concurrent_sequences: 8, max_output_tokens: 2048, priority: 0, burst_s: 60}\n"
        "tenants:\n  - {name: tiny, tier: std, pool: shared, traffic: {rps: 0.01, prompt_tokens: 2000, "
        "output_tokens: 500}}\n",
        encoding="utf-8",
    )
    code, out, err = run_cli("check", str(plan), "--json")
    assert code == 0, err
    (finding,) = [f for f in json.loads(out)["findings"] if f["code"] == "bucket-below-request"]
    flat = _json(run_cli, "size", *LLAMA, "--gpu", "h100-sxm", "--tp", "4", *SMALL_TENANT, "--json")
    assert flat["warnings"] == [f"tenant: {finding['message']} (raise --burst-s to at least 100.00 s)"]
    figures = finding["figures"]
    shortfall = bucket_shortfall(
        figures["bucket_depth_units"], flat["replica"]["output_weight"], figures["units_per_request"]
    )
    assert shortfall is not None and (shortfall.code, shortfall.message) == (finding["code"], finding["message"])


def test_bucket_shortfall_boundaries():
    # W = 3: the smallest request is 1 + 3 = 4 units. Strict: a bucket of exactly a request admits it.
    assert bucket_shortfall(4.0, 3.0, 500.0).code == "bucket-below-request"
    assert bucket_shortfall(500.0, 3.0, 500.0) is None
    assert bucket_shortfall(3.99, 3.0, 500.0).code == "bucket-below-any-request"
    assert bucket_shortfall(3.99, 3.0).needed_units == 4.0
    assert bucket_shortfall(4.0, 3.0) is None  # a contract tenant: no mean request to hold


def test_a_size_comparison_row_carries_the_bucket_warning_and_fails_strict(run_cli):
    args = ("size", *LLAMA, "--gpu", "h100,h200", "--tp", "4", *SMALL_TENANT)
    document = _json(run_cli, *args, "--format", "json")
    for row in document["rows"]:
        # Each row's own W: rps × units_per_request is the row's units_per_s, so the mean request is units_per_s / 0.01.
        request = row["units_per_s"] / 0.01
        assert row["warnings"][-1] == (
            f"tenant: its bucket holds {60 * row['units_per_s']:,.1f} units, less than one of its mean requests "
            f"({request:,.1f} units): the gateway rejects every one (raise --burst-s to at least 100.00 s)"
        )
    code, _, err = run_cli(*args, "--strict")
    assert code == 1
    assert err.splitlines()[-1] == (
        "quotacalc: error: --strict: 2 deployment(s) with warnings under --strict (see each row's notes)"
    )


# --------------------------------------------------------------------------- 2. which prompt token is 1 unit


def test_engine_basis_table_names_the_engine_prompt_token_as_the_unit(run_cli, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    plan = str(EXAMPLES / "llama-3.3-70b-h100.yaml")
    results = _json(run_cli, "price", plan, "--pricing-basis", "engine", "--json")["results"]
    # The engine basis divides by the engine's prompt token (a full chunk's prefill per token), not the roofline's:
    # replica_units_per_s = ceiling / engine_prompt_token_s = 0.65 / 47.5 µs = 13,681 (0.65 / 35.7 µs would be 18,232);
    # W = output_token_s / engine_prompt_token_s, output_token_s = itl_s / batch.
    engine_token = results["engine_prompt_token_s"]
    assert results["replica_units_per_s"] == pytest.approx(0.65 / engine_token)
    assert round(results["replica_units_per_s"]) == 13_681
    assert results["output_weight"] == pytest.approx(results["itl_s"] / results["decode_batch"] / engine_token)
    assert round(engine_token * 1e6, 1) == 47.5

    code, out, err = run_cli("price", plan, "--pricing-basis", "engine")
    assert code == 0, err
    chunk = results["max_num_batched_tokens"]
    assert chunk == 8192
    assert _row(out, "engine prompt token") == ("47.5 µs", "1 unit; prefill of one 8,192-token chunk / 8,192")
    assert _row(out, "prompt token") == (
        units.seconds(results["prompt_token_s"]),
        "parameters only (roofline; not the unit on the engine basis)",
    )
    assert _row(out, "replica budget") == ("13,681 units/s", "ceiling 0.65 / engine prompt token")
    assert _row(out, "output weight W") == (
        f"{results['output_weight']:.2f}",
        "units per output token: output token / engine prompt token",
    )


def test_roofline_basis_table_keeps_the_roofline_prompt_token_as_the_unit(run_cli, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    plan = str(EXAMPLES / "llama-3.3-70b-h100.yaml")
    results = _json(run_cli, "price", plan, "--json")["results"]
    # 0.65 / 35.7 µs = 18,232 units/s (docs/method.md §7).
    assert results["replica_units_per_s"] == pytest.approx(0.65 / results["prompt_token_s"])
    code, out, _ = run_cli("price", plan)
    assert code == 0
    assert _row(out, "prompt token") == ("35.7 µs", "1 unit; parameters only")
    assert _row(out, "replica budget") == ("18,232 units/s", "ceiling 0.65 / prompt token")
    assert "engine prompt token" not in out


# --------------------------------------------------------------------------- 3. rows name GPUs by catalog id


@pytest.mark.parametrize("command", ["price", "size"])
def test_one_combination_in_rows_names_the_gpu_by_its_catalog_id(run_cli, command):
    extra = SMALL_TENANT if command == "size" else ()
    args = (command, *LLAMA, "--gpu", "h100", "--tp", "4", *extra)
    assert [row["gpu"] for row in _json(run_cli, *args, "--format", "json")["rows"]] == ["h100-sxm"]
    code, out, err = run_cli(*args, "--format", "csv")
    assert code == 0, err
    assert [row["gpu"] for row in csv.DictReader(io.StringIO(out))] == ["h100-sxm"]
    code, out, err = run_cli(*args, "--format", "markdown")
    assert code == 0, err
    assert "| h100-sxm | 4 |" in out and "| h100 |" not in out


def test_a_plans_gpu_alias_in_rows_is_its_catalog_id(run_cli, tmp_path):
    plan = tmp_path / "plan.yaml"
    plan.write_text("model: Llama-3.3-70B-Instruct\ngpu: h100\ntp: 4\nweight_dtype: fp8\n", encoding="utf-8")
    assert [row["gpu"] for row in _json(run_cli, "price", str(plan), "--format", "json")["rows"]] == ["h100-sxm"]
    # Several GPUs, as before: ids, each once (h100 is h100-sxm).
    rows = _json(run_cli, "price", str(plan), "--gpu", "h100,h100-sxm,h200", "--format", "json")["rows"]
    assert [row["gpu"] for row in rows] == ["h100-sxm", "h200"]


def test_an_unknown_gpu_in_rows_is_still_a_usage_error(run_cli):
    code, out, err = run_cli("price", *LLAMA, "--gpu", "h100x", "--format", "json")
    assert code == 2 and out == ""
    assert err.startswith("quotacalc: error: --gpu: unknown GPU 'h100x'") and len(err.splitlines()) == 1


# --------------------------------------------------------------------------- 4. kv prices one deployment


@pytest.mark.parametrize(
    ("flag", "value", "message"),
    [
        (
            "--gpu",
            "h100,h200",
            "quotacalc: error: --gpu: kv prices one deployment: give one GPU, not 'h100,h200' "
            "(comparisons: quotacalc price/size --gpu A,B)",
        ),
        (
            "--tp",
            "2,4",
            "quotacalc: error: --tp: kv prices one deployment: give one TP size, not '2,4' "
            "(comparisons: quotacalc price/size --tp A,B)",
        ),
    ],
)
def test_kv_given_a_list_says_it_prices_one_deployment(run_cli, flag, value, message):
    code, out, err = run_cli("kv", str(EXAMPLES / "llama-3.3-70b-h100.yaml"), "--context", "1000", flag, value)
    assert (code, out, err) == (2, "", message + "\n")


def test_kv_still_takes_one_gpu_and_tp_and_refuses_a_fractional_tp(run_cli):
    plan = str(EXAMPLES / "llama-3.3-70b-h100.yaml")
    document = _json(run_cli, "kv", plan, "--context", "1000", "--gpu", "h100", "--tp", "4", "--json")
    assert document["inputs"]["gpu"]["id"] == "h100-sxm" and document["inputs"]["deployment"]["tp"] == 4
    code, out, err = run_cli("kv", plan, "--context", "1000", "--tp", "4.0")
    assert code == 2 and out == "" and "--tp" in err and "must be a whole number, got '4.0'" in err


# --------------------------------------------------------------------------- 5. units that show the figure


def test_small_request_kv_shows_in_a_unit_that_shows_it(run_cli, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    plan = str(EXAMPLES / "gpt-oss-120b-h100.yaml")
    # gpt-oss-120b at 100 tokens (below its 128-token window): all 36 layers hold 100 tokens of 2 × 8 KV heads × 64
    # at fp8 (1 B): 100 × 36 × 2 × 8 × 64 × 1 B = 3,686,400 B = 3.5 MiB (3.7 MB).
    document = _json(run_cli, "kv", plan, "--context", "100", "--json")
    assert document["results"]["request_kv_bytes"] == 100 * 36 * 2 * 8 * 64 * 1 == 3_686_400
    code, out, _ = run_cli("kv", plan, "--context", "100")
    assert code == 0
    assert _row(out, "request KV") == ("3.5 MiB", "3.7 MB")
    # The method's long request still reads in GiB: 131,072 × 327,680 B = 40.0 GiB (42.9 GB).
    code, out, _ = run_cli("kv", str(EXAMPLES / "llama-3.3-70b-h100.yaml"), "--context", "131072")
    assert code == 0 and _row(out, "request KV") == ("40.0 GiB", "42.9 GB")


def test_binary_bytes_picks_the_unit_the_figure_rounds_into():
    assert units.binary_bytes(512) == "512 B"
    assert units.binary_bytes(327_680) == "320.0 KiB"  # one Llama 70B token of KV: 327,680 / 1,024
    assert units.binary_bytes(3_686_400) == "3.5 MiB"
    assert units.binary_bytes(1024**3 - 1) == "1.0 GiB"  # not 1,024.0 MiB
    assert units.binary_bytes(40 * 1024**3) == "40.0 GiB"
    assert units.binary_bytes(2048 * 1024**3) == "2,048.0 GiB"


def test_large_replica_counts_carry_thousands_separators(run_cli, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    plan = str(EXAMPLES / "llama-3.3-70b-h100.yaml")
    document = _json(run_cli, "size", plan, "--rps", "1e9", "--json")
    # replicas = units_per_s / replica_units_per_s = 1e9 × 17,919 / 5 / 18,232 ≈ 196.6 million.
    replicas = document["results"]["units_per_s"] / document["replica"]["replica_units_per_s"]
    assert document["results"]["replicas"] == pytest.approx(replicas)
    code, out, _ = run_cli("size", plan, "--rps", "1e9")
    assert code == 0
    value, how = _row(out, "replicas")
    assert how == "of 18,232 units/s each"
    assert value == f"{replicas:,.2f}" and re.fullmatch(r"\d{1,3}(,\d{3})+\.\d{2}", value)
    assert value.startswith("196,561,")
    code, out, _ = run_cli("size", plan, "--rps", "1e9", "--gpu", "h100-sxm,h200", "--format", "markdown")
    assert code == 0 and f"| {replicas:,.2f} |" in out


def test_comparison_title_names_the_model_as_resolved(run_cli, monkeypatch):
    monkeypatch.setenv("COLUMNS", "300")
    args = ("price", "--model", "meta-llama/Llama-3.3-70B-Instruct", "--weight-dtype", "fp8", "--gpu", "h100,h200")
    code, out, err = run_cli(*args, "--tp", "4")
    assert code == 0, err
    assert out.splitlines()[0].startswith("Llama-3.3-70B-Instruct: batch 128 at 1,700 tokens")
    code, out, err = run_cli(*args, "--tp", "4", "--format", "markdown")
    assert code == 0, err
    assert out.splitlines()[0].startswith("**Llama-3.3-70B-Instruct: batch 128")
    assert "meta-llama/" not in out


@pytest.mark.parametrize(
    "command",
    [("price", "--json"), ("price",), ("kv", "--context", "8000", "--json"), ("kv", "--context", "8000")],
)
def test_strict_fails_before_the_figures_are_printed(run_cli, command):
    # A batch above max_num_seqs is priced at the batch that runs, with a warning: under --strict, a failure.
    plan = str(Path(__file__).parent.parent / "examples" / "llama-3.3-70b-h100.yaml")
    code, out, err = run_cli(command[0], plan, *command[1:], "--max-num-seqs", "1", "--strict")
    assert code == 1 and out == "", out
    assert err.splitlines()[0].startswith("quotacalc: warning: a decode batch of 128 is above max_num_seqs 1")
    assert err.splitlines()[-1].endswith("(see the warnings above; nothing was printed)")


def test_price_warns_where_vllm_would_refuse_the_token_budget(run_cli):
    """vLLM's SchedulerConfig refuses max_num_batched_tokens below max_num_seqs, which generate sets to the batch."""
    args = ("--model", "Llama-3.1-8B-Instruct", "--gpu", "h100-sxm", "--batch", "128")
    code, out, err = run_cli("price", *args, "--max-num-batched-tokens", "64", "--json")
    assert code == 0, err
    assert (
        "max_num_batched_tokens 64 is below the decode batch of 128, which generate writes as max-num-seqs: vLLM "
        "refuses to start (raise --max-num-batched-tokens to at least 128, or lower --batch)"
    ) in json.loads(out)["warnings"]
    # At the batch, vLLM starts; SGLang has no such rule.
    for extra in (("--max-num-batched-tokens", "128"), ("--max-num-batched-tokens", "64", "--engine", "sglang")):
        code, out, err = run_cli("price", *args, *extra, "--json")
        assert not any("refuses to start" in line for line in json.loads(out)["warnings"]), extra


def test_a_state_dtype_on_a_model_without_state_is_a_warning(run_cli):
    """--state-dtype sizes Mamba/linear-attention state only: on a dense model it would be silently ignored."""
    args = ("--model", "Llama-3.1-8B-Instruct", "--gpu", "h100-sxm")
    code, out, err = run_cli("price", *args, "--state-dtype", "fp32", "--json")
    assert code == 0 and json.loads(out)
    assert err.strip() == (
        "quotacalc: warning: state_dtype fp32 changes nothing: Llama-3.1-8B-Instruct keeps no recurrent state "
        "(Mamba, linear attention, short convolution) (remove --state-dtype)"
    )
    code, _, err = run_cli("price", *args, "--json")
    assert code == 0 and "state_dtype" not in err
