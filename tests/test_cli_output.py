"""The CLI's output: JSON keys and explain steps, tables, --explain, the catalogs, --help.

Structure and cross-consistency only; golden figures live in test_method_example.py.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest

#: The worked example's deployment, as /work/shared/checks/method-example passes it.
DEPLOYMENT = (
    "--model", "Llama-3.3-70B-Instruct", "--gpu", "h100-sxm", "--tp", "4", "--weight-dtype", "fp8",
    "--kv-dtype", "bf16", "--batch", "128", "--mfu", "0.5", "--mbu", "0.75", "--ceiling", "0.65",
    "--gpu-hour-usd", "2.5", "--kv-pool-tokens", "646503",
)  # fmt: skip
TP, BATCH, CEILING, GPU_HOUR_USD, POOL_TOKENS = 4, 128, 0.65, 2.5, 646_503
TENANT = ("--rps", "5", "--prompt-tokens", "2000", "--output-tokens", "500")
KV_CONTEXT = 131_072

COMMANDS = {
    "price": ("price", *DEPLOYMENT, "--context", "1700"),
    "size": ("size", *DEPLOYMENT, "--context", "1700", *TENANT),
    "kv": ("kv", *DEPLOYMENT, "--context", str(KV_CONTEXT)),
}

PRICE_KEYS = {
    "total_params", "active_params", "weight_bytes_per_gpu", "kv_bytes_per_token", "prompt_token_s",
    "decode_step_s", "output_token_s", "output_weight", "replica_units_per_s", "kv_pool_tokens",
    "dedicated_usd_per_month", "units_per_gpu_hour",
}  # fmt: skip
SIZE_KEYS = {"units_per_s", "replicas", "bucket_rate_units_per_s", "bucket_depth_units"}
KV_KEYS = {"request_kv_bytes", "request_kv_bytes_per_gpu", "pool_share"}
STEP_KEYS = {"name", "formula", "substituted", "value", "unit"}

SHIPPED_MODELS = 12
CATALOG_GPUS = {"h100-sxm", "h100-pcie", "h200", "b200", "a100-80gb-sxm", "l40s", "mi300x"}


def close(a: float, b: float, rel: float = 1e-12) -> bool:
    return math.isclose(a, b, rel_tol=rel, abs_tol=0.0)


def _run_json(run_cli, command: str, *extra: str) -> dict:
    code, out, err = run_cli(*COMMANDS[command], "--json", *extra)
    assert code == 0, err
    assert "Traceback" not in out + err
    return json.loads(out)


@pytest.fixture
def price_doc(run_cli):
    return _run_json(run_cli, "price")


@pytest.fixture
def size_doc(run_cli):
    return _run_json(run_cli, "size")


@pytest.fixture
def kv_doc(run_cli):
    return _run_json(run_cli, "kv")


# --------------------------------------------------------------------------- JSON structure


@pytest.mark.parametrize(("command", "keys"), [("price", PRICE_KEYS), ("size", SIZE_KEYS), ("kv", KV_KEYS)])
def test_json_has_documented_keys(run_cli, command, keys):
    document = _run_json(run_cli, command)
    assert document["command"] == command
    assert isinstance(document["schema_version"], int)
    results = document["results"]
    assert keys <= set(results), f"missing: {sorted(keys - set(results))}"
    for key in keys:
        assert isinstance(results[key], (int, float)) and not isinstance(results[key], bool), key
        assert math.isfinite(results[key]) and results[key] > 0, (key, results[key])
    assert isinstance(document["warnings"], list)
    assert {"deployment", "model", "gpu", "weights", "kv_dtype"} <= set(document["inputs"])
    if command != "price":  # size and kv carry the replica they were computed on
        assert set(document["replica"]) >= PRICE_KEYS


@pytest.mark.parametrize("command", ["price", "size", "kv"])
def test_every_explain_step_is_complete(run_cli, command):
    document = _run_json(run_cli, command, "--explain")
    steps = document["explain"]
    assert steps, "no explain steps"
    for step in steps:
        assert set(step) >= STEP_KEYS, step
        for key in ("name", "formula", "substituted"):
            assert isinstance(step[key], str) and step[key].strip(), (key, step)
        assert isinstance(step["unit"], str), step  # "" for a dimensionless ratio
        assert isinstance(step["value"], (int, float)) and math.isfinite(step["value"]), step
    names = [step["name"] for step in steps]
    assert len(names) == len(set(names)), f"duplicate steps: {names}"
    # Every figure can be reproduced from its line: the substitution carries the numbers, not only words.
    wordy = [step["name"] for step in steps if not re.search(r"[0-9]", step["substituted"])]
    assert wordy == [], wordy


def test_the_engine_figures_add_up_from_their_substituted_terms(run_cli):
    """ttft_s = request overhead + [max(FLOP time, weight read) + overheads + all-reduces] per chunk, and the
    full-load throughput = B / (step + B / output × prefill): each figure is re-added from its own line."""
    document = _run_json(run_cli, "price", "--explain")
    steps = {step["name"]: step for step in document["explain"]}
    numbers = [
        float(n.replace(",", ""))
        for n in re.findall(r"[0-9][0-9,]*\.?[0-9]*(?:e[-+]?[0-9]+)?", steps["ttft_s"]["substituted"])
    ]
    overhead, compute, read, overheads, allreduces = numbers
    assert overhead + max(compute, read) + overheads + allreduces == pytest.approx(steps["ttft_s"]["value"], rel=1e-3)
    batch, step_s, batch_again, output, prefill_s = [
        float(n.replace(",", ""))
        for n in re.findall(r"[0-9][0-9,]*\.?[0-9]*", steps["max_load_output_tokens_per_s"]["substituted"])
    ]
    assert batch == batch_again
    assert batch / (step_s + batch / output * prefill_s) == pytest.approx(
        steps["max_load_output_tokens_per_s"]["value"], rel=1e-3
    )


@pytest.mark.parametrize("command", ["price", "size", "kv"])
def test_explain_values_match_results(run_cli, command):
    document = _run_json(run_cli, command, "--explain")
    results = {**document.get("replica", {}), **document["results"]}
    checked = 0
    for step in document["explain"]:
        value = results.get(step["name"])
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            assert close(step["value"], value), (step["name"], step["value"], value)
            checked += 1
    assert checked >= 5


def test_json_inputs_echo_the_flags(price_doc):
    deployment = price_doc["inputs"]["deployment"]
    assert deployment["model"] == "Llama-3.3-70B-Instruct"
    assert deployment["gpu"] == "h100-sxm"
    assert (deployment["tp"], deployment["batch"], deployment["context"]) == (TP, BATCH, 1700)
    assert (deployment["weight_dtype"], deployment["kv_dtype"]) == ("fp8", "bf16")
    assert (deployment["mfu"], deployment["mbu"], deployment["ceiling"]) == (0.5, 0.75, CEILING)
    assert deployment["kv_pool_tokens"] == POOL_TOKENS


def test_json_inputs_carry_the_gpu_figures_the_engine_terms_use(price_doc):
    """allreduce_s = layers x 2 x (latency + 2(TP-1)/TP x batch x hidden x 2 B / bandwidth): its GPU inputs are in the
    document, as are the matmul shares that scale MFU (mfu_scale = the compute dtype's share / the reference's)."""
    from quotacalc.catalog.gpus import load_gpu_catalog

    gpu = price_doc["inputs"]["gpu"]
    catalog = load_gpu_catalog().get("h100-sxm")
    assert gpu["interconnect_bandwidth_bytes_per_s"] == catalog.interconnect_bandwidth_bytes_per_s == 450e9
    assert gpu["allreduce_latency_s"] == catalog.allreduce_latency_s
    assert gpu["matmul_efficiency"] == catalog.matmul_efficiency and "fp8" in gpu["matmul_efficiency"]
    results, hidden, layers = price_doc["results"], price_doc["inputs"]["model"]["hidden_size"], 80
    per_allreduce_s = (
        gpu["allreduce_latency_s"] + 2 * (TP - 1) / TP * BATCH * hidden * 2 / gpu["interconnect_bandwidth_bytes_per_s"]
    )
    assert close(results["allreduce_s"], layers * 2 * per_allreduce_s)


# --------------------------------------------------------------------------- cross-consistency


def test_price_cross_consistency(price_doc):
    r = price_doc["results"]
    deployment = price_doc["inputs"]["deployment"]
    assert close(r["output_weight"], r["output_token_s"] / r["prompt_token_s"])
    assert close(r["output_token_s"], r["decode_step_s"] / BATCH)
    assert close(r["replica_units_per_s"], CEILING / r["prompt_token_s"])
    assert close(r["weight_bytes_per_gpu"], r["weight_bytes"] / TP)
    assert close(r["dedicated_usd_per_month"], TP * GPU_HOUR_USD * deployment["hours_per_month"])
    assert r["kv_pool_tokens"] == POOL_TOKENS  # measured pool given as a flag
    assert r["active_params"] <= r["total_params"]
    assert r["active_params"] == r["total_params"]  # dense model
    assert r["decode_step_s"] == max(r["decode_memory_s"], r["decode_compute_s"])
    assert price_doc["inputs"]["model"]["layers"] > 0


def test_size_cross_consistency(size_doc, price_doc):
    r = size_doc["results"]
    burst_s = size_doc["inputs"]["deployment"]["burst_s"]
    assert burst_s == 60
    assert close(r["bucket_depth_units"], burst_s * r["units_per_s"])
    assert close(r["bucket_rate_units_per_s"], r["units_per_s"])
    assert close(r["units_per_s"], 5 * r["units_per_request"])
    assert close(r["replicas"], r["units_per_s"] / size_doc["replica"]["replica_units_per_s"])
    assert size_doc["tenant"] == {"rps": 5, "prompt_tokens": 2000, "output_tokens": 500, "cached_fraction": 0}
    # size prices the same replica that price does
    assert size_doc["replica"] == price_doc["results"]


def test_kv_cross_consistency(kv_doc, price_doc):
    r = kv_doc["results"]
    replica = kv_doc["replica"]
    assert r["context_tokens"] == KV_CONTEXT
    assert close(r["request_kv_bytes_per_gpu"], r["request_kv_bytes"] / TP)
    # Llama 3.3 70B has only full-attention layers: KV grows linearly with context
    assert close(r["request_kv_bytes"], KV_CONTEXT * replica["kv_bytes_per_token"])
    assert close(r["pool_share"], KV_CONTEXT / replica["kv_pool_tokens"])
    assert replica["kv_pool_tokens"] == price_doc["results"]["kv_pool_tokens"]
    assert replica["kv_bytes_per_token"] == price_doc["results"]["kv_bytes_per_token"]


# --------------------------------------------------------------------------- tables and --explain


@pytest.mark.parametrize(
    ("command", "rows"),
    [
        ("price", ("output weight W", "replica budget", "KV pool", "dedicated replica", "decode step")),
        ("size", ("units per request", "replicas", "token bucket rate", "token bucket depth")),
        ("kv", ("request KV", "per GPU", "share of the KV pool")),
    ],
)
def test_table_output_has_key_rows(run_cli, monkeypatch, command, rows):
    monkeypatch.setenv("COLUMNS", "200")  # rich wraps at 80 columns when stdout is not a terminal
    code, out, err = run_cli(*COMMANDS[command])
    assert code == 0, err
    assert err == ""
    assert not out.lstrip().startswith("{")
    for row in rows:
        assert row in out, f"{row!r} not in table:\n{out}"
    assert "How each figure is derived" not in out  # only with --explain


def test_weights_row_shows_what_the_engine_adds_beside_the_split(run_cli, monkeypatch):
    """A dense model's weights per GPU are the split alone; DeepSeek-V3 at TP 8 adds 7/8 of the layers every
    rank keeps whole (MLA down-projections, their latent norms and routers: 1,136,804,016 B in the checkpoint's
    dtypes, 7/8 of it 994,703,514 B = 994.7 MB; the 61 x 2,048 latent norms at BF16, not FP8, add 124,928 x
    (2 - 1 - 4/16,384) x 7/8 = 109,285 B to the 994,594,229 B = 994.6 MB counted when they sat in attention)."""
    monkeypatch.setenv("COLUMNS", "200")
    code, out, err = run_cli(*COMMANDS["price"])
    assert code == 0, err
    assert "70.6 GB / TP 4 " in out and "engine" not in out.split("weights per GPU")[1].splitlines()[0]
    code, out, err = run_cli("price", "--model", "DeepSeek-V3", "--gpu", "h200", "--tp", "8")
    assert code == 0, err
    assert "673.2 GB / TP 8 + 994.7 MB engine" in out


def test_explain_prints_substituted_formulas(run_cli, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    code, out, err = run_cli(*COMMANDS["price"], "--explain")
    assert code == 0, err
    assert "How each figure is derived" in out
    assert "output weight W" in out  # the table is still there
    lines = out.splitlines()
    prompt = [line for line in lines if "2 × 70,553,706,496" in line]
    assert prompt, "no substituted prompt-token formula"
    assert any("prompt_token_s = 2 × active_params" in line for line in lines)
    # every explain step of the JSON appears as 'name = formula' in the text
    document = _run_json(run_cli, "price", "--explain")
    for step in document["explain"]:
        assert f"{step['name']} = " in out, step["name"]


# --------------------------------------------------------------------------- catalogs and help


def test_models_json_lists_all_shipped_models(run_cli):
    code, out, err = run_cli("models", "--json")
    assert code == 0, err
    models = json.loads(out)["models"]
    assert len(models) == SHIPPED_MODELS
    names = [model["name"] for model in models]
    assert len(set(names)) == SHIPPED_MODELS
    assert {"Llama-3.3-70B-Instruct", "DeepSeek-V3", "gpt-oss-120b", "AI21-Jamba-1.5-Mini"} <= set(names)
    for model in models:
        assert model["total_params"] > 0 and 0 < model["active_params"] <= model["total_params"], model["name"]
        assert model["kv_bytes_per_token_bf16"] > 0, model["name"]
        assert model["layer_kinds"] and all(n > 0 for n in model["layer_kinds"].values()), model["name"]
        assert isinstance(model["hf_ids"], list)


def test_models_table(run_cli, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    code, out, err = run_cli("models")
    assert code == 0, err
    assert "Llama-3.3-70B-Instruct" in out and "DeepSeek-V3" in out


def test_gpus_json_catalog_with_sources(run_cli):
    code, out, err = run_cli("gpus", "--json")
    assert code == 0, err
    document = json.loads(out)
    gpus = {gpu["id"]: gpu for gpu in document["gpus"]}
    assert set(gpus) >= CATALOG_GPUS, f"missing: {sorted(CATALOG_GPUS - set(gpus))}"
    # MFU's reference, and the matmul efficiencies measured against it (each with its source).
    assert document["mfu_reference"] == {"gpu": "h100-sxm", "dtype": "fp8"}
    assert gpus["a100-80gb-sxm"]["matmul_efficiency"]["bf16"] == 0.869
    assert "Maximum Achievable Matmul FLOPS" in gpus["a100-80gb-sxm"]["sources"]["matmul_efficiency"]
    for gpu_id, gpu in gpus.items():
        assert gpu["memory_bytes"] > 0 and gpu["memory_bandwidth_bytes_per_s"] > 0, gpu_id
        assert gpu["dense_tflops"] and all(v > 0 for v in gpu["dense_tflops"].values()), gpu_id
        figures = {"memory_bytes", "memory_bandwidth_bytes_per_s", "dense_tflops"}
        assert set(gpu["sources"]) >= figures, gpu_id
        for figure in figures:
            source = gpu["sources"][figure]
            assert isinstance(source, str) and len(source.strip()) > 10, (gpu_id, figure, source)


def test_gpus_sources_table(run_cli, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    code, out, err = run_cli("gpus", "--sources")
    assert code == 0, err
    for gpu_id in CATALOG_GPUS:
        assert gpu_id in out
    assert "memory_bandwidth_bytes_per_s:" in out


@pytest.mark.parametrize("args", [("--help",), ("price", "--help"), ("size", "--help"), ("kv", "--help")])
def test_help_exits_zero(run_cli, args):
    code, out, err = run_cli(*args)
    assert code == 0, err
    assert "Usage" in out
    assert "Traceback" not in out + err


def test_price_help_lists_generated_flags(run_cli, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    code, out, _ = run_cli("price", "--help")
    assert code == 0
    for flag in ("--model", "--gpu", "--tp", "--weight-dtype", "--kv-pool-tokens", "--gpu-hour-usd", "--json"):
        assert flag in out, flag


def test_explain_prints_bracketed_formulas_verbatim(run_cli, monkeypatch):
    # rich reads "[...]" as markup; the expert-parallel formula E[max ...] must survive.
    monkeypatch.setenv("COLUMNS", "200")
    code, out, _ = run_cli(
        "price", "--model", "Mixtral-8x7B-v0.1", "--gpu", "h100-sxm", "--tp", "2", "--expert-parallel", "--explain"
    )
    assert code == 0
    assert "E[max over EP ranks of Binomial(E/EP, experts_touched/E)]" in out


def test_version(run_cli):
    code, out, _ = run_cli("--version")
    assert code == 0
    assert out.startswith("quotacalc ") and out.split()[1][0].isdigit()


def test_models_families_lists_every_reader(run_cli):
    from quotacalc.inputs.architectures import supported_model_types

    code, out, err = run_cli("models", "--families", "--json")
    assert code == 0, err
    document = json.loads(out)
    assert document["command"] == "models" and document["schema_version"] == 2
    assert document["model_types"] == supported_model_types()
    # A few of each kind: dense, MoE, hybrid, multimodal wrapper.
    assert {"llama", "glm4_moe", "qwen3_next", "gemma4", "llava"} <= set(document["model_types"])
    code, out, _ = run_cli("models", "--families")
    assert code == 0 and f"{len(document['model_types'])} model_type values priced" in out
    # docs/commands.md states the count.
    commands_doc = (Path(__file__).resolve().parent.parent / "docs" / "commands.md").read_text(encoding="utf-8")
    assert f"quotacalc prices ({len(document['model_types'])})" in commands_doc


def test_the_readmes_worked_example_is_what_price_prints(run_cli, monkeypatch):
    # README "A platform engineer" shows `quotacalc price examples/llama-3.3-70b-h100.yaml` (101 columns, trailing blanks
    # stripped): a change of any figure fails here until the README is regenerated with it.
    monkeypatch.setenv("COLUMNS", "101")
    root = Path(__file__).resolve().parent.parent
    code, out, err = run_cli("price", str(root / "examples" / "llama-3.3-70b-h100.yaml"))
    assert code == 0, err
    readme = (root / "README.md").read_text(encoding="utf-8")
    marker = "`quotacalc price examples/llama-3.3-70b-h100.yaml` (the method's worked example):\n\n```\n"
    shown = readme[readme.index(marker) + len(marker) :].split("```", 1)[0]
    printed = "".join(line.rstrip() + "\n" for line in out.splitlines())
    assert shown == printed


def test_the_readmes_sales_example_is_what_size_prints(run_cli, monkeypatch):
    # README "Sales" shows `quotacalc size examples/llama-3.3-70b-h100.yaml` (101 columns, trailing blanks stripped).
    monkeypatch.setenv("COLUMNS", "101")
    root = Path(__file__).resolve().parent.parent
    code, out, err = run_cli("size", str(root / "examples" / "llama-3.3-70b-h100.yaml"))
    assert code == 0, err
    readme = (root / "README.md").read_text(encoding="utf-8")
    marker = (
        "`quotacalc size examples/llama-3.3-70b-h100.yaml` (the file's tenant: 5 req/s, 2,000 prompt and 500 output"
        " tokens):\n\n```\n"
    )
    shown = readme[readme.index(marker) + len(marker) :].split("```", 1)[0]
    printed = "".join(line.rstrip() + "\n" for line in out.splitlines())
    assert shown == printed


def test_the_engine_basis_figures_in_docs_figures_are_what_price_prints(run_cli):
    root = Path(__file__).resolve().parent.parent
    code, out, err = run_cli(
        "price", str(root / "examples" / "llama-3.3-70b-h100.yaml"), "--pricing-basis", "engine", "--json"
    )
    assert code == 0, err
    figures = json.loads(out)["results"]
    stated = (
        f"W {figures['output_weight']:.2f}, {figures['replica_units_per_s']:,.0f} units/s, "
        f"${figures['usd_per_million_output_tokens']:.2f} instead of $0.47"
    )
    assert stated in " ".join((root / "docs" / "figures.md").read_text(encoding="utf-8").split())


def test_help_names_every_engine_profile_and_shows_enum_defaults_by_value(run_cli, monkeypatch):
    from quotacalc.catalog.engines import load_engine_catalog
    from quotacalc.core.deployment import Deployment

    described = Deployment.model_fields["engine"].description
    assert all(engine in described for engine in load_engine_catalog().engines)
    monkeypatch.setenv("COLUMNS", "300")
    code, out, _ = run_cli("price", "--help")
    assert code == 0 and "[default: roofline]" in out and "PricingBasis." not in out


@pytest.mark.parametrize(
    ("model", "growing", "windowed"),
    [
        # gpt-oss-120b: 18 full and 18 sliding (128-token) layers, 8 KV heads x (64 + 64) x 2 B each.
        ("gpt-oss-120b", 18 * 8 * 128 * 2, 18 * 8 * 128 * 2),
        # Gemma 3 27B: 10 full and 52 sliding (1,024) layers, 16 KV heads x (128 + 128) x 2 B.
        ("gemma-3-27b-it", 10 * 16 * 256 * 2, 52 * 16 * 256 * 2),
        # Llama 3.1 8B: every layer grows (32 x 8 x 256 x 2 B), none windowed.
        ("Llama-3.1-8B-Instruct", 32 * 8 * 256 * 2, 0),
    ],
)
def test_windowed_kv_per_token_is_reported_beside_the_growing_kv(run_cli, model, growing, windowed):
    """kv_bytes_per_token counts the layers that keep growing; what the windowed layers cost a token while it is
    inside their window is window_kv_bytes_per_token, and the table shows it as a second row."""
    args = ("price", "--model", model, "--gpu", "h200", "--tp", "4")
    code, out, err = run_cli(*args, "--json")
    assert code == 0, err
    results = json.loads(out)["results"]
    assert results["kv_bytes_per_token"] == growing
    assert results["window_kv_bytes_per_token"] == windowed
    code, table, err = run_cli(*args)
    assert code == 0, err
    assert ("+ windowed KV per token" in table) == bool(windowed)
    if windowed:
        assert f"{windowed:,} B" in table


def test_assumptions_about_the_model_are_shown_with_every_table(run_cli, tmp_path):
    """A size left to transformers' class default moves every figure (Llama 3.3 70B without vocab_size: 32,000
    rows, 1.6 B parameters fewer): the table says so, not only --explain and the JSON."""
    config = json.loads(
        (Path(__file__).parent.parent / "models" / "Llama-3.3-70B-Instruct" / "config.json").read_text()
    )
    del config["vocab_size"]
    (tmp_path / "config.json").write_text(json.dumps(config), encoding="utf-8")
    note = "vocab_size not stated in the config: transformers' default 32000 taken"
    deployment = ("--model", str(tmp_path), "--gpu", "h100-sxm", "--tp", "8")
    for args in (
        ("price", *deployment),
        ("size", *deployment, "--rps", "1", "--prompt-tokens", "100", "--output-tokens", "100"),
        ("kv", *deployment, "--context", "1000"),
    ):
        code, out, err = run_cli(*args)
        assert code == 0, err
        assert "Assumptions about the model" in out and note in out, args[0]
    code, out, _ = run_cli("price", "--model", "Llama-3.3-70B-Instruct", "--gpu", "h100-sxm", "--tp", "8")
    assert code == 0 and "Assumptions about the model" not in out  # a config that states its sizes has none
