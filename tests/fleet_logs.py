"""Small usage logs for the fleet tests, each in its real layout, and the plan they are priced on.

- quotacalc usage records: one JSON object per line (docs/fleet.md).
- LiteLLM's ``LiteLLM_SpendLogs``: the columns of ``model LiteLLM_SpendLogs`` in litellm/proxy/schema.prisma, in its
  order, as a Postgres CSV export writes them; cached tokens in ``metadata.usage_object.prompt_tokens_details``
  (litellm/proxy/spend_tracking/spend_tracking_utils.py), max_tokens in ``proxy_server_request`` (the body).
- Envoy AI Gateway: a JSON access log whose format maps %START_TIME%, %DURATION%, the tenant header and the
  ``io.envoy.ai_gateway`` token metadata (llm_input_token, llm_output_token) to keys.
"""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path

from pytest import approx as _approx

#: 2026-10-01T00:00:00Z: a whole number of hours since the epoch, so windows of 1, 10 and 60 s start on it.
T0 = datetime(2026, 10, 1, tzinfo=timezone.utc)

PLAN = """\
# The fleet tests' plan: one pool, three tenants on contracts (d is sold and silent in the logs).
deployment:
  model: meta-llama/Llama-3.3-70B-Instruct
  gpu: h100-sxm
  tp: 4
  weight_dtype: fp8
  kv_dtype: bf16
pools:
  - name: shared   # the pool measured
    replicas: 4
    deployment: {batch: 128, context: 1700}
tiers:
  - name: pro
    max_context_tokens: 32768
    kv_cap_tokens_per_replica: 131072
    max_concurrent_sequences: 32
    max_output_tokens: 4096
    priority: 1
    burst_s: 60
    cached_prompt_weight: 0.1
tenants:
  - name: a
    tier: pro
    units_per_s: 100
  - name: b
    tier: pro
    units_per_s: 5000
  - name: d
    tier: pro
    units_per_s: 10
"""

#: The litellm/proxy/schema.prisma columns of LiteLLM_SpendLogs, in order, with their Postgres types (Prisma:
#: String -> text, Int -> integer, Float -> double precision, DateTime -> timestamp(3), Json -> jsonb).
LITELLM_COLUMNS: tuple[tuple[str, str], ...] = (
    ("request_id", "text NOT NULL PRIMARY KEY"),
    ("call_type", "text NOT NULL"),
    ("api_key", "text NOT NULL DEFAULT ''"),
    ("spend", "double precision NOT NULL DEFAULT 0.0"),
    ("total_tokens", "integer NOT NULL DEFAULT 0"),
    ("prompt_tokens", "integer NOT NULL DEFAULT 0"),
    ("completion_tokens", "integer NOT NULL DEFAULT 0"),
    ("startTime", "timestamp(3) NOT NULL"),
    ("endTime", "timestamp(3) NOT NULL"),
    ("request_duration_ms", "integer"),
    ("completionStartTime", "timestamp(3)"),
    ("model", "text NOT NULL DEFAULT ''"),
    ("model_id", "text DEFAULT ''"),
    ("model_group", "text DEFAULT ''"),
    ("custom_llm_provider", "text DEFAULT ''"),
    ("api_base", "text DEFAULT ''"),
    ("user", "text DEFAULT ''"),
    ("metadata", "jsonb DEFAULT '{}'"),
    ("cache_hit", "text DEFAULT ''"),
    ("cache_key", "text DEFAULT ''"),
    ("request_tags", "jsonb DEFAULT '[]'"),
    ("team_id", "text"),
    ("organization_id", "text"),
    ("end_user", "text"),
    ("requester_ip_address", "text"),
    ("messages", "jsonb DEFAULT '{}'"),
    ("response", "jsonb DEFAULT '{}'"),
    ("session_id", "text"),
    ("status", "text"),
    ("mcp_namespaced_tool_name", "text"),
    ("billing_agent_id", "text"),
    ("agent_id", "text"),
    ("proxy_server_request", "jsonb DEFAULT '{}'"),
    ("litellm_call_id", "text"),
    ("created_at", "timestamp(3) NOT NULL DEFAULT CURRENT_TIMESTAMP"),
    ("updated_at", "timestamp(3) NOT NULL DEFAULT CURRENT_TIMESTAMP"),
)


@dataclass(frozen=True)
class Request:
    request_id: str
    tenant: str | None
    start_s: float  # seconds after T0
    end_s: float
    prompt: int = 1000
    cached: int = 0
    output: int = 100
    max_tokens: int | None = None
    #: LiteLLM answered from its response cache (its spend-log row says cache_hit "True"); other formats ignore it.
    cache_hit: bool = False


def golden_requests() -> list[Request]:
    """Tenants whose peaks fall in different windows (docs in tests/test_fleet.py derive the figures)."""
    return [
        Request("r1", "a", 0.0, 10.0),
        Request("r2", "a", 20.0, 21.0, max_tokens=400),
        Request("r3", "b", 5.0, 15.0, max_tokens=1000),
    ]


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def rfc3339(seconds: float) -> str:
    return at(seconds).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def postgres_text(seconds: float) -> str:
    """A timestamp(3) as psql's COPY ... CSV writes it (UTC, no zone)."""
    return at(seconds).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]


