"""vLLM config files checked against the flags of a stated vLLM release; Inference Extension manifests against its CRDs."""

from __future__ import annotations

import json
import re
from pathlib import Path

import yaml
from crd_validation import validate_manifest
from policy_samples import platform_policy, sample_salts

from quotacalc.exporters import gie, vllm
from quotacalc.exporters.base import ExportOptions

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"

FLAGS_FILE = Path(__file__).parent / "targets" / f"vllm-{vllm.VLLM_VERSION}-flags.json"


def _flags() -> dict[str, dict]:
    table = json.loads(FLAGS_FILE.read_text(encoding="utf-8"))
    assert table["vllm_version"] == vllm.VLLM_VERSION
    return table["flags"]


def test_the_extracted_flag_table_holds_what_vllm_0_33_documents():
    """Figures from TARGETS.md (read in the 0.33.0 wheel): 321 long flags, scheduling-policy fcfs|priority,
    kv-cache-dtype including auto, bfloat16 and the fp8 variants."""
    flags = _flags()
    assert sum(1 for flag in flags if not flag.startswith("no-")) == 321
    assert flags["scheduling-policy"]["choices"] == ["fcfs", "priority"]
    assert {"auto", "float16", "bfloat16", "fp8", "fp8_e4m3", "fp8_e5m2"} <= set(flags["kv-cache-dtype"]["choices"])
    assert flags["enable-prefix-caching"]["type"] == "bool"


def test_every_generated_key_and_choice_is_a_flag_of_the_stated_release():
    flags = _flags()
    policy = platform_policy()
    result = vllm.export(policy, sample_salts(policy), ExportOptions())
    assert [f.path for f in result.files] == ["vllm/standard.yaml", "vllm/long.yaml"]
    for generated in result.files:
        config = yaml.safe_load(generated.text)
        for key, value in config.items():
            assert key in flags, f"{generated.path}: {key} is not a vLLM {vllm.VLLM_VERSION} flag"
            if "choices" in flags[key]:
                assert str(value) in flags[key]["choices"], (key, value)
            if flags[key].get("type") == "bool":
                assert isinstance(value, bool), (key, value)


def test_engine_values_come_from_the_policy_and_round_trip():
    policy = platform_policy()
    result = vllm.export(policy, {}, ExportOptions())
    data = vllm.documents(policy)
    for generated in result.files:
        assert yaml.safe_load(generated.text) == data[generated.path]
        assert not generated.secret
    long = data["vllm/long.yaml"]
    assert long["max-model-len"] == 131072
    assert long["max-num-seqs"] == 16
    assert long["scheduling-policy"] == "priority"
    assert long["tensor-parallel-size"] == 4
    assert long["enable-prefix-caching"] is True
    # acme's long prompts go to pool long, which must load its adapter too; initech does not route there.
    assert (
        "LoRA adapters (pool standard: acme-support-v2, initech-sql; pool long: acme-support-v2) are not loaded by "
        "these files: add enable-lora and lora-modules with the adapters' paths, which the policy does not hold."
    ) in result.limits


def test_a_key_outside_the_release_is_caught():
    """The check above can fail: a misspelt flag and a choice vLLM does not know."""
    flags = _flags()
    assert "max-num-sequences" not in flags
    assert "fp7" not in flags["kv-cache-dtype"]["choices"]


def test_inference_pools_pass_the_crd_and_objectives_are_opt_in():
    policy = platform_policy()
    plain = gie.export(policy, {}, ExportOptions())
    assert [f.path for f in plain.files] == ["gie/inferencepools.yaml"]
    pools = list(yaml.safe_load_all(plain.files[0].text))
    assert [pool["metadata"]["name"] for pool in pools] == ["standard", "long"]
    for manifest in pools:
        assert validate_manifest(manifest) == []
    assert pools == gie.documents(policy, ExportOptions())["gie/inferencepools.yaml"]
    from quotacalc.exporters.limits import limit_lines

    (priority,) = [line for line in limit_lines(plain, ExportOptions()) if line.startswith("**priority**")]
    assert priority.startswith("**priority**: lost. Priority tiers: not emitted")
    assert "removed from the Inference Extension's main branch in 2026" in priority and "--gie-objectives" in priority


