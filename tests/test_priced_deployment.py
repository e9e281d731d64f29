"""``price``, ``kv`` and ``size`` of one deployment name each value where it was set (quotacalc/priced/deployment.py).

A value a flag gave is named by the flag (``--batch``); one a plan gave, by its key (``batch`` in a flat plan,
``pools.long.deployment.batch`` in a platform plan); a default, by what sets it: the flag with no file, else the
pool's key, and a platform plan's tier key (``burst_s``, not a pool's) by the flag. The figures: Llama 3.3 70B FP8
on 4 H100 SXM with a measured pool of 100,000 tokens holds one sequence of 65,536 tokens (100,000 // 65,536), so a
batch of 16 at that context is priced at 1 with a warning, and a request of 120,000 tokens needs 120% of the pool.
"""

from __future__ import annotations

import json

import pytest

DEPLOYMENT = {"model": "Llama-3.3-70B-Instruct", "gpu": "h100-sxm", "tp": 4, "weight_dtype": "fp8"}
FLAGS = ("--model", "Llama-3.3-70B-Instruct", "--gpu", "h100-sxm", "--tp", "4", "--weight-dtype", "fp8")
SMALL_POOL = {"kv_pool_tokens": 100_000, "batch": 16, "context": 65_536}
SMALL_POOL_FLAGS = ("--kv-pool-tokens", "100000", "--batch", "16", "--context", "65536")

BATCH_PROBLEM = "a decode batch of 16 at 65,536 tokens does not fit the KV pool, which holds 1 such sequences"
REQUEST_PROBLEM = "one request of 120,000 tokens needs 120% of the replica's KV pool (100,000 tokens)"


def _yaml(tmp_path, name: str, document: dict) -> str:
    import yaml

    path = tmp_path / name
    path.write_text(yaml.safe_dump(document, sort_keys=False), encoding="utf-8")
    return str(path)


def _flat(tmp_path, **extra) -> str:
    return _yaml(tmp_path, "flat.yaml", {**DEPLOYMENT, **SMALL_POOL, **extra})


def _platform(tmp_path, inherited: dict | None = None, own: dict | None = None) -> str:
    """One pool, ``long``, taking ``inherited`` from the plan's top-level deployment and setting ``own`` itself."""
    document = {
        "deployment": {**DEPLOYMENT, **(inherited or {})},
        "pools": [{"name": "long", "replicas": 1, "deployment": own or {}}],
        "tiers": [
            {
                "name": "std",
                "max_context_tokens": 8192,
                "kv_cap_tokens_per_replica": 65536,
                "max_concurrent_sequences": 8,
                "max_output_tokens": 2048,
                "priority": 0,
                "burst_s": 60,
            }
        ],
        "tenants": [{"name": "acme", "tier": "std", "pool": "long", "units_per_s": 100}],
    }
    return _yaml(tmp_path, "platform.yaml", document)


def _warnings(err: str) -> list[str]:
    return [line.removeprefix("quotacalc: warning: ") for line in err.splitlines() if line.startswith("quotacalc: w")]


def _batch_warning(err: str) -> str:
    (warning,) = [line for line in _warnings(err) if line.startswith(BATCH_PROBLEM)]
    return warning


# price


def test_price_from_flags_names_the_flags(run_cli):
    code, _, err = run_cli("price", *FLAGS, *SMALL_POOL_FLAGS)
    assert code == 0, err
    assert _batch_warning(err).endswith("(lower --batch, raise --tp, or use --kv-dtype fp8)")


def test_price_of_a_flat_plan_names_its_keys(run_cli, tmp_path):
    code, out, err = run_cli("price", _flat(tmp_path), "--json")
    assert code == 0, err
    (warning,) = [w for w in json.loads(out)["warnings"] if w.startswith(BATCH_PROBLEM)]
    assert warning.endswith("(lower batch, raise tp, or use kv_dtype: fp8)")


def test_price_of_a_platform_pool_names_its_keys_and_a_flag_the_flag(run_cli, tmp_path):
    plan = _platform(tmp_path, inherited={"kv_pool_tokens": 100_000}, own={"batch": 16, "context": 65_536})
    code, _, err = run_cli("price", plan)
    assert code == 0, err
    assert _batch_warning(err).endswith(
        "(lower pools.long.deployment.batch, raise pools.long.deployment.tp, or use pools.long.deployment.kv_dtype: "
        "fp8)"
    )
    code, _, err = run_cli("price", plan, "--batch", "16", "--kv-dtype", "bf16")
    assert code == 0, err
    assert _batch_warning(err).endswith("(lower --batch, raise pools.long.deployment.tp, or use --kv-dtype fp8)")


