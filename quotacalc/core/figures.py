"""Every figure ``price``, ``size`` and ``kv`` report, declared once: its JSON key, unit, table row, meaning and,
for a figure derived from others, its formula.

Each command's ``--json`` ``results`` keys (``cli/json_out.py``), the rows of its table (``cli/tables.py``), the
table of docs/figures.md (*What every figure means*, ``figures_markdown``) and the explain step of every derived
figure are built from ``FIGURES`` below.

A declaration is plain data with small pure functions: a table row is given the result and the renderer of the
presentation layer (``cli/units.py``), never formats a number itself. ``PriceResult`` (``core/price.py``),
``SizeResult`` (``core/traffic.py``) and ``RequestKvResult`` (``core/kv.py``) hold a field per declared figure of
their command; tests hold each to its declarations.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from quotacalc.core.explain import fmt

SECONDS_PER_HOUR = 3600

Command = Literal["price", "size", "kv"]


class Render(Protocol):
    """What a table row may call to write a number: ``cli/units.py`` is one."""

    def seconds(self, value: float) -> str: ...

    def data_bytes(self, value: float) -> str: ...

    def usd(self, value: float, digits: int = 3) -> str: ...

    def count(self, value: float) -> str: ...

    def number(self, value: float, digits: int = 3) -> str: ...

    def binary_bytes(self, value: float) -> str: ...


#: A cell of a row, from the command's result (``PriceResult``, ``SizeResult``, ``RequestKvResult``) and the renderer.
Cell = Callable[[Any, Render], str]


@dataclass(frozen=True)
class Row:
    """A figure's row in its command's table: the quantity, the value, how it was reached, and when it shows."""

    label: Cell
    value: Cell
    how: Cell
    shown: Callable[[Any], bool] = lambda result: True


@dataclass(frozen=True)
class Derived:
    """A figure computed from figures before it (or the deployment's inputs), with its explain step.

    ``formula`` names each of ``inputs``; ``compute`` takes their values in that order. An input is a recorded
    figure or a field of the deployment (``tp``, ``gpu_hour_usd``, ...).
    """

    formula: str
    inputs: tuple[str, ...]
    compute: Callable[..., float]


@dataclass(frozen=True)
class Figure:
    """One figure. ``key``: its JSON key (and its result's field, and explain step), unit in the name; unique within
    its ``command`` (``size`` and ``kv`` both report a ``request_kv_bytes``).

    ``meaning``: its row of docs/figures.md; None where it shares the row of the figure named in ``doc_with``.
    ``unit``: the unit of its explain step (``cli/units.render``'s), "" for a ratio or a name.
    """

    key: str
    unit: str
    meaning: str | None
    command: Command = "price"
    doc_with: str | None = None
    row: Row | None = None
    derived: Derived | None = None


def _text(text: str) -> Cell:
    return lambda result, render: text


def _context(result: Any) -> int:
    return result.inputs.deployment.context


def _engine_basis(result: Any) -> bool:
    return result.pricing_basis == "engine"


def _unit_token(result: Any) -> str:
    """What one unit is: the prompt token of the basis the prices follow (core/price.py's _price_section)."""
    return "engine prompt token" if _engine_basis(result) else "prompt token"


def _weights_how(result: Any, render: Render) -> str:
    tp = result.inputs.deployment.tp
    split = f"{render.data_bytes(result.weight_bytes)} / TP {tp}"
    # Layers the engine keeps whole on every rank, and MXFP4 padding (--explain: weight_bytes_per_gpu).
    engine_extra_bytes = result.weight_bytes_per_gpu - result.weight_bytes / tp
    if engine_extra_bytes > 0.5:
        split += f" + {render.data_bytes(engine_extra_bytes)} engine"
    return split


def _pool_how(result: Any, render: Render) -> str:
    how = result.kv_pool_source
    if how == "estimated":
        # Which share of memory the estimate rests on: the engine's default (vLLM 0.9, SGLang's rule) or given.
        how += f" at {result.memory_utilization:g} of memory"
    return how


def _dedicated_how(result: Any, render: Render) -> str:
    d = result.inputs.deployment
    return f"{d.tp} GPU{'s' if d.tp > 1 else ''} × ${d.gpu_hour_usd} × {d.hours_per_month:g} h"


def _seconds(key: str) -> Cell:
    return lambda result, render: render.seconds(getattr(result, key))


def _usd(key: str) -> Cell:
    return lambda result, render: render.usd(getattr(result, key))


#: Every figure, in the order of its command's table and of docs/figures.md. The JSON keeps its result's field order.
FIGURES: tuple[Figure, ...] = (
    Figure(
        "total_params",
        "params",
        "every parameter, counted from the config (tied embeddings once; multimodal towers included); equal to "
        "transformers' count for every shipped config",
        row=Row(
            _text("parameters (total)"),
            lambda r, u: f"{r.total_params:,}",
            lambda r, u: r.inputs.arch.model_type,
        ),
    ),
    Figure(
        "active_params",
        "params",
        "parameters one text token runs through: top-k routed experts plus shared experts; the vision tower idles",
        row=Row(
            _text("parameters (active)"),
            lambda r, u: f"{r.active_params:,}",
            _text("per text token"),
            shown=lambda r: r.active_params != r.total_params,
        ),
    ),
    Figure(
        "weight_bytes",
        "B",
        "every weight of the model, each parameter group at its stored dtype (see [Weights](#weights)), before TP "
        "splits it",
    ),
    Figure(
        "weight_bytes_per_gpu",
        "B",
        "weights / TP, each parameter group at its stored dtype (see [Weights](#weights)), plus the full copy of the "
        "layers engines keep whole on every rank (MLA's latent down-projections, MoE routers) and vLLM's MXFP4 expert "
        "padding",
        row=Row(_text("weights per GPU"), lambda r, u: u.data_bytes(r.weight_bytes_per_gpu), _weights_how),
    ),
    Figure(
        "kv_bytes_per_token",
        "B",
        "KV growth per token of context at long context: Σ over layers whose cache keeps growing of 2 × kv_heads × "
        "head_dim × KV dtype bytes (MLA: kv_lora_rank + qk_rope_head_dim; DeepSeek Sparse Attention in vLLM's "
        "layout, see [families.md](families.md))",
        row=Row(
            _text("KV per token"),
            lambda r, u: f"{r.kv_bytes_per_token:,.0f} B",
            lambda r, u: (
                f"{u.data_bytes(r.kv_bytes_per_token_per_gpu)} per GPU"
                + ("; layers that keep growing" if r.window_kv_bytes_per_token else "")
            ),
        ),
    ),
    Figure(
        "kv_bytes_per_token_per_gpu",
        "B",
        "the same on one GPU: KV heads split over TP; when TP exceeds the KV heads each rank holds a replicated head; "
        "MLA's latent is held whole by every rank",
    ),
    Figure(
        "window_kv_bytes_per_token",
        "B",
        "what a token costs in the layers that keep only a window (sliding windows, Llama 4's local chunks) while it "
        "is inside their window, which `kv_bytes_per_token` leaves out; 0 when every layer grows (Mistral 7B v0.1, "
        "all layers windowed at 4,096: 0 and 131,072 B). `kv` gives a request's whole cache",
        row=Row(
            _text("+ windowed KV per token"),
            lambda r, u: f"{r.window_kv_bytes_per_token:,.0f} B",
            _text("inside the window only: sliding-window layers stop there (kv shows a request's)"),
            shown=lambda r: bool(r.window_kv_bytes_per_token),
        ),
    ),
    Figure(
        "state_bytes_per_sequence",
        "B",
        "the fixed state one sequence holds whatever its length: conv and SSM state (Mamba), recurrent state "
        "(Gated DeltaNet), DeepSeek V4's window and compressor state; 0 for a model of attention only",
        row=Row(
            _text("state per sequence"),
            lambda r, u: u.data_bytes(r.state_bytes_per_sequence),
            _text("fixed: conv + SSM or recurrent state (DeepSeek V4: window + compressor state)"),
            shown=lambda r: bool(r.state_bytes_per_sequence),
        ),
    ),
    Figure(
        "peak_flops_per_gpu",
        "FLOP/s",
        "the GPU's dense peak FLOP/s at the compute dtype, from the GPU catalog (`quotacalc gpus --sources`)",
    ),
    Figure(
        "mfu_scale",
        "",
        "what the stated MFU is multiplied by on this GPU and dtype: its matmul efficiency over the reference's "
        "(see [Assumptions](#assumptions-all-inputs-with-documented-defaults))",
    ),
    Figure(
        "compute_dtype",
        "",
        "the dtype matmuls run in: the weights' where the GPU has tensor cores for it, else bf16 (see "
        "[Weights](#weights))",
    ),
    Figure(
        "effective_bandwidth_per_gpu",
        "B/s",
        "peak HBM bandwidth × MBU: what a decode step's reads run at",
    ),
    Figure(
        "prompt_token_s",
        "s",
        "2 × active_params / (TP × dense peak FLOP/s of the compute dtype × MFU × `mfu_scale`): the parameter term of "
        "the method, one unit",
        row=Row(
            _text("prompt token"),
            _seconds("prompt_token_s"),
            lambda r, u: (
                "parameters only (roofline; not the unit on the engine basis)"
                if _engine_basis(r)
                else "1 unit; parameters only"
            ),
        ),
    ),
    Figure(
        "engine_prompt_token_s",
        "s",
        "a prompt token's engine cost inside a full chunk; which step (`roofline`: decode_step_s, `engine`: itl_s) "
        "W, the budget and the prices follow (see [Engine model](#engine-model))",
        row=Row(
            _text("engine prompt token"),
            _seconds("engine_prompt_token_s"),
            lambda r, u: (
                f"1 unit; prefill of one {r.max_num_batched_tokens:,}-token chunk / {r.max_num_batched_tokens:,}"
            ),
            shown=_engine_basis,
        ),
    ),
    Figure("pricing_basis", "", None, doc_with="engine_prompt_token_s"),
    Figure(
        "prompt_token_at_context_s",
        "s",
        "prompt_token_s plus the attention FLOPs of a prompt token inside a prompt of `--context` tokens (mean over "
        "positions; sliding layers capped at their window); use it to price long-context pools",
        row=Row(
            lambda r, u: f"prompt token at {_context(r):,} context",
            _seconds("prompt_token_at_context_s"),
            _text("with attention FLOPs"),
        ),
    ),
    Figure(
        "attention_flops_per_prompt_token",
        "FLOP",
        "the attention FLOPs `prompt_token_at_context_s` adds to a prompt token",
    ),
    Figure(
        "decode_step_s",
        "s",
        "max(memory time, compute time) of one decode step at `--batch` sequences of `--context` tokens; memory time "
        "= (weight bytes read + batch × KV per sequence per GPU) / (peak bandwidth × MBU); `decode_bound` says which "
        "bound holds",
        row=Row(
            _text("decode step"),
            _seconds("decode_step_s"),
            lambda r, u: f"roofline, {r.decode_bound}-bound, batch {r.decode_batch}",
        ),
    ),
    Figure(
        "decode_weight_bytes_per_gpu",
        "B",
        "weight bytes one decode step reads per GPU: every stored weight, an MoE layer's only for the experts the "
        "batch touches (see [MoE](#moe))",
    ),
    Figure("decode_kv_bytes_per_gpu", "B", "KV (and state) bytes one decode step reads per GPU: batch × a sequence's"),
    Figure("decode_memory_s", "s", "the decode step's memory time: the bytes it reads / effective bandwidth"),
    Figure("decode_compute_s", "s", "the decode step's compute time: its FLOPs at the compute rate"),
    Figure("decode_bound", "", "which of the two the roofline decode step takes: `memory` or `compute`"),
    Figure(
        "decode_batch",
        "sequences",
        "the batch the decode figures are at: `--batch`, or the largest the KV pool holds at `--context` when that is "
        "smaller (with a warning)",
    ),
    Figure(
        "engine_decode_weight_bytes_per_gpu",
        "B",
        "the weight bytes an engine's decode step reads per GPU (decode_weight_bytes_per_gpu less the input "
        "embedding table of an untied model and any vision tower, plus the LM head at 16 bits under a quantized "
        "`--weight-dtype`), decode_compute_s without FLOPs for the embedding table (a gather), and decode_step_s over "
        "both",
    ),
    Figure("engine_decode_compute_s", "s", None, doc_with="engine_decode_weight_bytes_per_gpu"),
    Figure("engine_decode_step_s", "s", None, doc_with="engine_decode_weight_bytes_per_gpu"),
    Figure(
        "itl_s",
        "s",
        "the engine's decode step: engine_decode_step_s + `decode_overhead_s` (step overhead + layers × layer "
        "overhead + MoE slot overhead + batch × sequence overhead) + `allreduce_s` (two TP all-reduces per layer: "
        "latency + activations over the interconnect); what a user measures as inter-token latency at that batch",
        row=Row(
            _text("inter-token latency"),
            _seconds("itl_s"),
            lambda r, u: f"engine: + {u.seconds(r.decode_overhead_s)} overhead, {u.seconds(r.allreduce_s)} all-reduce",
        ),
    ),
    Figure(
        "moe_overhead_s",
        "s",
        "what the MoE layers add to each forward pass: Σ top-k × log2(TP) × `--moe-slot-overhead-s` (0 for a dense "
        "model; see [MoE](#moe))",
    ),
    Figure("decode_overhead_s", "s", "the engine's overheads of one decode step, as `itl_s` sums them"),
    Figure("allreduce_s", "s", "the TP all-reduces of one decode step, as `itl_s` sums them (0 at TP 1)"),
    Figure(
        "engine_flops_per_prompt_token",
        "FLOP",
        "FLOPs a prompt token multiplies in an engine's prefill over all TP ranks, before attention: 2 × "
        "(active_params − embedding table − LM head + (TP − 1) × the layers every rank keeps whole, such as MLA's "
        "down-projections and MoE routers); each chunk adds its last token's logits (2 × vocabulary × hidden)",
    ),
    Figure(
        "ttft_s",
        "s",
        "time to first token of one `--context`-token prompt on an idle replica: request overhead + its prefill "
        "chunks of `max_num_batched_tokens` (max(FLOPs, one weight read) + overheads each)",
        row=Row(
            _text("time to first token"),
            _seconds("ttft_s"),
            lambda r, u: f"{_context(r):,}-token prompt, idle replica",
        ),
    ),
    Figure(
        "prefill_overhead_s",
        "s",
        "layers × `prefill_layer_overhead_s`: what a prefill pass adds once a chunk (90 µs a layer by default: 7.2 ms "
        "for Llama 3.3 70B's 80 layers; 0.9 ms a layer on SGLang's eager prefill)",
    ),
    Figure(
        "max_num_batched_tokens",
        "tokens",
        "the engine's token budget per step, the chunk a long prompt is prefilled in (`--max-num-batched-tokens`)",
    ),
    Figure(
        "max_load_output_tokens_per_s",
        "tokens/s",
        "output tokens/s at full load for requests of `--load-prompt-tokens` (default `--context`) and "
        "`--load-output-tokens` (128), every request's prefill charged to the replica, at the largest batch the pool "
        "holds (at most `--max-num-seqs`)",
        row=Row(
            _text("full-load output"),
            lambda r, u: f"{r.max_load_output_tokens_per_s:,.0f} tokens/s",
            lambda r, u: f"{r.load_prompt_tokens:,} in / {r.load_output_tokens:,} out, batch {r.max_load_batch:,}",
        ),
    ),
    Figure("max_load_batch", "sequences", None, doc_with="max_load_output_tokens_per_s"),
    Figure("load_prompt_tokens", "tokens", "the full-load workload's prompt and output tokens per request"),
    Figure("load_output_tokens", "tokens", None, doc_with="load_prompt_tokens"),
    Figure(
        "output_token_s",
        "s",
        "decode_step_s / batch (itl_s / batch on the engine basis)",
        row=Row(
            _text("output token"),
            _seconds("output_token_s"),
            lambda r, u: (
                f"{'inter-token latency' if _engine_basis(r) else 'decode step'} / batch ({r.pricing_basis} basis)"
            ),
        ),
    ),
    Figure(
        "output_weight",
        "units",
        "W = output_token_s / prompt_token_s: how many units an output token costs",
        row=Row(
            _text("output weight W"),
            lambda r, u: f"{r.output_weight:.2f}",
            lambda r, u: (
                "units per output token: output token / engine prompt token"
                if _engine_basis(r)
                else "units per output token"
            ),
        ),
    ),
    Figure(
        "replica_units_per_s",
        "units/s",
        "ceiling / prompt_token_s: the units a replica sells per second",
        row=Row(
            _text("replica budget"),
            lambda r, u: f"{r.replica_units_per_s:,.0f} units/s",
            lambda r, u: f"ceiling {r.inputs.deployment.ceiling} / {_unit_token(r)}",
        ),
    ),
    Figure(
        "units_per_gpu_hour",
        "units",
        "replica_units_per_s × 3600 / GPUs: the units one GPU-hour sells at the ceiling, to compare GPUs and "
        "deployments by what an hour of a GPU earns (its $/GPU-hour over this is `usd_per_unit`)",
        row=Row(
            _text("units per GPU-hour"),
            lambda r, u: f"{u.count(r.units_per_gpu_hour)} units",
            lambda r, u: (
                f"replica budget × 3600 s / {r.inputs.deployment.tp} GPU{'s' if r.inputs.deployment.tp > 1 else ''}"
            ),
        ),
        derived=Derived(
            "replica_units_per_s × 3600 / tp",
            ("replica_units_per_s", "tp"),
            lambda units_per_s, gpus: units_per_s * SECONDS_PER_HOUR / gpus,
        ),
    ),
    Figure(
        "memory_utilization",
        "",
        "the share of GPU memory the engine may use: given, or the engine's default (vLLM's 0.9, SGLang's rule)",
    ),
    Figure(
        "runtime_reserve_bytes_per_gpu",
        "B",
        "what the engine keeps per GPU beside weights and KV: the modelled reserve (see [KV pool](#kv-pool)) or "
        "`--runtime-reserve-gib`",
    ),
    Figure("kv_pool_bytes_per_gpu", "B", "the bytes of KV pool on each GPU: what the pool's tokens occupy"),
    Figure(
        "kv_pool_tokens",
        "tokens",
        "tokens of KV a replica holds: `--kv-pool-tokens` when measured, else (memory_utilization × HBM − weights − "
        "runtime reserve) per GPU / KV bytes per token per GPU",
        row=Row(_text("KV pool"), lambda r, u: f"{r.kv_pool_tokens:,} tokens", _pool_how),
    ),
    Figure("kv_pool_source", "", "`measured` (given or calibrated) or `estimated`, where `kv_pool_tokens` comes from"),
    Figure(
        "max_resident_sequences",
        "sequences",
        "sequences of `--context` tokens the pool holds at once, KV and any SSM state (vLLM's \"maximum "
        'concurrency"); a warning says when `--batch` exceeds it',
        row=Row(
            lambda r, u: f"resident at {_context(r):,} tokens",
            lambda r, u: f"{r.max_resident_sequences:,} sequences",
            _text("KV + state fit at once"),
        ),
    ),
    Figure(
        "kv_pool_tokens_at_context",
        "tokens",
        "tokens the pool holds filled with sequences of `--context`: `kv_pool_tokens` when every layer's cache grows "
        "with the context, `max_resident_sequences` × `--context` when some layers keep a window or a fixed state (a "
        "short sequence pays those in full); what a plan's tier KV caps are checked against, what the generated "
        "policy's pools state and what `simulate` counts KV against",
        row=Row(
            lambda r, u: f"KV pool at {_context(r):,} tokens",
            lambda r, u: f"{r.kv_pool_tokens_at_context:,} tokens",
            _text("windows and state cost a short sequence in full; tier caps count these"),
            shown=lambda r: r.kv_pool_tokens_at_context != r.kv_pool_tokens,
        ),
    ),
    Figure(
        "dedicated_usd_per_month",
        "USD",
        "GPUs × $/GPU-hour × hours/month, used or not",
        row=Row(
            _text("dedicated replica"),
            lambda r, u: f"{u.usd(r.dedicated_usd_per_month)}/month",
            _dedicated_how,
        ),
    ),
    Figure(
        "usd_per_unit",
        "USD",
        "GPUs × $/GPU-hour / 3600 / replica_units_per_s: one unit's price, the replica sold at the ceiling",
    ),
    Figure(
        "usd_per_million_prompt_tokens",
        "USD",
        "a replica's cost per second at the ceiling, per unit, × 1, × cached weight, × W",
        row=Row(_text("$ per 1M prompt tokens"), _usd("usd_per_million_prompt_tokens"), _text("at the ceiling")),
    ),
    Figure(
        "usd_per_million_cached_prompt_tokens",
        "USD",
        None,
        doc_with="usd_per_million_prompt_tokens",
        row=Row(
            _text("$ per 1M cached prompt tokens"),
            _usd("usd_per_million_cached_prompt_tokens"),
            lambda r, u: f"× {r.inputs.deployment.cached_prompt_weight}",
        ),
    ),
    Figure(
        "usd_per_million_output_tokens",
        "USD",
        None,
        doc_with="usd_per_million_prompt_tokens",
        row=Row(_text("$ per 1M output tokens"), _usd("usd_per_million_output_tokens"), _text("× W")),
    ),
    Figure(
        "expert_traffic",
        "",
        "MoE models: per MoE layer, its experts, top-k, the experts a decode step is expected to read and their bytes "
        "(null for a dense model)",
    ),
    # size: one traffic profile on the replica priced above (SizeResult's fields, in its order)
    Figure(
        "units_per_request",
        "units",
        "one of the tenant's requests in units: uncached prompt × a prompt token's cost inside its prompt + cached "
        "prompt × cached weight + W × output",
        command="size",
        row=Row(
            _text("units per request"),
            lambda r, u: u.number(r.units_per_request),
            lambda r, u: f"W = {r.replica.output_weight:.2f}",
        ),
    ),
    Figure(
        "units_per_s",
        "units/s",
        "rps × units_per_request: the tenant's load; a tenant one of whose requests does not fit the pool is an error",
        command="size",
        row=Row(_text("load"), lambda r, u: f"{r.units_per_s:,.0f} units/s", _text("")),
    ),
    Figure(
        "replicas",
        "",
        "units_per_s / replica_units_per_s",
        command="size",
        row=Row(
            _text("replicas"),
            lambda r, u: f"{r.replicas:,.2f}",
            lambda r, u: f"of {r.replica.replica_units_per_s:,.0f} units/s each",
        ),
    ),
    Figure(
        "bucket_rate_units_per_s",
        "units/s",
        "the tenant's token bucket: its contracted units/s, and `--burst-s` seconds of it",
        command="size",
        row=Row(_text("token bucket rate"), lambda r, u: f"{r.bucket_rate_units_per_s:,.0f} units/s", _text("refill")),
    ),
    Figure(
        "bucket_depth_units",
        "units",
        None,
        command="size",
        doc_with="bucket_rate_units_per_s",
        row=Row(
            _text("token bucket depth"),
            lambda r, u: f"{r.bucket_depth_units:,.0f} units",
            lambda r, u: f"{r.replica.inputs.deployment.burst_s:g} s of quota",
        ),
    ),
    Figure(
        "shared_usd_per_month",
        "USD",
        "replicas × the replica's `dedicated_usd_per_month`: the tenant's share of shared replicas",
        command="size",
        row=Row(_text("shared"), lambda r, u: f"{u.usd(r.shared_usd_per_month)}/month", _text("its share of replicas")),
    ),
    Figure(
        "dedicated_replicas",
        "",
        "the whole replicas the tenant takes alone (replicas rounded up, at least one) and their cost per month, used "
        "or not",
        command="size",
    ),
    Figure(
        "dedicated_total_usd_per_month",
        "USD",
        None,
        command="size",
        doc_with="dedicated_replicas",
        row=Row(
            _text("dedicated"),
            lambda r, u: f"{u.usd(r.dedicated_total_usd_per_month)}/month",
            lambda r, u: f"{r.dedicated_replicas} whole replica(s)",
        ),
    ),
    Figure(
        "request_kv_bytes",
        "B",
        "KV (plus any state) one of the tenant's requests holds at prompt + output tokens, and its share of the pool",
        command="size",
        row=Row(
            _text("one request's KV"),
            lambda r, u: u.data_bytes(r.request_kv_bytes),
            lambda r, u: f"{r.request_pool_share:.2%} of a replica's pool",
        ),
    ),
    Figure("request_pool_share", "", None, command="size", doc_with="request_kv_bytes"),
    # kv: one request on the replica priced above (RequestKvResult's fields, in its order)
    Figure("context_tokens", "tokens", "the request's length in tokens: `--context`", command="kv"),
    Figure(
        "request_kv_bytes",
        "B",
        "exact KV (plus any SSM state) one request holds at `--context`, per GPU, and its share of the pool",
        command="kv",
        row=Row(
            _text("request KV"),
            lambda r, u: u.binary_bytes(r.request_kv_bytes),
            lambda r, u: u.data_bytes(r.request_kv_bytes),
        ),
    ),
    Figure(
        "request_kv_bytes_per_gpu",
        "B",
        None,
        command="kv",
        doc_with="request_kv_bytes",
        row=Row(
            _text("per GPU"),
            lambda r, u: u.data_bytes(r.request_kv_bytes_per_gpu),
            lambda r, u: f"TP {r.replica.inputs.deployment.tp}",
        ),
    ),
    Figure(
        "window_kv_bytes",
        "B",
        "of `request_kv_bytes`, what the layers that keep only a window hold (sliding windows and local chunks cap "
        "it), over the whole replica; 0 when every layer grows",
        command="kv",
        row=Row(
            _text("of which windowed KV"),
            lambda r, u: u.data_bytes(r.window_kv_bytes),
            _text("whole replica; sliding windows and local chunks cap it"),
            shown=lambda r: bool(r.window_kv_bytes),
        ),
    ),
    Figure(
        "state_bytes",
        "B",
        "of `request_kv_bytes`, the fixed state (conv, SSM, recurrent, or DeepSeek V4's window and compressor "
        "state), over the whole replica; 0 for a model of attention only",
        command="kv",
        row=Row(
            _text("of which fixed state"),
            lambda r, u: u.data_bytes(r.state_bytes),
            _text("whole replica; conv, SSM, recurrent, or DeepSeek V4's window + compressor state"),
            shown=lambda r: bool(r.state_bytes),
        ),
    ),
    Figure(
        "pool_share",
        "",
        None,
        command="kv",
        doc_with="request_kv_bytes",
        row=Row(
            _text("share of the KV pool"),
            lambda r, u: f"{r.pool_share:.1%}",
            lambda r, u: f"pool {r.replica.kv_pool_tokens:,} tokens",
        ),
    ),
    Figure(
        "requests_resident",
        "requests",
        "requests of `--context` the pool holds at once, and the requests that fill it (0 when one request is larger "
        "than the whole pool)",
        command="kv",
        row=Row(_text("resident at once"), lambda r, u: f"{r.requests_resident}", _text("requests that fit")),
    ),
    Figure(
        "requests_to_fill_pool",
        "requests",
        None,
        command="kv",
        doc_with="requests_resident",
        row=Row(
            _text("fill the replica"),
            lambda r, u: f"{r.requests_to_fill_pool}" if r.requests_to_fill_pool else "never",
            lambda r, u: "requests" if r.requests_to_fill_pool else "one request is larger than the whole pool",
        ),
    ),
    Figure(
        "prompt_token_units_at_context",
        "units",
        "what one prompt token costs inside a prompt of `--context` tokens, in units (1 + attention's share), and the "
        "whole prefill: the figures for pricing a long-context pool",
        command="kv",
        row=Row(
            _text("prompt token at this context"),
            lambda r, u: f"{r.prompt_token_units_at_context:.2f} units",
            _text("parameters + attention FLOPs"),
        ),
    ),
    Figure(
        "prefill_units",
        "units",
        None,
        command="kv",
        doc_with="prompt_token_units_at_context",
        row=Row(
            _text("prefill of the whole prompt"),
            lambda r, u: f"{r.prefill_units:,.0f} units",
            _text("before the first output token"),
        ),
    ),
)


def declared(command: Command = "price") -> tuple[Figure, ...]:
    """The figures of one command, in the declared order."""
    return tuple(figure for figure in FIGURES if figure.command == command)


def json_keys(command: Command = "price") -> frozenset[str]:
    """The keys of a command's ``results`` that its JSON carries: the declared ones."""
    return frozenset(figure.key for figure in declared(command))


def derived_keys() -> tuple[str, ...]:
    """The ``price`` figures computed from others by their declaration, in the declared order."""
    return tuple(figure.key for figure in declared("price") if figure.derived is not None)


def substitute(formula: str, values: Mapping[str, float]) -> str:
    """``formula`` with each name of ``values`` replaced by its number (a whole name only, the longest first)."""
    if not values:
        return formula
    names = sorted(values, key=len, reverse=True)
    pattern = re.compile(r"\b(" + "|".join(re.escape(name) for name in names) + r")\b")
    return pattern.sub(lambda match: fmt(values[match.group(1)]), formula)


class Recorder(Protocol):
    """``core/price.py``'s ``_Explainer.record``: keeps a figure and its explain step."""

    def __call__(self, name: str, value: float, *, formula: str, substituted: str, unit: str) -> float: ...


def record_derived(record: Recorder, figures: Mapping[str, Any], deployment: Any) -> None:
    """Compute and record every derived ``price`` figure from the recorded ``figures`` and the deployment."""
    for figure in declared("price"):
        if figure.derived is None:
            continue
        rule = figure.derived
        values = {name: figures[name] if name in figures else getattr(deployment, name) for name in rule.inputs}
        record(
            figure.key,
            rule.compute(*(values[name] for name in rule.inputs)),
            formula=rule.formula,
            substituted=substitute(rule.formula, values),
            unit=figure.unit,
        )


def figures_markdown() -> str:
    """docs/figures.md's table *What every figure means*: one row per figure, or per group sharing a meaning."""
    joined: dict[tuple[Command, str], list[Figure]] = {}
    for figure in FIGURES:
        joined.setdefault((figure.command, figure.doc_with or figure.key), []).append(figure)
    lines = ["| figure (JSON key) | meaning |", "|---|---|"]
    for figure in FIGURES:
        if figure.meaning is None:
            continue
        keys = ", ".join(f"`{member.key}`" for member in joined[figure.command, figure.key])
        where = "" if figure.command == "price" else f" ({figure.command})"
        lines.append(f"| {keys}{where} | {figure.meaning} |")
    return "\n".join(lines) + "\n"