def test_objectives_invert_the_policys_priority():
    """Tiers premium 0, standard 1, batch 2 (0 most important) -> objectives 2, 1, 0 (higher more important)."""
    policy = platform_policy()
    options = ExportOptions(gie_objectives=True)
    result = gie.export(policy, {}, options)
    objectives = list(yaml.safe_load_all(next(f.text for f in result.files if f.path.endswith("objectives.yaml"))))
    priorities = {o["metadata"]["name"]: o["spec"]["priority"] for o in objectives}
    assert priorities == {
        "premium-standard": 2,
        "premium-long": 2,
        "standard-standard": 1,
        "standard-long": 1,
        "batch-standard": 0,
        "batch-long": 0,
    }
    for manifest in objectives:
        assert validate_manifest(manifest) == []
    from quotacalc.exporters.limits import limit_lines

    (priority,) = [line for line in limit_lines(result, options) if line.startswith("**priority**")]
    assert priority.startswith("**priority**: approximated. An InferenceObjective (v1alpha2) per tier")
    assert "was removed from the Inference Extension's main branch in 2026 (pull request 2973)" in priority


def test_a_broken_inference_pool_is_rejected():
    manifest = gie.documents(platform_policy(), ExportOptions())["gie/inferencepools.yaml"][0]
    manifest["spec"]["targetPorts"] = [{"number": 8000}, {"number": 8000}]  # duplicate port: a CEL rule
    manifest["spec"]["endpointPickerRef"] = {"name": "epp"}  # a Service needs a port: a CEL rule
    problems = validate_manifest(manifest)
    assert len(problems) == 2, problems


def test_a_pool_priced_as_another_engine_gets_no_vllm_file_and_the_limit_says_so():
    """A plan's pool on SGLang (engine: sglang) is not started by vllm serve: its file is left out, by name."""
    policy = platform_policy()
    long = next(pool for pool in policy.pools if pool.name == "long")
    policy = policy.model_copy(
        update={
            "pools": tuple(
                pool.model_copy(update={"serving_engine": "sglang"}) if pool is long else pool for pool in policy.pools
            )
        }
    )
    result = vllm.export(policy, {}, ExportOptions())
    assert [f.path for f in result.files] == ["vllm/standard.yaml"]
    assert any(line.startswith("No vllm serve file for long (sglang)") for line in result.limits)
    assert not any("No vllm serve file" in line for line in vllm.export(platform_policy(), {}, ExportOptions()).limits)


def test_the_plan_carries_each_pools_engine_into_the_policy(tmp_path, run_cli):
    """engine: sglang on a plan's pool reaches the policy (serving_engine) and the vLLM target leaves it out."""
    root = Path(__file__).resolve().parent.parent
    document = yaml.safe_load((root / "examples" / "platform.yaml").read_text(encoding="utf-8"))
    pool = document["pools"][-1]
    # At the memory share the plan's pool was measured with (SGLang's own default would void the measurement).
    pool.setdefault("deployment", {}).update(engine="sglang", memory_utilization=0.9)
    plan = tmp_path / "plan.yaml"
    plan.write_text(yaml.safe_dump(document), encoding="utf-8")
    secret = tmp_path / "secret"
    secret.write_text("s" * 64, encoding="utf-8")
    out = tmp_path / "out"
    code, _, err = run_cli("generate", plan, "--out", out, "--salt-secret-file", secret)
    assert code == 0, err
    policy = json.loads((out / "canonical" / "policy.json").read_text(encoding="utf-8"))
    engines = {entry["name"]: entry["serving_engine"] for entry in policy["pools"]}
    assert engines[pool["name"]] == "sglang" and set(engines.values()) == {"generic", "sglang"}
    assert not (out / "vllm" / f"{pool['name']}.yaml").exists()
    assert sorted(path.name for path in (out / "vllm").glob("*.yaml")) == sorted(
        f"{name}.yaml" for name, engine in engines.items() if engine == "generic"
    )


