"""The llm-d target against llm-d's router as published (tests/data/llm-d/SOURCES.md): InferenceObjectives against
its CRD, the EndpointPickerConfig against its Go types and its loader's rules, and the gateway's header settings
against the headers the picker reads, including a client's spoofed ones."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
import yaml
from crd_validation import validate_manifest
from policy_samples import platform_policy

from quotacalc.exporters import llm_d
from quotacalc.exporters.base import ExportOptions

DATA = Path(__file__).parent / "data" / "llm-d"
SCHEMA = json.loads((DATA / "endpointpickerconfig.schema.json").read_text(encoding="utf-8"))
REGISTERED = json.loads((DATA / "registered.json").read_text(encoding="utf-8"))
EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def _files(policy=None) -> dict[str, list[dict]]:
    result = llm_d.export(policy or platform_policy(), {}, ExportOptions())
    return {file.path: [doc for doc in yaml.safe_load_all(file.text) if doc is not None] for file in result.files}


def test_the_files_written():
    assert list(_files()) == [
        "llm-d/inferenceobjectives.yaml",
        "llm-d/endpointpickerconfig.yaml",
        "llm-d/gateway-headers.yaml",
    ]


def test_objectives_pass_llm_ds_crd():
    objectives = _files()["llm-d/inferenceobjectives.yaml"]
    policy = platform_policy()
    assert len(objectives) == len(policy.tiers) * len(policy.pools)
    for manifest in objectives:
        assert manifest["apiVersion"] == "llm-d.ai/v1alpha2"
        assert validate_manifest(manifest) == [], manifest["metadata"]["name"]


def test_the_crd_refuses_what_it_should():
    """The CRD copy is llm-d's own: a priority beyond int32 and a missing poolRef are refused."""
    (manifest, *_) = _files()["llm-d/inferenceobjectives.yaml"]
    assert validate_manifest({**manifest, "spec": {"priority": 2**31, "poolRef": {"name": "x"}}})
    assert validate_manifest({**manifest, "spec": {"priority": 1}})


def test_priority_is_the_reverse_of_the_policys():
    """llm-d serves a higher priority first; the policy (and vLLM) a lower one: every pair of tiers keeps its order
    reversed, and tiers of one policy priority share one llm-d priority."""
    policy = platform_policy()
    by_name = {tier.name: tier.priority for tier in policy.tiers}
    objectives = _files(policy)["llm-d/inferenceobjectives.yaml"]
    llm_d_priority = {}
    for manifest in objectives:
        tier = next(name for name in by_name if manifest["metadata"]["name"].startswith(name + "-"))
        llm_d_priority.setdefault(tier, set()).add(manifest["spec"]["priority"])
    assert all(len(values) == 1 for values in llm_d_priority.values())  # the same on every pool
    ranks = {tier: values.pop() for tier, values in llm_d_priority.items()}
    for a in by_name:
        for b in by_name:
            if by_name[a] < by_name[b]:
                assert ranks[a] > ranks[b], (a, b)
            elif by_name[a] == by_name[b]:
                assert ranks[a] == ranks[b]
    assert min(ranks.values()) == 0  # no tier is sheddable (negative) in llm-d


def _loader_problems(config: dict) -> list[str]:
    """What llm-d's loader refuses beyond the schema: a feature gate it does not register, a plugin type it does not
    register, a reference to a plugin not instantiated (a plugin's name is its type where no name is given)."""
    problems = []
    for gate in config.get("featureGates", []):
        if gate.split("=")[0] not in REGISTERED["feature_gates"]:
            problems.append(f"unregistered feature gate {gate}")
    names = {plugin.get("name") or plugin["type"]: plugin["type"] for plugin in config["plugins"]}
    problems += [
        f"unregistered plugin type {kind}" for kind in names.values() if kind not in REGISTERED["plugin_types"]
    ]
    flow = config.get("flowControl", {})
    bands = [*flow.get("priorityBands", []), *(band for key in ("defaultPriorityBand",) if (band := flow.get(key)))]
    for band in bands:
        ref = band.get("fairnessPolicyRef")
        if ref is not None and ref not in names:
            problems.append(f"fairness policy {ref} is not instantiated in plugins")
        if ref is not None and names.get(ref) not in REGISTERED["fairness_policies"]:
            problems.append(f"{ref} is not a fairness policy")
    for profile in config["schedulingProfiles"]:
        problems += [
            f"profile plugin {p['pluginRef']} not in plugins" for p in profile["plugins"] if p["pluginRef"] not in names
        ]
    return problems