def quotacalc_record(request: Request, units_debited: float = 0.0) -> dict:
    record = {
        "request_id": request.request_id,
        "tenant": request.tenant,
        "pool": "shared",
        "model": "meta-llama/Llama-3.3-70B-Instruct",
        "start": rfc3339(request.start_s),
        "first_token": rfc3339(request.start_s + min(0.5, (request.end_s - request.start_s) / 2)),
        "end": rfc3339(request.end_s),
        "prompt_tokens": request.prompt,
        "cached_tokens": request.cached,
        "output_tokens": request.output,
        "units_reserved": units_debited,
        "units_debited": units_debited,
        "units_released": 0.0,
        "outcome": "completed",
    }
    if request.max_tokens is not None:
        record["max_tokens"] = request.max_tokens
    return record


def write_quotacalc(path: Path, requests: list[Request], extra_lines: list[str] = ()) -> Path:
    lines = [json.dumps(quotacalc_record(r)) for r in requests] + list(extra_lines)
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def litellm_row(request: Request) -> dict[str, object]:
    """One LiteLLM_SpendLogs row as Python values (timestamps as datetimes, JSON as text)."""
    usage = {
        "prompt_tokens": request.prompt,
        "completion_tokens": request.output,
        "total_tokens": request.prompt + request.output,
        "prompt_tokens_details": {"cached_tokens": request.cached},
    }
    body = {"model": "llama", "messages": []}
    if request.max_tokens is not None:
        body["max_tokens"] = request.max_tokens
    values: dict[str, object] = {
        "request_id": request.request_id,
        "call_type": "acompletion",
        "api_key": "88dc28d0f030c55ed4ab77ed8faf098196cb1c05df778539800c9f1243fe6b4b",
        "spend": 0.0012,
        "total_tokens": request.prompt + request.output,
        "prompt_tokens": request.prompt,
        "completion_tokens": request.output,
        "startTime": at(request.start_s).replace(tzinfo=None),
        "endTime": at(request.end_s).replace(tzinfo=None),
        "request_duration_ms": round((request.end_s - request.start_s) * 1000),
        "completionStartTime": at(request.start_s + min(0.5, (request.end_s - request.start_s) / 2)).replace(
            tzinfo=None
        ),
        "model": "hosted_vllm/meta-llama/Llama-3.3-70B-Instruct",
        "model_id": "d1",
        "model_group": "llama",
        "custom_llm_provider": "hosted_vllm",
        "api_base": "http://127.0.0.1:8000/v1",
        "user": "",
        "metadata": json.dumps({"user_api_key_team_id": request.tenant, "usage_object": usage, "status": "success"}),
        "cache_hit": str(request.cache_hit),
        "cache_key": "Cache OFF",
        "request_tags": "[]",
        "team_id": request.tenant,
        "organization_id": None,
        "end_user": "",
        "requester_ip_address": "",
        "messages": "{}",
        "response": "{}",
        "session_id": None,
        "status": "success",
        "mcp_namespaced_tool_name": None,
        "billing_agent_id": None,
        "agent_id": None,
        "proxy_server_request": json.dumps(body),
        "litellm_call_id": request.request_id,
        "created_at": at(request.end_s).replace(tzinfo=None),
        "updated_at": at(request.end_s).replace(tzinfo=None),
    }
    return values


def write_litellm_csv(path: Path, requests: list[Request]) -> Path:
    """A ``COPY "LiteLLM_SpendLogs" TO ... CSV HEADER`` export: NULL as an empty field, timestamps without zone."""
    with path.open("w", encoding="utf-8", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow([name for name, _ in LITELLM_COLUMNS])
        for request in requests:
            row = litellm_row(request)
            cells = []
            for name, _ in LITELLM_COLUMNS:
                value = row[name]
                if isinstance(value, datetime):
                    value = value.strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]
                cells.append("" if value is None else value)
            writer.writerow(cells)
    return path


def envoy_record(request: Request, tenant_header: str = "x-tenant-id") -> dict:
    """A line of an Envoy JSON access log whose format has %START_TIME%, %DURATION% (ms), %REQ(x-tenant-id)% and
    %DYNAMIC_METADATA(io.envoy.ai_gateway:llm_input_token)% / llm_output_token under keys of the same names."""
    return {
        "start_time": rfc3339(request.start_s),
        "duration": round((request.end_s - request.start_s) * 1000),
        "x-request-id": request.request_id,
        tenant_header: request.tenant,
        "method": "POST",
        "path": "/v1/chat/completions",
        "response_code": 200,
        "llm_input_token": request.prompt,
        "llm_output_token": request.output,
        "llm_total_token": request.prompt + request.output,
    }


def figures(document: dict) -> dict:
    """The measured figures, without where they were measured."""
    keep = ("rows_read", "rows_used", "rows_rejected", "period_start", "period_end", "windows", "tenants")
    return {key: document[key] for key in keep}


def assert_same(left, right) -> None:
    """Equal, floats to 1e-9 relative (each engine sums in its own order)."""
    if isinstance(left, dict):
        assert left.keys() == right.keys()
        for key in left:
            assert_same(left[key], right[key])
    elif isinstance(left, list):
        assert len(left) == len(right)
        for a, b in zip(left, right, strict=True):
            assert_same(a, b)
    elif isinstance(left, float) or isinstance(right, float):
        assert left == _approx(right, rel=1e-9, abs=1e-9)
    else:
        assert left == right
