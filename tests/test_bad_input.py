"""Bad input: a non-zero exit with the right code, one line on stderr naming the input, never a traceback."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from quotacalc.errors import EXIT_INVALID_INPUT, EXIT_USAGE

INVALID = EXIT_INVALID_INPUT  # 1: parses, but cannot be priced
USAGE = EXIT_USAGE  # 2: unknown names, missing or malformed arguments

MODEL = "Llama-3.3-70B-Instruct"
M = ("--model", MODEL, "--gpu", "h100-sxm")
M4 = (*M, "--tp", "4")
TENANT = ("--prompt-tokens", "10", "--output-tokens", "10")

LLAMA_TEMPLATE = {
    "model_type": "llama",
    "hidden_size": 1024,
    "intermediate_size": 2816,
    "num_hidden_layers": 4,
    "num_attention_heads": 16,
    "num_key_value_heads": 4,
    "vocab_size": 32000,
    "max_position_embeddings": 4096,
    "torch_dtype": "bfloat16",
}


def assert_one_line_error(code: int, out: str, err: str, expected_code: int, *needles: str) -> str:
    """The error contract of ``quotacalc.cli.app.main``; returns the error line."""
    assert code != 0, f"exit 0 for bad input; stdout={out!r} stderr={err!r}"
    assert code == expected_code, f"exit {code}, want {expected_code}: {err!r}"
    assert "Traceback" not in out + err
    assert out == "", f"bad input printed to stdout: {out!r}"
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, f"want one line on stderr, got {len(lines)}: {err!r}"
    line = lines[0]
    assert line.startswith("quotacalc: error: "), line
    for needle in needles:
        assert needle in line, f"{needle!r} not in {line!r}"
    return line


def write_config(directory: Path, config: dict | str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    text = config if isinstance(config, str) else json.dumps(config, indent=2)
    (directory / "config.json").write_text(text, encoding="utf-8")
    return directory


def write_yaml(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


# --------------------------------------------------------------------------- model and GPU names


@pytest.mark.parametrize(
    ("model", "needles"),
    [
        ("Llama-3.3-70B-Instruc", ("model", "'Llama-3.3-70B-Instruc'", "did you mean Llama-3.3-70B-Instruct")),
        ("no-such-model-xyz", ("model", "'no-such-model-xyz'")),
    ],
)
def test_unknown_model_suggests_close_names(run_cli, model, needles):
    result = run_cli("price", "--model", model, "--gpu", "h100-sxm", "--tp", "4")
    assert_one_line_error(*result, USAGE, *needles)


def test_unknown_gpu_suggests_close_names(run_cli):
    result = run_cli("price", "--model", MODEL, "--gpu", "h1000", "--tp", "4")
    line = assert_one_line_error(*result, USAGE, "gpu", "'h1000'", "did you mean")
    assert "h100" in line.split("did you mean", 1)[1]


# --------------------------------------------------------------------------- model configs on disk


def test_directory_without_config_json(run_cli, tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    result = run_cli("price", "--model", str(empty), "--gpu", "h100-sxm")
    assert_one_line_error(*result, USAGE, str(empty), "model", "config.json")


def test_broken_config_json_names_the_line(run_cli, tmp_path):
    broken = write_config(tmp_path / "broken", '{\n  "model_type": "llama",\n  "hidden_size": 4096,\n}\n')
    result = run_cli("price", "--model", str(broken), "--gpu", "h100-sxm")
    assert_one_line_error(*result, INVALID, "config.json", "malformed config JSON", "line 4")


@pytest.mark.parametrize(
    "missing",
    ["num_hidden_layers", "num_attention_heads"],
    ids=["no-layers", "no-heads"],
)
def test_config_missing_sizes_is_refused_not_defaulted(run_cli, tmp_path, missing):
    # transformers' LlamaConfig would fill these in (32 layers, 32 heads); quotacalc must not guess.
    config = {key: value for key, value in LLAMA_TEMPLATE.items() if key != missing}
    if missing == "num_attention_heads":
        config.pop("num_key_value_heads")
    model = write_config(tmp_path / missing, config)
    result = run_cli("price", "--model", str(model), "--gpu", "h100-sxm")
    assert_one_line_error(*result, INVALID, "config.json", missing, "missing")


def test_config_with_unknown_model_type(run_cli, tmp_path):
    model = write_config(tmp_path / "unknown", {**LLAMA_TEMPLATE, "model_type": "frobnicator"})
    result = run_cli("price", "--model", str(model), "--gpu", "h100-sxm")
    assert_one_line_error(*result, INVALID, "model_type", "'frobnicator'", "unknown")


def test_config_of_a_custom_code_model(run_cli, tmp_path):
    """ChatGLM's config class lives in its own repository (auto_map): upgrading transformers would not help."""
    auto_map = {"AutoConfig": "configuration_chatglm.ChatGLMConfig"}
    model = write_config(tmp_path / "chatglm", {**LLAMA_TEMPLATE, "model_type": "chatglm", "auto_map": auto_map})
    result = run_cli("price", "--model", str(model), "--gpu", "h100-sxm")
    line = assert_one_line_error(*result, INVALID, "model_type", "'chatglm'", "custom-code model (auto_map)")
    assert "upgrade transformers" not in line