def test_picker_config_passes_llm_ds_types_and_loader():
    (config,) = _files()["llm-d/endpointpickerconfig.yaml"]
    jsonschema.Draft7Validator(SCHEMA).validate(config)
    assert _loader_problems(config) == []
    assert "flowControl" in config["featureGates"]


def test_the_checks_on_the_picker_config_can_fail():
    (config,) = _files()["llm-d/endpointpickerconfig.yaml"]
    typo = json.loads(json.dumps(config))
    typo["flowControl"]["priorityBands"][0]["fairnessPolicy"] = "round-robin-fairness-policy"
    assert list(jsonschema.Draft7Validator(SCHEMA).iter_errors(typo))  # strict decoding: an unknown field
    missing = json.loads(json.dumps(config))
    missing["plugins"] = [p for p in missing["plugins"] if p["type"] != "round-robin-fairness-policy"]
    assert "fairness policy round-robin-fairness-policy is not instantiated in plugins" in _loader_problems(missing)
    assert _loader_problems({**config, "featureGates": ["flowcontrol"]}) == ["unregistered feature gate flowcontrol"]


def test_a_band_per_tier_priority_with_per_tenant_fairness():
    policy = platform_policy()
    files = _files(policy)
    (config,) = files["llm-d/endpointpickerconfig.yaml"]
    bands = config["flowControl"]["priorityBands"]
    objective_priorities = {m["spec"]["priority"] for m in files["llm-d/inferenceobjectives.yaml"]}
    assert [band["priority"] for band in bands] == sorted(objective_priorities, reverse=True)
    assert len(bands) == len({tier.priority for tier in policy.tiers})
    assert all(band["fairnessPolicyRef"] == "round-robin-fairness-policy" for band in bands)
    assert config["flowControl"]["defaultPriorityBand"]["fairnessPolicyRef"] == "round-robin-fairness-policy"


def test_tiers_of_one_priority_share_a_band():
    policy = platform_policy()
    twin = policy.tiers[0].model_copy(update={"name": "twin"})
    policy = policy.model_copy(update={"tiers": (*policy.tiers, twin)})
    (config,) = _files(policy)["llm-d/endpointpickerconfig.yaml"]
    assert len(config["flowControl"]["priorityBands"]) == len({tier.priority for tier in policy.tiers})


def _picker_reads(headers: dict[str, str], key: str) -> str | None:
    """The picker's header lookup (GetLowerCaseHeaderValue in pkg/epp/metadata/consts.go): the current name, else
    its deprecated alias."""
    names = REGISTERED["headers"]
    for name in (names[key], names[key + "_deprecated"]):
        if name in headers:
            return headers[name]
    return None


def _through_gateway(settings: dict, client_headers: dict[str, str], pool: str) -> dict[str, str]:
    """What the gateway's settings make of a client's headers: remove, then set for the tenant it authenticated."""
    headers = {k: v for k, v in client_headers.items() if k not in settings["removeFromClient"]}
    tenant = next(t for t in settings["tenants"] if t["tenant"] == headers[settings["tenantHeader"]])
    (chosen,) = [entry for entry in tenant["pools"] if entry["pool"] == pool]
    return {**headers, **chosen["set"]}


