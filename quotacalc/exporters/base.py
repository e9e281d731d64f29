"""What every exporter returns: the files it renders and what its target cannot express.

An exporter is a pure function ``export(policy, salts, options) -> Export``: no I/O, no clock, stable key
order, so the same policy and salts give byte-identical files. Writing them (atomically, with a
manifest, or as a ``--check`` diff) is ``quotacalc.exporters.writer``'s job.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field

from quotacalc.core.policy import QuotaPolicy


class GeneratedFile(BaseModel):
    """One file to write, relative to the output directory."""

    model_config = ConfigDict(frozen=True)

    path: str = Field(description="relative path, '/'-separated, under the output directory")
    text: str
    secret: bool = Field(False, description="holds salts: written owner-only (0600)")


class Export(BaseModel):
    """A target's files and the parts of the policy it cannot express (never dropped silently)."""

    model_config = ConfigDict(frozen=True)

    target: str
    files: tuple[GeneratedFile, ...]
    limits: tuple[str, ...] = Field((), description="what the target loses from the policy, one line each")


class ExportOptions(BaseModel):
    """Choices a user makes per run."""

    model_config = ConfigDict(frozen=True)

    gie_objectives: bool = Field(
        False, description="emit an InferenceObjective (v1alpha2) per tier, for releases that still ship it"
    )
    kong_edition: Literal["enterprise", "oss"] = Field(
        "enterprise",
        description="Kong Gateway Enterprise (ai-rate-limiting-advanced limits units) or Kong OSS (no token limiter: "
        "rate-limiting counts requests)",
    )


class Exporter(Protocol):
    """The interface of a target module: each defines ``export`` with this signature."""

    def __call__(self, policy: QuotaPolicy, salts: Mapping[str, str], options: ExportOptions) -> Export: ...


#: Target name -> module defining ``export``; imported only when the target is generated.
#: The port every engine file serves on and every gateway file sends to (vLLM's default; SGLang's own is 30000,
#: so its files say this one).
ENGINE_PORT = 8000

TARGET_MODULES = {
    "canonical": "quotacalc.exporters.canonical",
    "envoy": "quotacalc.exporters.envoy",
    "kong": "quotacalc.exporters.kong",
    "litellm": "quotacalc.exporters.litellm",
    "vllm": "quotacalc.exporters.vllm",
    "sglang": "quotacalc.exporters.sglang",
    "gie": "quotacalc.exporters.gie",
}

#: Targets whose files carry the tenants' cache salts, so generating them needs the salt secret.
#: vLLM and the Inference Extension take the salt from the request; LiteLLM cannot inject one.
SALTED_TARGETS = frozenset({"canonical", "envoy", "kong"})