def test_price_errors_name_the_flag_or_the_key_that_gave_the_value(run_cli, tmp_path):
    # 64 attention heads do not split over 3 GPUs: the flag, the pool's key, the inherited key.
    code, _, err = run_cli("price", *FLAGS[:-4], "--tp", "3")
    assert code != 0 and err.startswith("quotacalc: error: --tp: 3 does not divide"), err
    plan = _platform(tmp_path, own={"tp": 3})
    code, _, err = run_cli("price", plan)
    assert code != 0 and err.startswith(f"quotacalc: error: {plan}: pools[0].deployment.tp: 3 does not divide"), err
    plan = _platform(tmp_path, inherited={"tp": 3})
    code, _, err = run_cli("price", plan)
    assert code != 0 and err.startswith(
        f"quotacalc: error: {plan}: pools[0].deployment.tp (inherited from deployment.tp): 3 does not divide"
    ), err
    code, _, err = run_cli("price", plan, "--tp", "3")
    assert code != 0 and err.startswith("quotacalc: error: --tp: 3 does not divide"), err


# kv


def _request_warning(err: str) -> str:
    (warning,) = [line for line in _warnings(err) if line.startswith(REQUEST_PROBLEM)]
    return warning


def test_kv_from_flags_names_the_flags(run_cli):
    code, _, err = run_cli("kv", *FLAGS, "--kv-pool-tokens", "100000", "--context", "120000")
    assert code == 0, err
    assert _request_warning(err).endswith("(a GPU with more memory, raise --tp, or use --kv-dtype fp8)")


def test_kv_of_a_plan_names_its_keys_in_the_table_and_the_json(run_cli, tmp_path):
    code, _, err = run_cli("kv", _flat(tmp_path), "--context", "120000")
    assert code == 0, err
    assert _request_warning(err).endswith("(a GPU with more memory, raise tp, or use kv_dtype: fp8)")
    assert _batch_warning(err).endswith("(lower batch, raise tp, or use kv_dtype: fp8)")
    plan = _platform(tmp_path, own={"kv_pool_tokens": 100_000})
    code, out, _ = run_cli("kv", plan, "--context", "120000", "--json")
    assert code == 0
    (warning,) = [w for w in json.loads(out)["warnings"] if w.startswith(REQUEST_PROBLEM)]
    assert warning.endswith(
        "(a GPU with more memory, raise pools.long.deployment.tp, or use pools.long.deployment.kv_dtype: fp8)"
    )


def test_kv_names_its_context_flag_in_an_error(run_cli, tmp_path):
    # The model's maximum context is 131,072 tokens: the request's context is kv's own flag, plan or not.
    code, _, err = run_cli("kv", _flat(tmp_path), "--context", "200000")
    assert code != 0 and err.startswith("quotacalc: error: --context: "), err


# size


def test_size_bucket_warning_names_burst_s_where_it_was_set(run_cli, tmp_path):
    # 0.001 req/s of 2,000 + 500 tokens: a 1 s bucket holds far less than one mean request.
    traffic = ("--rps", "0.001", "--prompt-tokens", "2000", "--output-tokens", "500")
    code, _, err = run_cli("size", *FLAGS, *traffic, "--burst-s", "1")
    assert code == 0, err
    assert any(line.startswith("tenant: ") and "(raise --burst-s to at least" in line for line in _warnings(err))
    flat = _yaml(tmp_path, "flat.yaml", {**DEPLOYMENT, "burst_s": 1})
    code, _, err = run_cli("size", flat, *traffic)
    assert code == 0, err
    assert any(line.startswith("tenant: ") and "(raise burst_s to at least" in line for line in _warnings(err))
    # A platform plan sets burst_s on a tier, not a pool: size of one tenant on a pool takes it from the flag.
    code, _, err = run_cli("size", _platform(tmp_path), "--pool", "long", *traffic)
    assert code == 0, err
    assert any(line.startswith("tenant: ") and "(raise --burst-s to at least" in line for line in _warnings(err))


def test_size_pricing_warnings_name_the_plans_keys(run_cli, tmp_path):
    traffic = ("--rps", "1", "--prompt-tokens", "2000", "--output-tokens", "500")
    plan = _platform(tmp_path, inherited={"kv_pool_tokens": 100_000}, own={"batch": 16, "context": 65_536})
    code, out, err = run_cli("size", plan, "--pool", "long", *traffic, "--json")
    assert code == 0, err
    (warning,) = [w for w in json.loads(out)["warnings"] if w.startswith(BATCH_PROBLEM)]
    assert warning.endswith(
        "(lower pools.long.deployment.batch, raise pools.long.deployment.tp, or use pools.long.deployment.kv_dtype: "
        "fp8)"
    )
    code, _, err = run_cli("size", *FLAGS, *SMALL_POOL_FLAGS, *traffic)
    assert code == 0, err
    assert _batch_warning(err).endswith("(lower --batch, raise --tp, or use --kv-dtype fp8)")