def test_a_spoofed_objective_or_fairness_id_does_not_pass_the_gateway():
    policy = platform_policy()
    files = _files(policy)
    (settings,) = files["llm-d/gateway-headers.yaml"]
    objectives = {m["metadata"]["name"]: m for m in files["llm-d/inferenceobjectives.yaml"]}
    tiers = {tier.name: tier.priority for tier in policy.tiers}
    least = max(policy.tiers, key=lambda tier: tier.priority)
    most = min(policy.tiers, key=lambda tier: tier.priority)
    low_tenant = next(t for t in policy.tenants if t.tier == least.name)
    top_objective = next(
        name
        for name, m in objectives.items()
        if name.startswith(most.name + "-") and m["spec"]["poolRef"]["name"] == low_tenant.pool
    )
    spoofed = {
        settings["tenantHeader"]: low_tenant.name,
        "x-llm-d-inference-objective": top_objective,
        "x-gateway-inference-objective": top_objective,
        "x-gateway-inference-fairness-id": "someone-else",
    }
    seen = _through_gateway(settings, spoofed, low_tenant.pool)
    objective = objectives[_picker_reads(seen, "objective")]
    assert objective["spec"]["poolRef"]["name"] == low_tenant.pool
    assert objective["spec"]["priority"] == llm_d.objective_priority(policy, tiers[low_tenant.tier])
    assert _picker_reads(seen, "fairness_id") == low_tenant.name
    # Every name the picker reads for either is removed from the client's request.
    assert set(REGISTERED["headers"].values()) - {REGISTERED["headers"]["$comment"]} <= set(
        settings["removeFromClient"]
    )


def test_every_tenant_and_pool_it_may_reach_gets_its_own_objective():
    policy = platform_policy()
    files = _files(policy)
    (settings,) = files["llm-d/gateway-headers.yaml"]
    objectives = {m["metadata"]["name"]: m for m in files["llm-d/inferenceobjectives.yaml"]}
    tiers = {tier.name: tier.priority for tier in policy.tiers}
    assert settings["tenantHeader"] == policy.tenant_header
    assert [t["tenant"] for t in settings["tenants"]] == sorted(t.name for t in policy.tenants)
    for tenant in policy.tenants:
        (entry,) = [t for t in settings["tenants"] if t["tenant"] == tenant.name]
        reachable = {tenant.pool} | ({tenant.long_context_pool} if tenant.long_context_pool else set())
        assert {pool["pool"] for pool in entry["pools"]} == reachable
        for pool in entry["pools"]:
            objective = objectives[pool["set"]["x-llm-d-inference-objective"]]
            assert objective["spec"]["poolRef"]["name"] == pool["pool"]
            assert (
                objective["spec"]["priority"]
                == entry["priority"]
                == llm_d.objective_priority(policy, tiers[tenant.tier])
            )
            assert pool["set"]["x-llm-d-inference-fairness-id"] == tenant.name


@pytest.mark.parametrize(
    "said",
    [
        "**weights**: lost. None: round-robin-fairness-policy gives each tenant",
        "**rate**: lost. Token quotas: none.",
        "**fairness**: approximated. Round robin between a tier's tenants, by turns, not units, and only per "
        "endpoint-picker replica",
    ],
)
def test_limits_say_what_llm_d_cannot_do(said: str):
    from quotacalc.exporters.limits import limit_lines

    lines = limit_lines(llm_d.export(platform_policy(), {}, ExportOptions()), ExportOptions())
    assert any(line.startswith(said) for line in lines)


def test_generate_writes_the_target_by_its_declaration(run_cli, tmp_path: Path):
    code, out, _ = run_cli("generate", EXAMPLES / "platform.yaml", "--out", tmp_path, "--target", "llm-d", "--json")
    assert code == 0
    assert json.loads(out)["targets"] == ["llm-d"]
    assert sorted(path.name for path in (tmp_path / "llm-d").iterdir()) == [
        "LIMITS.md",
        "endpointpickerconfig.yaml",
        "gateway-headers.yaml",
        "inferenceobjectives.yaml",
    ]
    limits = (tmp_path / "llm-d/LIMITS.md").read_text(encoding="utf-8")
    assert "- **weights**: lost. None:" in limits and "- **rate**: lost. Token quotas: none." in limits