def test_fp8_weights_on_a_plain_checkpoint_are_quantized_at_load(tmp_path, run_cli):
    """The example prices Llama 3.3 70B (a bf16 checkpoint) at FP8 weights: vLLM must quantize it at load, or it
    loads 141 GB of bf16 weights and holds far less KV than the price assumes."""
    out = tmp_path / "out"
    code, _, err = run_cli("generate", EXAMPLES / "platform.yaml", "--target", "vllm", "--out", out, "--json")
    assert code == 0, err
    assert yaml.safe_load((out / "vllm" / "shared.yaml").read_text(encoding="utf-8"))["quantization"] == "fp8"
    assert "quantization" in _flags()
    plan = tmp_path / "plan.yaml"
    plan.write_text("model: Llama-3.1-8B-Instruct\ngpu: l4\nweight_dtype: int4\n", encoding="utf-8")
    code, out_json, err = run_cli("generate", plan, "--target", "vllm", "--out", tmp_path / "flat", "--json")
    assert code == 0, err
    (limit,) = [line for line in json.loads(out_json)["limits"]["vllm"] if "priced with int4 weights" in line]
    assert "serve a checkpoint already quantized to int4" in limit


def test_objective_names_never_collide():
    """Tier 'gold' on pool 'x-y' and tier 'gold-x' on pool 'y' would both be 'gold-x-y': one would replace the other
    when applied. Those two get a hash of their pair; every other name stays '<tier>-<pool>'."""
    policy = platform_policy()
    pool = policy.pools[0]
    tier = policy.tiers[0]
    policy = policy.model_copy(
        update={
            "pools": (pool.model_copy(update={"name": "x-y"}), pool.model_copy(update={"name": "y"})),
            "tiers": (tier.model_copy(update={"name": "gold"}), tier.model_copy(update={"name": "gold-x"})),
        }
    )
    names = gie.objective_names(policy)
    assert len(set(names.values())) == 4
    assert names["gold", "y"] == "gold-y" and names["gold-x", "x-y"] == "gold-x-x-y"
    assert names["gold", "x-y"].startswith("gold-x-y-") and names["gold-x", "y"].startswith("gold-x-y-")
    for name in names.values():
        assert re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", name) and len(name) <= 253


def test_a_long_pool_name_gets_a_picker_service_name_kubernetes_takes():
    long_name = "p" * 30 + "-" + "q" * 32  # 63 characters: a legal pool name
    picker = gie.picker_name(long_name)
    assert len(picker) <= 63 and picker.endswith("-epp") and re.fullmatch(r"[a-z]([-a-z0-9]*[a-z0-9])?", picker)
    assert picker != gie.picker_name("p" * 30 + "-" + "r" * 32)
    assert gie.picker_name("shared") == "shared-epp"


def _pools_named(*names: str):
    policy = platform_policy()
    pool = policy.pools[0].model_copy(update={"long_context_pool": None, "route_above_prompt_tokens": None})
    return policy.model_copy(update={"pools": tuple(pool.model_copy(update={"name": name}) for name in names)})


def test_a_picker_never_takes_another_pools_service():
    """Pool a's usual picker 'a-epp' is pool a-epp's own Service (the gateways send a-epp's requests there): a's
    picker moves to '<a>-<hash>-epp' and LIMITS.md says so; the others keep '<pool>-epp'."""
    policy = _pools_named("a", "b-c", "c", "a-epp")
    result = gie.export(policy, {}, ExportOptions(gie_objectives=True))
    manifests = [m for f in result.files for m in yaml.safe_load_all(f.text)]
    for manifest in manifests:
        assert validate_manifest(manifest) == [], manifest["metadata"]["name"]
    pickers = {
        m["metadata"]["name"]: m["spec"]["endpointPickerRef"]["name"] for m in manifests if m["kind"] == "InferencePool"
    }
    assert pickers == {"a": "a-ca978112-epp", "b-c": "b-c-epp", "c": "c-epp", "a-epp": "a-epp-epp"}
    assert pickers == gie.picker_names(policy)
    assert not set(pickers.values()) & set(pickers)  # no picker is a pool's Service
    assert (
        "Pool a's endpoint picker Service is a-ca978112-epp, not the usual a-epp, which is pool a-epp's own Service: "
        "deploy its endpoint picker under a-ca978112-epp."
    ) in result.limits
    assert not any(
        "endpoint picker Service is" in line for line in gie.export(platform_policy(), {}, ExportOptions()).limits
    )