def test_architecture_not_priced_yet_t5(run_cli, tmp_path):
    t5 = {"model_type": "t5", "d_model": 512, "d_kv": 64, "d_ff": 2048, "num_layers": 6, "num_heads": 8}
    model = write_config(tmp_path / "t5", {**t5, "vocab_size": 32128})
    result = run_cli("price", "--model", str(model), "--gpu", "h100-sxm")
    line = assert_one_line_error(*result, INVALID, "model_type", "'t5'", "not priced yet")
    assert "supported:" in line and "llama" in line


def test_layer_type_not_priced_yet(run_cli, tmp_path):
    kinds = ["full_attention", "linear_attention", "full_attention", "full_attention"]
    model = write_config(tmp_path / "linear", {**LLAMA_TEMPLATE, "layer_types": kinds})
    result = run_cli("price", "--model", str(model), "--gpu", "h100-sxm")
    assert_one_line_error(*result, INVALID, "layer_types", "'linear_attention'", "layer 1")


def test_model_too_big_for_the_gpu(run_cli):
    result = run_cli("price", "--model", "DeepSeek-V3", "--gpu", "l4", "--tp", "1")
    assert_one_line_error(*result, INVALID, "DeepSeek-V3", "does not fit", "l4", "raise --tp")


def test_hub_id_unreachable_offline(run_cli, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    # huggingface_hub reads HF_HUB_OFFLINE once, at import; in-process it may already be imported.
    constants = sys.modules.get("huggingface_hub.constants")
    if constants is not None:
        monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    result = run_cli("price", "--model", "someorg/some-model", "--gpu", "h100-sxm")
    line = assert_one_line_error(*result, INVALID, "model", "'someorg/some-model'", "offline")
    assert "hub" in line.lower()


# --------------------------------------------------------------------------- deployment flags

OUT_OF_UNIT_INTERVAL = [(flag, value) for flag in ("--mfu", "--mbu", "--ceiling") for value in ("0", "1.5", "-0.1")]


@pytest.mark.parametrize(("flag", "value"), OUT_OF_UNIT_INTERVAL)
def test_efficiency_and_ceiling_outside_unit_interval(run_cli, flag, value):
    result = run_cli("price", *M4, flag, value)
    assert_one_line_error(*result, INVALID, flag, "(0, 1]")


@pytest.mark.parametrize(
    ("flag", "value"),
    [("--tp", "0"), ("--tp", "-2"), ("--batch", "0"), ("--batch", "-5"), ("--context", "0"), ("--context", "-1")],
)
def test_non_positive_integers(run_cli, flag, value):
    args = [*M, "--tp", "4"] if flag != "--tp" else list(M)
    result = run_cli("price", *args, flag, value)
    assert_one_line_error(*result, INVALID, flag, "positive", value)


def test_tp_not_dividing_heads(run_cli):
    result = run_cli("price", *M, "--tp", "3")
    line = assert_one_line_error(*result, INVALID, "tp", "3 does not divide", "heads")
    fix = line.rpartition("(")[2]  # the fix: a list of valid TP sizes, or advice to choose one
    assert line.endswith(")") and ("divisor" in fix or "4" in fix.replace(",", " ").split()), line


def test_negative_gpu_hour_usd(run_cli):
    result = run_cli("price", *M4, "--gpu-hour-usd", "-1")
    assert_one_line_error(*result, INVALID, "--gpu-hour-usd", "negative")


@pytest.mark.parametrize(("value", "needle"), [("0", "positive"), ("-15.4", "positive"), ("1001", "at most 1,000")])
def test_sampler_bytes_per_logit_out_of_range(run_cli, value, needle):
    result = run_cli("price", *M4, "--sampler-bytes-per-logit", value)
    assert_one_line_error(*result, INVALID, "--sampler-bytes-per-logit", needle)


@pytest.mark.parametrize(
    ("flag", "field", "value", "suggestion"),
    [
        ("--weight-dtype", "weight_dtype", "fp9", "did you mean fp8"),
        ("--kv-dtype", "kv_dtype", "bf61", "did you mean bf16"),
        ("--weight-dtype", "weight_dtype", "bogus", "fp8"),
    ],
)
def test_unknown_dtype_suggests_close(run_cli, flag, field, value, suggestion):
    result = run_cli("price", *M4, flag, value)
    assert_one_line_error(*result, USAGE, flag, f"unknown dtype '{value}'", suggestion)


def test_missing_model(run_cli):
    result = run_cli("price", "--gpu", "h100-sxm", "--tp", "4")
    assert_one_line_error(*result, USAGE, "--model", "required")


@pytest.mark.parametrize(
    ("args", "needle"),
    [(("--tp", "four"), "--tp"), (("--bogus", "3"), "--bogus")],
    ids=["flag-wrong-type", "unknown-flag"],
)
def test_malformed_command_line_is_a_usage_error(run_cli, args, needle):
    result = run_cli("price", *M, *args)
    assert_one_line_error(*result, USAGE, needle)


# --------------------------------------------------------------------------- deployment YAML


def test_yaml_malformed(run_cli, tmp_path):
    plan = write_yaml(tmp_path / "malformed.yaml", "model: [unclosed\n")
    result = run_cli("price", str(plan))
    assert_one_line_error(*result, INVALID, str(plan), "malformed YAML", "line")


def test_yaml_duplicate_key_names_key_and_line(run_cli, tmp_path):
    plan = write_yaml(tmp_path / "dup.yaml", f"model: {MODEL}\ngpu: h100-sxm\ntp: 4\ntp: 8\n")
    result = run_cli("price", str(plan))
    assert_one_line_error(*result, INVALID, str(plan), "duplicate key 'tp'", "line 4")


def test_yaml_unknown_key_is_named(run_cli, tmp_path):
    plan = write_yaml(tmp_path / "typo.yaml", f"model: {MODEL}\ngpu: h100-sxm\ntensor_paralel: 4\n")
    result = run_cli("price", str(plan))
    assert_one_line_error(*result, INVALID, str(plan), "unknown key 'tensor_paralel'", "did you mean")


def test_yaml_unknown_key_suggests_tp(run_cli, tmp_path):
    plan = write_yaml(tmp_path / "typo.yaml", f"model: {MODEL}\ngpu: h100-sxm\ntensor_paralel: 4\n")
    result = run_cli("price", str(plan))
    assert_one_line_error(*result, INVALID, "tensor_paralel", "did you mean 'tp'")


def test_yaml_top_level_list(run_cli, tmp_path):
    plan = write_yaml(tmp_path / "list.yaml", f"- model: {MODEL}\n- gpu: h100-sxm\n")
    result = run_cli("price", str(plan))
    assert_one_line_error(*result, INVALID, str(plan), "mapping")


def test_yaml_missing_file(run_cli, tmp_path):
    plan = tmp_path / "nope.yaml"
    result = run_cli("price", str(plan))
    assert_one_line_error(*result, USAGE, "nope.yaml", "no such file")


def test_yaml_value_of_wrong_type(run_cli, tmp_path):
    plan = write_yaml(tmp_path / "wrong.yaml", f"model: {MODEL}\ngpu: h100-sxm\ntp: four\n")
    result = run_cli("price", str(plan))
    assert_one_line_error(*result, INVALID, str(plan), "tp", "integer")


@pytest.mark.parametrize("command", ["price", "size", "kv"])
@pytest.mark.parametrize(("flag", "value"), [("--mfu", "1e-320"), ("--mbu", "1e-310"), ("--ceiling", "0.005")])
def test_a_share_too_small_to_run_anything_is_refused_not_priced_at_infinity(run_cli, command, flag, value):
    # A subnormal share divided the replica's time by ~0: a ZeroDivisionError, a JSON 'inf', or $inf at exit 0.
    extra = {"size": ("--rps", "1", "--prompt-tokens", "10", "--output-tokens", "10"), "kv": ("--context", "100")}
    result = run_cli(command, *M4, flag, value, "--json", *extra.get(command, ()))
    assert_one_line_error(*result, INVALID, flag, "must be in [0.01, 1]", value)


def test_yaml_bad_deployment_value_names_the_key(run_cli, tmp_path):
    plan = write_yaml(tmp_path / "mfu.yaml", f"model: {MODEL}\ngpu: h100-sxm\ntp: 4\nmfu: 1.5\n")
    result = run_cli("price", str(plan))
    assert_one_line_error(*result, INVALID, str(plan), "mfu", "(0, 1]")


# --------------------------------------------------------------------------- tenants (size) and kv

TENANT_YAML = f"model: {MODEL}\ngpu: h100-sxm\ntp: 4\ntenant:\n"


@pytest.mark.parametrize(
    ("tenant", "needles"),
    [
        ("  rps: -1\n  prompt_tokens: 10\n  output_tokens: 10\n", ("tenant.rps", "negative")),
        (
            "  rps: 1\n  prompt_tokens: 10\n  output_tokens: 10\n  cached_fraction: 1.5\n",
            ("tenant.cached_fraction", "[0, 1]", "1.5"),
        ),
        ("  rps: 1\n  prompt_tokens: 10\n  output_tokens: 10\n  rsp: 2\n", ("tenant.rsp", "unknown key")),
    ],
    ids=["negative-rps", "cached-fraction-above-one", "unknown-tenant-key"],
)
def test_yaml_tenant_section_errors(run_cli, tmp_path, tenant, needles):
    plan = write_yaml(tmp_path / "tenant.yaml", TENANT_YAML + tenant)
    result = run_cli("size", str(plan))
    assert_one_line_error(*result, INVALID, str(plan), *needles)


def test_yaml_tenant_not_a_mapping(run_cli, tmp_path):
    plan = write_yaml(tmp_path / "tenant.yaml", f"model: {MODEL}\ngpu: h100-sxm\ntp: 4\ntenant: 5\n")
    result = run_cli("size", str(plan))
    assert_one_line_error(*result, INVALID, str(plan), "tenant", "mapping")


@pytest.mark.parametrize(
    ("args", "needles"),
    [
        (("--rps", "-1", *TENANT), ("--rps", "negative")),
        (("--rps", "1", *TENANT, "--cached-fraction", "1.5"), ("--cached-fraction", "[0, 1]")),
    ],
    ids=["negative-rps", "cached-fraction-above-one"],
)
def test_tenant_flag_errors(run_cli, args, needles):
    result = run_cli("size", *M4, *args)
    assert_one_line_error(*result, INVALID, *needles)


def test_size_without_rps(run_cli):
    result = run_cli("size", *M4, *TENANT)
    assert_one_line_error(*result, USAGE, "--rps", "required")


def test_kv_without_context(run_cli):
    result = run_cli("kv", *M4)
    assert_one_line_error(*result, USAGE, "--context", "required")


def test_kv_context_zero(run_cli):
    result = run_cli("kv", *M4, "--context", "0")
    assert_one_line_error(*result, INVALID, "--context", "positive")


# --------------------------------------------------------------------------- good YAML: flags and files together


def test_flags_override_the_yaml_file(run_cli, tmp_path):
    plan = write_yaml(tmp_path / "plan.yaml", f"model: {MODEL}\ngpu: h100-sxm\ntp: 8\nbatch: 64\n")
    code, out, err = run_cli("price", str(plan), "--tp", "4", "--json")
    assert code == 0, err
    deployment = json.loads(out)["inputs"]["deployment"]
    assert deployment["tp"] == 4  # the flag wins
    assert deployment["batch"] == 64  # the file still supplies what no flag overrides
    assert deployment["model"] == MODEL


def test_yaml_tenant_section_feeds_size(run_cli, tmp_path):
    tenant = "  rps: 3\n  prompt_tokens: 1000\n  output_tokens: 200\n  cached_fraction: 0.25\n"
    plan = write_yaml(tmp_path / "plan.yaml", TENANT_YAML + tenant)
    code, out, err = run_cli("size", str(plan), "--json")
    assert code == 0, err
    document = json.loads(out)
    assert document["tenant"] == {"rps": 3, "prompt_tokens": 1000, "output_tokens": 200, "cached_fraction": 0.25}
    assert document["results"]["units_per_s"] == pytest.approx(3 * document["results"]["units_per_request"], rel=1e-12)

    # a flag overrides one tenant key and keeps the rest of the section
    code, out, err = run_cli("size", str(plan), "--rps", "6", "--json")
    assert code == 0, err
    assert json.loads(out)["tenant"] == {"rps": 6, "prompt_tokens": 1000, "output_tokens": 200, "cached_fraction": 0.25}


# --- limits a request or a batch cannot pass: errors, or priced at what runs, saying so -----------------------

LLAMA70 = ("--model", "Llama-3.3-70B-Instruct", "--gpu", "h100-sxm", "--tp", "4", "--weight-dtype", "fp8")


def test_kv_of_a_request_larger_than_the_pool_warns_and_fails_strict(run_cli):
    args = ("kv", *LLAMA70, "--context", "131072", "--kv-pool-tokens", "100000", "--batch", "8", "--json")
    code, out, err = run_cli(*args)
    document = json.loads(out)
    assert code == 0 and document["results"]["requests_resident"] == 0
    assert document["results"]["requests_to_fill_pool"] == 0  # none ever fits, so none fills it
    (warning,) = document["warnings"]
    assert warning.startswith("one request of 131,072 tokens needs 131% of the replica's KV pool (100,000 tokens)")
    assert err.count("quotacalc: warning: ") == 1
    code, _, err = run_cli(*args[:-1], "--strict")
    assert code == 1 and "under --strict" in err and "needs 131% of the replica's KV pool" in err


def test_max_model_len_bounds_size_and_kv_as_it_bounds_price(run_cli):
    code, out, err = run_cli(
        "size", *LLAMA70, "--max-model-len", "2048", "--rps", "1", "--prompt-tokens", "2000", "--output-tokens", "500"
    )
    assert code == 1 and out == "" and err.count("\n") == 1
    assert "--prompt-tokens: one request of 2,500 tokens (prompt 2,000 + output 500) exceeds max_model_len 2,048" in err
    code, out, err = run_cli("kv", *LLAMA70, "--max-model-len", "2048", "--context", "4000")
    assert (
        code == 1 and "error: --context: 4,000 tokens exceed max_model_len 2,048" in err
    )  # the flag, as price names it
    code, out, err = run_cli("size", *LLAMA70, "--rps", "1", "--prompt-tokens", "130000", "--output-tokens", "5000")
    assert (
        code == 1
        and "one request of 135,000 tokens (prompt 130,000 + output 5,000) exceeds "
        "Llama-3.3-70B-Instruct's maximum context of 131,072"
        in err
    )


def test_the_full_load_workload_must_run(run_cli):
    code, out, err = run_cli("price", *LLAMA70, "--load-prompt-tokens", "200000")
    assert (
        code == 1 and out == "" and "--load-prompt-tokens: the full-load workload's requests of 200,128 tokens" in err
    )
    code, out, err = run_cli(
        "price",
        *LLAMA70,
        "--load-prompt-tokens",
        "120000",
        "--load-output-tokens",
        "10000",
        "--kv-pool-tokens",
        "100000",
        "--json",
    )
    document = json.loads(out)
    assert code == 0 and document["results"]["max_load_batch"] == 0
    assert any(
        w.startswith("no request of the full-load workload (120,000 + 10,000 tokens) fits the KV pool")
        for w in document["warnings"]
    )


def test_a_batch_above_max_num_seqs_is_priced_at_max_num_seqs(run_cli):
    _, out, _ = run_cli("price", *LLAMA70, "--batch", "1", "--json")
    one = json.loads(out)["results"]
    code, out, _ = run_cli("price", *LLAMA70, "--batch", "128", "--max-num-seqs", "1", "--json")
    document = json.loads(out)
    assert code == 0 and document["results"]["decode_batch"] == 1
    assert document["results"]["output_weight"] == one["output_weight"]
    assert document["warnings"] == [
        "a decode batch of 128 is above max_num_seqs 1, the most the engine runs at once: priced at batch 1 (lower "
        "--batch, or raise --max-num-seqs)"
    ]


def test_an_error_about_a_value_names_where_it_came_from(run_cli, tmp_path):
    """The plan file for a value it gave, the flag for one a flag gave; and the input to blame where weights fit."""
    plan = tmp_path / "plan.yaml"
    plan.write_text("model: Llama-3.3-70B-Instruct\ngpu: h100x\ntp: 4\n", encoding="utf-8")
    code, _, err = run_cli("price", plan)
    assert code == 2 and err.startswith(f"quotacalc: error: {plan}: gpu: unknown GPU 'h100x'")
    plan.write_text("model: Llama-3.3-70B-Instruct\ngpu: h100-sxm\ntp: 4\nweight_dtype: fp8\n", encoding="utf-8")
    code, _, err = run_cli("price", plan, "--gpu", "h100x")
    assert code == 2 and err.startswith("quotacalc: error: --gpu: unknown GPU 'h100x'")
    code, _, err = run_cli("price", plan, "--runtime-reserve-gib", "60")
    assert code == 1 and err.startswith(
        "quotacalc: error: --runtime-reserve-gib: 0.9 of h100-sxm's 85.0 GB less 17.6 GB"
    )
    code, _, err = run_cli("price", plan, "--memory-utilization", "0.01")
    assert (
        code == 1
        and "--memory-utilization: 0.01 of h100-sxm's 85.0 GB" in err
        and "(raise --memory-utilization)" in err
    )
    code, _, err = run_cli("price", plan, "--tp", "1", "--weight-dtype", "bf16")
    assert code == 1 and "--tp: Llama-3.3-70B-Instruct does not fit: 141.1 GB of weights per GPU" in err


def test_negative_zero_prices_as_zero_not_minus_zero(run_cli):
    code, out, err = run_cli("price", *M4, "--gpu-hour-usd", "-0", "--cached-prompt-weight", "-0")
    assert code == 0 and "-0" not in out, out
    code, out, err = run_cli("price", *M4, "--gpu-hour-usd", "-0", "--json")
    assert code == 0 and not err and '"gpu_hour_usd": 0.0' in out and '"gpu_hour_usd": -0.0' not in out


def test_a_max_model_len_beyond_any_context_is_refused_where_no_price_checks_it(run_cli):
    # calibrate never prices the deployment, where the model's maximum context refuses it.
    bench = str(Path(__file__).parent.parent / "examples" / "calibration" / "nim-llama-3.3-70b-h100-tp2.csv")
    code, out, err = run_cli("calibrate", *M4, "--bench", bench, "--max-model-len", str(10**20))
    assert code == 1 and out == "" and "--max-model-len: must be at most 100,000,000" in err, err


def test_size_of_a_platform_plan_refuses_explain_rather_than_ignore_it(run_cli):
    """A platform plan's size prints a row per tenant; --explain explains one tenant's figures, so it is refused
    (exit 2, one line naming the flag and what to do), not silently dropped."""
    plan = str(Path(__file__).parent.parent / "examples" / "platform.yaml")
    code, out, err = run_cli("size", plan, "--explain")
    assert code == 2 and out == "" and err.count("\n") == 1
    assert "--explain: explains one tenant, not a platform plan's rows" in err
    code, out, err = run_cli(
        "size", plan, "--pool", "shared", "--rps", "1", "--prompt-tokens", "1000", "--output-tokens", "100", "--explain"
    )
    assert code == 0 and "units per request" in out


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (("examples", "platform", "--copy", "/etc/passwd"), 2, "/etc/passwd: --copy: is not a directory"),
        (("examples", "platform", "--copy", ""), 2, "--copy: is empty"),
        (("examples", "platform", "--copy", "/proc/quotacalc-none"), 1, "--copy: cannot write there"),
        (("generate", "examples/platform.yaml", "--out", " "), 2, "--out: is empty"),
    ],
    ids=["copy-onto-a-file", "copy-empty", "copy-unwritable", "out-empty"],
)
def test_output_places_that_cannot_be_written_are_one_line_errors(run_cli, args, code, message, monkeypatch):
    """Before: a NotADirectoryError / FileNotFoundError as 'internal error' (exit 3), and an empty --copy or --out
    wrote into the current directory."""
    monkeypatch.chdir(Path(__file__).parent.parent)
    got, out, err = run_cli(*args)
    assert got == code and out == "" and err.count("\n") == 1, err
    assert message in err and "internal error" not in err