@pytest.mark.parametrize(
    ("section", "flags", "where"),
    [
        ({"rps": 0, "prompt_tokens": 100, "output_tokens": 10}, (), "{plan}: tenant.rps"),
        ({"rps": 1, "prompt_tokens": 100, "output_tokens": 10}, ("--rps", "0"), "--rps"),
    ],
    ids=["plan", "flag"],
)
def test_size_traffic_errors_name_the_flag_or_the_tenant_key(run_cli, tmp_path, section, flags, where):
    plan = _yaml(tmp_path, "flat.yaml", {**DEPLOYMENT, "tenant": section})
    code, _, err = run_cli("size", plan, *flags)
    assert code == 1 and err.startswith(f"quotacalc: error: {where.format(plan=plan)}: is 0"), err


def test_size_request_beyond_the_pool_names_the_keys_that_raise_it(run_cli, tmp_path):
    # 90,000 + 10,000 tokens need 100,000 / 50,000 = 200% of a 50,000-token pool: the fix names the pool's keys.
    section = {"rps": 1, "prompt_tokens": 90_000, "output_tokens": 10_000}
    plan = _yaml(tmp_path, "flat.yaml", {**DEPLOYMENT, "kv_pool_tokens": 50_000, "tenant": section})
    code, _, err = run_cli("size", plan)
    assert code == 1, err
    assert err.startswith(f"quotacalc: error: {plan}: tenant.prompt_tokens: one request of 100,000 tokens"), err
    assert err.rstrip().endswith(
        "(shorten the tenant's requests, use a GPU with more memory, raise tp, or use kv_dtype: fp8)"
    )
    code, _, err = run_cli("size", plan, "--prompt-tokens", "90000", "--tp", "4")
    assert code == 1 and err.startswith("quotacalc: error: --prompt-tokens: one request"), err
    assert err.rstrip().endswith("raise --tp, or use kv_dtype: fp8)")


# comparisons and fleet: the same origins, no error moved after the fact


def test_a_comparison_row_names_the_pools_key_or_the_axis(run_cli, tmp_path):
    plan = _platform(tmp_path, inherited={"tp": 3})
    code, out, _ = run_cli("price", plan, "--gpu", "h100-sxm,h200", "--json")
    assert code == 1
    reasons = [row["reason"] for row in json.loads(out)["rows"]]
    assert all(
        reason.startswith(f"{plan}: pools[0].deployment.tp (inherited from deployment.tp): 3 does not divide")
        for reason in reasons
    ), reasons
    code, out, _ = run_cli("price", plan, "--gpu", "h100-sxm,h200", "--tp", "3,4", "--json")
    reasons = [row["reason"] for row in json.loads(out)["rows"] if not row["feasible"]]
    assert len(reasons) == 2 and all(reason.startswith("--tp: 3 does not divide") for reason in reasons), reasons


@pytest.mark.parametrize(("flags", "where"), [((), "{plan}: context"), (("--context", "200000"), "--context")])
def test_a_comparisons_context_error_names_the_key_or_the_flag(run_cli, tmp_path, flags, where):
    # 200,000 tokens exceed Llama 3.3 70B's 131,072 whatever the GPU: the input's error, not a row's.
    plan = _yaml(tmp_path, "flat.yaml", {**DEPLOYMENT, "context": 200_000 if not flags else 1_000})
    code, _, err = run_cli("price", plan, "--gpu", "h100-sxm,h200", *flags)
    assert code == 1 and err.startswith(f"quotacalc: error: {where.format(plan=plan)}: 200,000 tokens exceed"), err


def test_fleet_of_flags_alone_names_the_flag(run_cli, tmp_path):
    pytest.importorskip("duckdb", reason="the fleet extra is not installed")
    log = tmp_path / "log.jsonl"
    log.write_text("{}\n", encoding="utf-8")
    code, _, err = run_cli("fleet", log, *FLAGS[:-4], "--tp", "3", "--json")
    assert code == 1 and err.startswith("quotacalc: error: --tp: 3 does not divide"), err


def test_a_comparison_rows_warnings_name_the_key_or_the_flag(run_cli, tmp_path):
    code, out, err = run_cli("price", _flat(tmp_path), "--gpu", "h100-sxm,h200", "--json")
    assert code == 0, err
    first = json.loads(out)["rows"][0]["warnings"]
    assert next(w for w in first if w.startswith(BATCH_PROBLEM)).endswith(
        "(lower batch, raise tp, or use kv_dtype: fp8)"
    )
    code, out, err = run_cli("price", *FLAGS[:-4], *SMALL_POOL_FLAGS, "--tp", "4,8", "--json")
    assert code == 0, err
    first = json.loads(out)["rows"][0]["warnings"]
    assert next(w for w in first if w.startswith(BATCH_PROBLEM)).endswith(
        "(lower --batch, raise --tp, or use --kv-dtype fp8)"
    )
    # size rows add the traffic's own warning, worded alike: --burst-s from the flag.
    traffic = ("--rps", "0.001", "--prompt-tokens", "2000", "--output-tokens", "500", "--burst-s", "1")
    code, out, err = run_cli("size", *FLAGS[:-4], "--tp", "4,8", *traffic, "--json")
    assert code == 0, err
    assert all("(raise --burst-s to at least" in row["warnings"][-1] for row in json.loads(out)["rows"])
