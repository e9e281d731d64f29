"""The enforcement point's settings file (``enforce.json``, written by ``quotacalc generate --target litellm``)
and the policy and salts it names, read with errors that name the file, the field and the fix."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from quotacalc.admission.policies import POLICY_NAMES, AdmissionPolicy, make_policy
from quotacalc.core.policy import QuotaPolicy
from quotacalc.errors import QuotacalcError

#: The environment variable that names the settings file, where the generated module's default does not suit.
SETTINGS_ENV = "QUOTACALC_ENFORCE_SETTINGS"
#: Seconds a Redis call (connect or reply) may take before it fails and ``redis_failure`` applies: a loopback or LAN
#: round trip takes well under a millisecond, so a second is an outage, not a slow reply.
REDIS_TIMEOUT_S = 1.0


class EnforceSettings(BaseModel):
    """Everything the plugin is told; paths are relative to the settings file."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    policy: str = Field("../canonical/policy.json", description="the canonical policy (quotacalc generate)")
    salts: str | None = Field("../canonical/salts.json", description="the salts file; None: no tenant is salted")
    admission_policy: str = Field("incremental_lease", description="one of quotacalc's admission policies")
    lease_tokens: int = Field(128, ge=1, description="output tokens per lease (incremental_lease)")
    tenant_from: Literal["key", "header"] = Field(
        "key",
        description="key: the authenticated LiteLLM key's team (team_alias, else team_id) or its metadata.tenant; "
        "header: the policy's tenant_header, which a trusted layer in front sets",
    )
    prompt_tokens: Literal["litellm", "bytes4"] = Field(
        "litellm",
        description="how a prompt's tokens are counted at admission: litellm.token_counter (its default tokenizer), or "
        "UTF-8 bytes / 4 over the chat template (quotacalc emulate's rule); usage settles the real count",
    )
    tokenizer: Literal["local", "tiktoken"] = Field(
        "local",
        description="the tokenizer LiteLLM counts with where it counts (prompt_tokens: litellm; a stream that ended "
        "without usage): local: a Hugging Face tokenizer only from the host's cache (HF_HUB_OFFLINE), else tiktoken; "
        "tiktoken: always (disable_hf_tokenizer_download); never a download while the proxy serves",
    )
    state: Literal["memory", "redis"] = Field("memory", description="where bucket levels and leases live")
    redis_url_env: str = Field("QUOTACALC_REDIS_URL", description="environment variable holding the Redis URL")
    redis_failure: Literal["closed", "open"] = Field(
        "closed", description="Redis down: refuse (503) or admit unmetered; logged and counted either way"
    )
    redis_timeout_s: float = Field(
        REDIS_TIMEOUT_S, gt=0, description="longest wait for a Redis connection or reply before redis_failure applies"
    )
    records: str | None = Field("usage.jsonl", description="JSONL usage records, one a request; None: none")
    journal: bool = Field(
        True,
        description="a write-ahead journal beside the records (RECORDS.journal): a proxy killed (SIGKILL) has the "
        "records of its requests in flight written, and their settlements sent, at the next start of a proxy there",
    )
    inflight_per_replica: int | None = Field(
        None, ge=1, description="sequences in flight per replica before the fair queue (None: max_num_seqs)"
    )
    queue_wait_max_s: float = Field(30.0, gt=0, description="longest wait in the fair queue before a 429")
    lease_ttl_s: float = Field(120.0, gt=0, description="a lease's life without a token or renewal")
    replica_deployments: dict[str, list[str]] = Field(
        default_factory=dict,
        description="pool -> the model_info.id of each of its replicas' deployments in config.yaml, one a replica: "
        "the plugin sends each request to the replica it placed it on, so the resident-KV cap holds on each replica; "
        "generate --target litellm names every pool's; a pool not named is one deployment (a Service in front of its "
        "replicas, --litellm-deployments pool) and the engines' balancer places it",
    )

    def admission(self) -> AdmissionPolicy:
        return make_policy(self.admission_policy, {"lease_tokens": self.lease_tokens})


def _fail(path: Path, field: str, message: str, fix: str) -> QuotacalcError:
    return QuotacalcError(message, source=str(path), field=field or None, fix=fix)


def read_settings(path: Path) -> EnforceSettings:
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except OSError as error:
        raise _fail(path, "", f"cannot read the settings: {error.strerror}", "run quotacalc generate") from None
    except ValueError as error:
        raise _fail(path, "", f"not JSON: {error}", "regenerate it with quotacalc generate") from None
    try:
        settings = EnforceSettings.model_validate(document)
    except ValidationError as error:
        first = error.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        raise _fail(path, where, first["msg"], "see docs/enforce.md for the settings") from None
    if settings.admission_policy not in POLICY_NAMES:
        raise _fail(
            path,
            "admission_policy",
            f"unknown admission policy {settings.admission_policy!r}",
            f"name one of {', '.join(POLICY_NAMES)}",
        )
    return settings


def read_policy(settings: EnforceSettings, base: Path) -> tuple[QuotaPolicy, dict[str, str]]:
    """The canonical policy and its salts; a salted tenant without its salt is an error, never unsalted."""
    path = (base / settings.policy).resolve()
    try:
        policy = QuotaPolicy.model_validate_json(path.read_text(encoding="utf-8"))
    except OSError as error:
        raise _fail(
            path, "", f"cannot read the policy: {error.strerror}", "quotacalc generate PLAN --target litellm,canonical"
        ) from None
    except ValidationError as error:
        first = error.errors()[0]
        raise _fail(
            path, ".".join(str(p) for p in first["loc"]), first["msg"], "regenerate it with quotacalc generate"
        ) from None
    salts: dict[str, str] = {}
    if settings.salts is not None:
        salts_path = (base / settings.salts).resolve()
        if salts_path.exists():
            try:
                salts = json.loads(salts_path.read_text(encoding="utf-8"))
            except ValueError as error:
                raise _fail(salts_path, "", f"not JSON: {error}", "regenerate it with quotacalc generate") from None
    for tenant in policy.tenants:
        if tenant.salt_ref is not None and not salts.get(tenant.salt_ref):
            raise _fail(
                base / (settings.salts or "salts.json"),
                tenant.salt_ref,
                f"tenant {tenant.name} is salted but the salts file has no salt for it",
                "generate the canonical target with the salt secret (QUOTACALC_SALT_SECRET)",
            )
    return policy, salts


def check_replicas(settings: EnforceSettings, policy: QuotaPolicy, path: Path) -> None:
    """Each pool ``replica_deployments`` names is in the policy, with one distinct deployment id a replica."""
    pools = {pool.name: pool for pool in policy.pools}
    for name, ids in settings.replica_deployments.items():
        field = f"replica_deployments.{name}"
        if name not in pools:
            raise _fail(path, field, f"no pool '{name}' in the policy", f"name one of {', '.join(pools)}")
        replicas = pools[name].replicas
        if len(ids) != replicas or len(set(ids)) != len(ids):
            raise _fail(
                path,
                field,
                f"{len(ids)} deployment ids ({len(set(ids))} distinct) for pool '{name}' of {replicas} replicas",
                f"list the model_info.id of each of its {replicas} replicas' deployments once",
            )