def test_stdout_on_a_full_disk_is_a_one_line_error():
    """`price --json > /dev/full`: the write fails with ENOSPC; one line naming the output and a fix, exit 1."""
    import subprocess
    import sys

    plan = Path(__file__).parent.parent / "examples" / "llama-3.3-70b-h100.yaml"
    if not Path("/dev/full").exists():
        pytest.skip("no /dev/full on this system")
    with open("/dev/full", "w") as full:
        proc = subprocess.run(
            [sys.executable, "-c", "from quotacalc.cli.entry import main; main()", "price", str(plan), "--json"],
            stdout=full,
            stderr=subprocess.PIPE,
            timeout=60,
        )
    err = proc.stderr.decode()
    assert proc.returncode == 1, err
    assert (
        err
        == "quotacalc: error: the output: cannot write: No space left on device (free space there, or send the output elsewhere)\n"
    )


def test_an_unknown_dtype_in_a_plan_names_the_file_and_its_key(run_cli, tmp_path):
    """Before: 'dtype: unknown dtype' with neither the file nor the key (weight_dtype, kv_dtype, or the measured
    pool's record), read while comparing the deployment with the record of its measured pool."""
    example = Path(__file__).parent.parent / "examples" / "llama-3.3-70b-h100.yaml"
    text = example.read_text(encoding="utf-8")
    assert text.count("weight_dtype: fp8") == 2  # the deployment's, then the measured pool's record
    plan = tmp_path / "p.yaml"
    plan.write_text(text.replace("weight_dtype: fp8", "weight_dtype: fp7", 1), encoding="utf-8")
    code, out, err = run_cli("price", str(plan))
    assert (code, out) == (
        2,
        "",
    ) and err == f"quotacalc: error: {plan}: weight_dtype: unknown dtype 'fp7' (did you mean fp8, fp4?)\n"
    at = text.rindex("weight_dtype: fp8")
    plan.write_text(text[:at] + "weight_dtype: fp7" + text[at + len("weight_dtype: fp8") :], encoding="utf-8")
    code, out, err = run_cli("price", str(plan))
    assert code == 2 and f"{plan}: kv_pool_measured_with.weight_dtype: unknown dtype 'fp7'" in err
    code, out, err = run_cli("price", str(example), "--kv-dtype", "int3")
    assert code == 2 and err.startswith("quotacalc: error: --kv-dtype: unknown dtype 'int3'")
    platform = (Path(__file__).parent.parent / "examples" / "platform.yaml").read_text(encoding="utf-8")
    plan.write_text(platform.replace("{batch: 8, context: 65536}", "{batch: 8, context: 65536, kv_dtype: int3}"))
    code, out, err = run_cli("check", str(plan))
    assert code == 2 and f"{plan}: pools[1].deployment.kv_dtype: unknown dtype 'int3'" in err