def test_a_moved_picker_whose_hashed_name_is_taken_too_is_hashed_again():
    """A plan naming a pool after a's moved picker as well: a's picker is hashed once more; names stay distinct,
    and every picker is a Service name Kubernetes takes."""
    policy = _pools_named("a", "a-epp", "a-ca978112-epp")
    pickers = gie.picker_names(policy)
    assert pickers["a"] not in ("a-epp", "a-ca978112-epp") and pickers["a"].startswith("a-")
    assert len(set(pickers.values())) == 3 and not set(pickers.values()) & {"a", "a-epp", "a-ca978112-epp"}
    for picker in pickers.values():
        assert len(picker) <= 63 and re.fullmatch(r"[a-z]([-a-z0-9]*[a-z0-9])?", picker)
    for manifest in gie.documents(policy, ExportOptions())["gie/inferencepools.yaml"]:
        assert validate_manifest(manifest) == []


def test_every_target_sends_to_the_pools_service_and_no_picker_takes_it(tmp_path, run_cli):
    """The QA plan: pools a and a-epp. Kong sends to each pool's Service (its name), LiteLLM to each replica through
    it (a StatefulSet's pod <pool>-<i> under the headless Service <pool>); the Inference Extension's pickers are
    other Services."""
    plan = tmp_path / "plan.yaml"
    plan.write_text(
        "deployment: {model: Llama-3.1-8B-Instruct, gpu: h100-sxm, tp: 1}\n"
        "pools:\n  - {name: a, replicas: 1}\n  - {name: a-epp, replicas: 1}\n"
        "tiers:\n  - {name: t, max_context_tokens: 32768, kv_cap_tokens_per_replica: 100000,"
        " max_concurrent_sequences: 16, max_output_tokens: 4096, priority: 0}\n"
        "tenants:\n  - {name: t1, tier: t, pool: a, units_per_s: 1000, cache_isolation: shared}\n"
        "  - {name: t2, tier: t, pool: a-epp, units_per_s: 1000, cache_isolation: shared}\n",
        encoding="utf-8",
    )
    out = tmp_path / "out"
    code, _, err = run_cli("generate", plan, "--out", out, "--target", "gie,kong,litellm")
    assert code == 0, err
    kong = yaml.safe_load((out / "kong" / "kong.yaml").read_text(encoding="utf-8"))
    hosts = {re.match(r"http://([^:/]+):", service["url"]).group(1) for service in kong["services"]}
    litellm = yaml.safe_load((out / "litellm" / "config.yaml").read_text(encoding="utf-8"))
    for deployment in litellm["model_list"]:
        pod, service = re.match(r"http://([^.:/]+)\.([^.:/]+):", deployment["litellm_params"]["api_base"]).groups()
        assert (pod, service) == (deployment["model_info"]["id"], deployment["model_name"])
        hosts.add(service)
    assert hosts == {"a", "a-epp"}
    pools = list(yaml.safe_load_all((out / "gie" / "inferencepools.yaml").read_text(encoding="utf-8")))
    pickers = {pool["spec"]["endpointPickerRef"]["name"] for pool in pools}
    assert len(pickers) == 2 and not pickers & hosts


def test_gie_says_it_generates_no_endpoint_picker_and_what_to_deploy():
    policy = platform_policy()
    result = gie.export(policy, {}, ExportOptions())
    for generated in result.files:
        assert generated.text.startswith(
            "# Generated by quotacalc. No endpoint picker is generated: deploy one per pool"
        )
    from quotacalc.exporters.limits import limit_items

    ((files, (line,)),) = [item for item in limit_items(result, ExportOptions()) if item[0].startswith("**files**")]
    assert files.startswith("**files**: lost. No endpoint picker is generated") and "llm-d's router" in files
    for pool, picker in gie.picker_names(policy).items():
        assert f"{pool}: {picker}" in line
    assert f"port {gie.EPP_PORT}" in line
