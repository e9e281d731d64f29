"""The deployment's parts, one per concern (engine, efficiency, commercial terms, measured pool, quota): together
they are the flat ``Deployment`` whose fields are the flags, the plan's deployment keys and the JSON Schema."""

from __future__ import annotations

from quotacalc.core.deployment import (
    DEPLOYMENT_PARTS,
    CommercialConfig,
    Deployment,
    EfficiencyConfig,
    EngineConfig,
    MeasuredPoolConfig,
    QuotaConfig,
)


def test_every_field_is_in_one_part_and_the_deployment_keeps_their_order():
    fields = [name for part in DEPLOYMENT_PARTS for name in part.model_fields]
    assert len(fields) == len(set(fields))
    assert list(Deployment.model_fields) == fields
    # A field keeps its declaration (default, description, bounds) in the deployment.
    for part in DEPLOYMENT_PARTS:
        for name, field in part.model_fields.items():
            assert Deployment.model_fields[name].default == field.default
            assert Deployment.model_fields[name].description == field.description


def test_each_concern_holds_its_own_fields():
    assert {"model", "gpu", "tp", "batch", "context", "max_num_seqs", "engine"} <= set(EngineConfig.model_fields)
    assert {"mfu", "mbu", "step_overhead_s", "sequence_overhead_s"} <= set(EfficiencyConfig.model_fields)
    assert {"ceiling", "gpu_hour_usd", "hours_per_month", "pricing_basis"} <= set(CommercialConfig.model_fields)
    assert set(MeasuredPoolConfig.model_fields) == {"kv_pool_tokens", "kv_pool_measured_with"}
    assert set(QuotaConfig.model_fields) == {"cached_prompt_weight", "burst_s"}


def test_a_deployment_gives_each_part():
    deployment = Deployment(model="meta-llama/Llama-3.3-70B-Instruct", gpu="h100-sxm", tp=4, mfu=0.42, burst_s=30)
    efficiency = deployment.part(EfficiencyConfig)
    assert isinstance(efficiency, EfficiencyConfig) and efficiency.mfu == 0.42 and efficiency.mbu == 0.75
    assert deployment.part(QuotaConfig) == QuotaConfig(cached_prompt_weight=0.1, burst_s=30.0)
    assert deployment.part(EngineConfig).tp == 4


def test_the_flags_the_plan_keys_and_the_schema_come_from_the_parts_fields():
    from quotacalc.cli.options import option_parameters
    from quotacalc.inputs.plan import plan_json_schema

    fields = {name for part in DEPLOYMENT_PARTS for name in part.model_fields}
    defs = plan_json_schema()["$defs"]
    # A flat plan's keys: every part's; a platform plan's deployment: all but the quota part's, which are a tier's.
    assert fields <= set(defs["FlatPlanFile"]["properties"])
    assert set(defs["DeploymentKeys"]["properties"]) == fields - set(QuotaConfig.model_fields)
    # The flags: one per field; the measured pool's provenance is a mapping, which only a plan file gives.
    flags = {parameter.name for parameter in option_parameters(Deployment, panel="Deployment")}
    assert flags == fields - {"kv_pool_measured_with"}