@pytest.mark.parametrize("source", ["usage\u001b[31m", "two\nlines", "x" * 1001])
def test_an_oversubscription_source_is_one_printable_line(run_cli, tmp_path, source):
    """It is copied into the policy and every generated file: no escape sequence, newline, or a megabyte."""
    import json as json_module

    platform = (Path(__file__).parent.parent / "examples" / "platform.yaml").read_text(encoding="utf-8")
    plan = tmp_path / "p.yaml"
    plan.write_text(
        platform + f"oversubscription: {{ratio: 1.5, source: {json_module.dumps(source)}}}\n", encoding="utf-8"
    )
    code, out, err = run_cli("check", str(plan))
    assert code == 1 and out == "" and err.count("\n") == 1, err
    assert f"{plan}: oversubscription.source: " in err


def test_a_section_that_must_be_a_mapping_says_so_without_pydantics_class_name(run_cli, tmp_path):
    plan = tmp_path / "plan.yaml"
    plan.write_text(
        "model: Llama-3.3-70B-Instruct\ngpu: h100-sxm\ntp: 4\nkv_pool_tokens: 1000\nkv_pool_measured_with: h100\n",
        encoding="utf-8",
    )
    code, out, err = run_cli("price", plan)
    assert (code, out) == (1, "")
    assert err.strip() == f"quotacalc: error: {plan}: kv_pool_measured_with: must be a mapping"


def test_a_path_that_cannot_be_reached_is_a_usage_error_as_a_missing_one_is(run_cli, tmp_path, monkeypatch):
    """Exit 2 for a path the command line gives that cannot be opened (a folder without config.json, a file this
    user may not read), as for a missing one; exit 1 stays for a file that was read and is invalid."""
    code, out, err = run_cli("price", "--model", str(tmp_path), "--gpu", "h100-sxm")
    assert (code, out) == (2, "") and "no config.json in this directory" in err
    plan = tmp_path / "plan.yaml"
    plan.write_text("model: Llama-3.1-8B-Instruct\ngpu: h100-sxm\n", encoding="utf-8")
    import os

    real_open = os.open

    def denied(path, *args, **kwargs):
        if str(path) == str(plan):
            raise PermissionError(13, "Permission denied", str(path))
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(os, "open", denied)  # the tests run as root, whom chmod does not stop
    code, out, err = run_cli("price", plan)
    assert (code, out) == (2, "")
    assert err.strip() == (
        f"quotacalc: error: {plan}: cannot read: Permission denied (make the plan readable by this user, "
        "or give a copy that is)"
    )


def test_a_misspelt_key_inside_a_section_is_judged_against_that_sections_keys(run_cli, tmp_path):
    """kv_pool_measured_with.tpp: 'did you mean tp?', not the section's own name."""
    plan = tmp_path / "plan.yaml"
    plan.write_text(
        "model: Llama-3.3-70B-Instruct\ngpu: h100-sxm\ntp: 4\nkv_pool_tokens: 1000\n"
        "kv_pool_measured_with: {gpu: h100-sxm, tpp: 4}\n",
        encoding="utf-8",
    )
    code, out, err = run_cli("price", plan)
    assert (code, out) == (1, "")
    assert err.strip() == (
        f"quotacalc: error: {plan}: kv_pool_measured_with.tpp: unknown key 'kv_pool_measured_with.tpp' "
        "(did you mean 'tp'?)"
    )
