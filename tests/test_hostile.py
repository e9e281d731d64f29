"""Hostile input, table-driven: every case gets one line on stderr and its exact exit code, or a valid result.

Cases cover flags, deployment files, model configs (variants of the shipped ones, written to a temp dir),
cache entries and the environment. "Valid" means strict JSON (no NaN/Infinity) with no negative bytes or
parameters. The CLI runs in-process (``run_cli``); a subprocess only where the case needs one (a signal,
an output encoding, an environment read at start-up).
"""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from quotacalc.errors import EXIT_INVALID_INPUT, EXIT_USAGE

INVALID, USAGE, OK = EXIT_INVALID_INPUT, EXIT_USAGE, "ok"
ROOT = Path(__file__).resolve().parent.parent
MODELS = ROOT / "models"
L = ("--model", "Llama-3.1-8B-Instruct", "--gpu", "h100-sxm")
MIX = ("--model", "Mixtral-8x7B-v0.1", "--gpu", "h100-sxm", "--tp", "2")
TENANT = ("--rps", "1", "--prompt-tokens", "100", "--output-tokens", "10")
ESC = "\x1b[31m"
HUGE = "9" * 400


def shipped(name: str) -> dict[str, Any]:
    return json.loads((MODELS / name / "config.json").read_text(encoding="utf-8"))


def variant(name: str = "Llama-3.1-8B-Instruct", drop: tuple[str, ...] = (), **changes: Any) -> dict[str, Any]:
    """A shipped config with some fields changed or dropped."""
    config = {key: value for key, value in shipped(name).items() if key not in drop}
    config.update(changes)
    return config


def llama(**changes: Any) -> dict[str, Any]:
    return variant(**changes)


def mixtral(**changes: Any) -> dict[str, Any]:
    return variant("Mixtral-8x7B-v0.1", **changes)


def quant(**quantization: Any) -> dict[str, Any]:
    return llama(quantization_config=quantization)


@dataclass(frozen=True)
class Case:
    """``args`` may hold ``{d}``, the case's temp dir; ``files`` maps paths under it to their content
    (a dict is written as a config.json, text as UTF-8, bytes as is); ``setup`` prepares the rest."""

    id: str
    args: tuple[str, ...]
    want: int | str
    needles: tuple[str, ...] = ()
    files: dict[str, Any] = field(default_factory=dict)
    setup: Callable[[Path], None] | None = None
    command: str = "price"


def config_case(id: str, config: Any, want: int | str, *needles: str, args: tuple[str, ...] = ()) -> Case:
    return Case(
        id, ("--model", "{d}/m", "--gpu", "h100-sxm", *args, "--json"), want, needles, {"m/config.json": config}
    )


def plan_case(id: str, text: str | bytes, want: int | str, *needles: str, command: str = "price") -> Case:
    return Case(id, ("{d}/plan.yaml", "--json"), want, needles, {"plan.yaml": text}, command=command)


def flag_case(id: str, args: tuple[str, ...], want: int | str, *needles: str, command: str = "price") -> Case:
    return Case(id, (*args, "--json"), want, needles, command=command)


# --------------------------------------------------------------------------- flags

FLOAT_FLAGS = (
    "--mfu",
    "--mbu",
    "--ceiling",
    "--gpu-hour-usd",
    "--hours-per-month",
    "--memory-utilization",
    "--runtime-reserve-gib",
    "--expert-skew",
    "--cached-prompt-weight",
    "--burst-s",
    "--reserve-base-gib",
    "--reserve-per-tp-doubling-gib",
    "--step-overhead-s",
    "--sequence-overhead-s",
    "--request-overhead-s",
    "--allreduce-latency-s",
    "--moe-slot-overhead-s",
    "--prefill-layer-overhead-s",
)
FLAG_CASES = [
    # NaN and infinities reach no formula: pydantic refuses them where they enter.
    *(
        flag_case(f"{flag}={value}", (*L, flag, value), INVALID, flag, "finite")
        for flag in FLOAT_FLAGS
        for value in ("nan", "inf", "-inf")
    ),
    *(
        flag_case(f"{flag}={value}", (*L, *TENANT, flag, value), INVALID, flag, "finite", command="size")
        for flag in ("--rps", "--prompt-tokens", "--output-tokens", "--cached-fraction")
        for value in ("nan", "inf")
    ),
    # Out of range, high and low.
    *(
        flag_case(f"{flag}=400-digits", (*L, flag, HUGE), INVALID, flag, "at most", "400-digit")
        for flag in ("--tp", "--batch", "--context", "--kv-pool-tokens")
    ),
    *(
        flag_case(f"{flag}=400-digits", (*L, flag, HUGE), INVALID, flag, "at most", "400-digit")
        for flag in ("--max-num-seqs", "--max-num-batched-tokens", "--load-prompt-tokens", "--load-output-tokens")
    ),
    *(
        flag_case(f"{flag}=1e300", (*L, flag, "1e300"), INVALID, flag, "at most")
        for flag in (
            "--step-overhead-s",
            "--sequence-overhead-s",
            "--request-overhead-s",
            "--allreduce-latency-s",
            "--reserve-base-gib",
            "--reserve-per-tp-doubling-gib",
        )
    ),
    flag_case("--pricing-basis=bogus", (*L, "--pricing-basis", "bogus"), USAGE, "--pricing-basis"),
    flag_case("--gpu-hour-usd=1e400", (*L, "--gpu-hour-usd", "1e400"), INVALID, "--gpu-hour-usd", "finite"),
    flag_case("--burst-s=1e308", (*L, "--burst-s", "1e308"), INVALID, "--burst-s", "at most"),
    flag_case("--hours-per-month=745", (*L, "--hours-per-month", "745"), INVALID, "--hours-per-month", "744"),
    flag_case("--expert-skew=101", (*MIX, "--expert-skew", "101"), INVALID, "--expert-skew", "at most 100"),
    # A slot's cost in seconds where microseconds were meant: refused, not priced as hours of ITL.
    flag_case(
        "--moe-slot-overhead-s=5",
        (*MIX, "--moe-slot-overhead-s", "5"),
        INVALID,
        "--moe-slot-overhead-s",
        "at most 0.001",
    ),
    flag_case(
        "--moe-slot-overhead-s=-1e-6",
        (*MIX, "--moe-slot-overhead-s", "-1e-6"),
        INVALID,
        "--moe-slot-overhead-s",
        "negative",
    ),
    # A layer's eager-prefill cost in seconds where milliseconds were meant: refused, not a TTFT of minutes.
    flag_case(
        "--prefill-layer-overhead-s=1",
        (*L, "--prefill-layer-overhead-s", "1"),
        INVALID,
        "--prefill-layer-overhead-s",
        "at most 0.01",
    ),
    flag_case(
        "--prefill-layer-overhead-s=-1e-3",
        (*L, "--prefill-layer-overhead-s", "-1e-3"),
        INVALID,
        "--prefill-layer-overhead-s",
        "negative",
    ),
    flag_case("--tp=2048", (*L, "--tp", "2048"), INVALID, "--tp", "at most 1,024"),
    flag_case("--batch=1000001", (*L, "--batch", "1000001"), INVALID, "--batch", "at most 1,000,000"),
    flag_case("--context=1e8+1", (*L, "--context", "100000001"), INVALID, "--context", "at most"),
    flag_case("--runtime-reserve-gib=1e5", (*L, "--runtime-reserve-gib", "1e5"), INVALID, "--runtime-reserve-gib"),
    flag_case(
        "--rps=1e10",
        (*L, "--rps", "1e10", "--prompt-tokens", "1", "--output-tokens", "1"),
        INVALID,
        "--rps",
        command="size",
    ),
    flag_case(
        "--prompt-tokens=1e9",
        (*L, "--rps", "1", "--prompt-tokens", "1e9", "--output-tokens", "1"),
        INVALID,
        "--prompt-tokens",
        command="size",
    ),
    flag_case("--gpu-hour-usd=-0.01", (*L, "--gpu-hour-usd", "-0.01"), INVALID, "--gpu-hour-usd", "negative"),
    flag_case("--hours-per-month=0", (*L, "--hours-per-month", "0"), INVALID, "--hours-per-month", "positive"),
    flag_case("--burst-s=0", (*L, "--burst-s", "0"), INVALID, "--burst-s", "positive"),
    flag_case("--burst-s=-1", (*L, "--burst-s", "-1"), INVALID, "--burst-s", "positive"),
    flag_case("--expert-skew=-1", (*MIX, "--expert-skew", "-1"), INVALID, "--expert-skew", "negative"),
    flag_case("--runtime-reserve-gib=-1", (*L, "--runtime-reserve-gib", "-1"), INVALID, "--runtime-reserve-gib"),
    flag_case("--kv-pool-tokens=0", (*L, "--kv-pool-tokens", "0"), INVALID, "--kv-pool-tokens", "positive"),
    flag_case("--kv-pool-tokens=-1", (*L, "--kv-pool-tokens", "-1"), INVALID, "--kv-pool-tokens", "positive"),
    flag_case(
        "--output-tokens=-1",
        (*L, "--rps", "1", "--prompt-tokens", "1", "--output-tokens", "-1"),
        INVALID,
        "--output-tokens",
        "negative",
        command="size",
    ),
    flag_case(
        "--cached-fraction=1.01",
        (*L, *TENANT, "--cached-fraction", "1.01"),
        INVALID,
        "--cached-fraction",
        command="size",
    ),
    flag_case("kv --context=400-digits", (*L, "--context", HUGE), INVALID, "--context", "at most", command="kv"),
    flag_case("kv --context=nan", (*L, "--context", "nan"), USAGE, "--context", command="kv"),
    # Malformed numbers are usage errors (the command line's parser refuses them).
    flag_case("--tp=4.0", (*L, "--tp", "4.0"), USAGE, "--tp"),
    flag_case("--batch=1e3", (*L, "--batch", "1e3"), USAGE, "--batch"),
    flag_case("--batch=0x10", (*L, "--batch", "0x10"), USAGE, "--batch"),
    flag_case("--tp=empty", (*L, "--tp", ""), USAGE, "--tp"),
    flag_case("--mfu=abc", (*L, "--mfu", "abc"), USAGE, "--mfu"),
    flag_case("--batch=5000-digits", (*L, "--batch", "9" * 5000), USAGE, "--batch"),
    flag_case("--expert-parallel=yes", (*L, "--expert-parallel", "yes"), USAGE),
    # Terminal escapes and NUL bytes in names: refused, and never echoed raw.
    flag_case("--gpu=escape", ("--model", "Llama-3.1-8B-Instruct", "--gpu", f"{ESC}h100"), USAGE, "gpu", "?[31mh100"),
    flag_case("--model=escape", ("--model", f"{ESC}x\x07", "--gpu", "h100-sxm"), USAGE, "model"),
    flag_case("--model=osc-title", ("--model", "\x1b]0;pwned\x07", "--gpu", "h100-sxm"), USAGE, "model"),
    flag_case("--weight-dtype=escape", (*L, "--weight-dtype", f"fp8{ESC}"), USAGE, "--weight-dtype:"),
    flag_case("--kv-dtype=newline", (*L, "--kv-dtype", "fp8\nINJECTED"), USAGE, "--kv-dtype:"),
    flag_case("--model=nul", ("--model", "a\x00b", "--gpu", "h100-sxm"), USAGE, "model"),
    flag_case("--gpu=nul", ("--model", "Llama-3.1-8B-Instruct", "--gpu", "h100\x00"), USAGE, "gpu"),
    flag_case("--model=empty", ("--model", "", "--gpu", "h100-sxm"), USAGE, "model", "empty"),
    flag_case("--gpu=spaces", ("--model", "Llama-3.1-8B-Instruct", "--gpu", "   "), USAGE, "gpu", "empty"),
    # A missing local path is a usage error, never a hub lookup.
    flag_case(
        "missing mymodel/config.json", ("--model", "mymodel/config.json", "--gpu", "h100-sxm"), USAGE, "no such file"
    ),
    flag_case("missing ./model", ("--model", "./no-such-model", "--gpu", "h100-sxm"), USAGE, "no such file"),
    flag_case("missing /abs/dir", ("--model", "/no/such/model/dir", "--gpu", "h100-sxm"), USAGE, "no such file"),
    flag_case("missing ../x.json", ("--model", "../x.json", "--gpu", "h100-sxm"), USAGE, "no such file"),
    flag_case("missing ~/x", ("--model", "~/no-such-quotacalc-model", "--gpu", "h100-sxm"), USAGE, "no such file"),
    flag_case("name too long", ("--model", "a" * 300 + ".json", "--gpu", "h100-sxm"), USAGE, "model"),
    flag_case("path too long", ("--model", "/" + "a" * 5000, "--gpu", "h100-sxm"), USAGE, "model"),
    flag_case("5000-char name", ("--model", "x" * 5000, "--gpu", "h100-sxm"), USAGE, "model"),
    flag_case("--model /dev/null", ("--model", "/dev/null", "--gpu", "h100-sxm"), USAGE, "regular file"),
    flag_case("unknown option with an escape", (*L, f"--{ESC}x", "1"), USAGE, "No such option"),
    flag_case("extra argument", (*L, "one.yaml", "two.yaml"), USAGE),
    flag_case(
        "--model /proc/self/status",
        ("--model", "/proc/self/status", "--gpu", "h100-sxm"),
        INVALID,
        "malformed config JSON",
    ),
    flag_case("--model /dev/zero", ("--model", "/dev/zero", "--gpu", "h100-sxm"), USAGE, "regular file"),
    # Valid edges: a result, strict.
    flag_case("--mfu=1", (*L, "--mfu", "1"), OK),
    flag_case("--gpu-hour-usd=0", (*L, "--gpu-hour-usd", "0"), OK),
    flag_case("--hours-per-month=744", (*L, "--hours-per-month", "744"), OK),
    flag_case("--cached-prompt-weight=0", (*L, "--cached-prompt-weight", "0"), OK),
    flag_case("--expert-skew=100", (*MIX, "--expert-skew", "100"), OK),
    # No requests size to 0 units/s: refused as a plan refuses such a tenant, naming the flag.
    flag_case(
        "--rps=0", (*L, "--rps", "0", "--prompt-tokens", "1", "--output-tokens", "1"), INVALID, "--rps", command="size"
    ),
    flag_case("--rps=1e-9", (*L, "--rps", "1e-9", "--prompt-tokens", "1", "--output-tokens", "1"), OK, command="size"),
    # Requests of no tokens size to 0 units/s too.
    flag_case(
        "no tokens",
        (*L, "--rps", "5", "--prompt-tokens", "0", "--output-tokens", "0"),
        INVALID,
        "--prompt-tokens",
        command="size",
    ),
    flag_case("prompt only", (*L, "--rps", "5", "--prompt-tokens", "1", "--output-tokens", "0"), OK, command="size"),
    flag_case("--batch=1 --context=1", (*L, "--batch", "1", "--context", "1"), OK),
    flag_case("--no-expert-parallel", (*MIX, "--no-expert-parallel"), OK),
]

# --------------------------------------------------------------------------- deployment files

HEAD = "model: Llama-3.1-8B-Instruct\ngpu: h100-sxm\n"
TENANT_HEAD = HEAD + "tenant:\n  rps: 1\n  prompt_tokens: 100\n  output_tokens: 10\n"
PLAN_CASES = [
    *(
        plan_case(f"batch: {word}", HEAD + f"batch: {word}\n", INVALID, "batch", "integer", "true/false")
        for word in ("yes", "no", "on", "true")
    ),
    plan_case("tp: 4.0", HEAD + "tp: 4.0\n", INVALID, "tp", "integer"),
    plan_case("tp: '4'", HEAD + "tp: '4'\n", INVALID, "tp", "integer", "quotes"),
    plan_case("mfu: '0.5'", HEAD + "mfu: '0.5'\n", INVALID, "mfu", "number"),
    plan_case("mfu: .nan", HEAD + "mfu: .nan\n", INVALID, "mfu", "finite"),
    plan_case("mfu: .inf", HEAD + "mfu: .inf\n", INVALID, "mfu", "finite"),
    plan_case("burst_s: -.inf", HEAD + "burst_s: -.inf\n", INVALID, "burst_s", "finite"),
    plan_case("batch: 400 digits", HEAD + f"batch: {HUGE}\n", INVALID, "batch", "at most"),
    plan_case("batch: 5000 digits", HEAD + f"batch: {'9' * 5000}\n", INVALID),
    # YAML 1.2 reads 1e400 as a whole number past a float's range: its size is what is wrong, not its type.
    *(
        plan_case(f"{key}: 1e400", HEAD + f"{key}: 1e400\n", INVALID, key, "finite number", "401-digit")
        for key in ("gpu_hour_usd", "burst_s", "mfu")
    ),
    plan_case("context: a date", HEAD + "context: 2024-01-01\n", INVALID, "context", "integer"),
    plan_case("context: impossible date", HEAD + "context: 2024-13-45\n", INVALID),
    plan_case("expert_parallel: 'yes'", HEAD + "expert_parallel: 'yes'\n", INVALID, "expert_parallel"),
    plan_case(
        "kv_pool_measured_with.tp: yes",
        HEAD + "kv_pool_tokens: 600000\nkv_pool_measured_with: {gpu: h100-sxm, tp: yes}\n",
        INVALID,
        "kv_pool_measured_with.tp",
        "integer",
    ),
    plan_case("kv_pool_measured_with: 5", HEAD + "kv_pool_measured_with: 5\n", INVALID, "kv_pool_measured_with"),
    plan_case("pricing_basis: 5", HEAD + "pricing_basis: 5\n", INVALID, "pricing_basis"),
    plan_case("model: 123", "model: 123\ngpu: h100-sxm\n", INVALID, "model", "string"),
    plan_case("model: a list", "model: [a, b]\ngpu: h100-sxm\n", INVALID, "model", "string"),
    plan_case("model with NUL", 'model: "a\\0b"\ngpu: h100-sxm\n', USAGE, "model"),
    plan_case("latin-1 key", HEAD.encode() + b"\xe9: 1\n", INVALID, "UTF-8", "line 3"),
    plan_case("latin-1 value", HEAD.encode() + b"kv_dtype: f\xe9\n", INVALID, "UTF-8"),
    plan_case("UTF-16", HEAD.encode("utf-16"), INVALID, "UTF-8"),
    plan_case("list as key", HEAD + "[a, b]: 1\n", INVALID, "list cannot be a key"),
    plan_case("mapping as key", HEAD + "{a: 1}: 1\n", INVALID, "mapping cannot be a key"),
    plan_case("int as key", HEAD + "1: 1\n", INVALID, "quote it"),
    plan_case("null as key", HEAD + "null: 1\n", INVALID, "quote it"),
    plan_case("bool as key", HEAD + "yes: 1\n", INVALID, "quote it"),
    plan_case("complex key", HEAD + "? [a]\n: 1\n", INVALID, "cannot be a key"),
    plan_case("duplicate key", HEAD + "tp: 1\ntp: 2\n", INVALID, "duplicate key 'tp'"),
    plan_case("nested 100000 deep", "model: " + "[" * 100_000, INVALID, "YAML"),
    plan_case("escape in a key", HEAD + f"{ESC}red: 1\n", INVALID, "control character 0x1b"),
    plan_case("escape in a quoted key", HEAD + '"\\e[31mred": 1\n', INVALID, "unknown key", "?[31mred"),
    plan_case("escape in a value", 'model: Llama-3.1-8B-Instruct\ngpu: "\\e[31mh100"\n', USAGE, "?[31mh100"),
    plan_case("bidi override in a value", 'model: Llama-3.1-8B-Instruct\ngpu: "h100\\u202e"\n', USAGE, "gpu"),
    plan_case("top-level list", "- model: x\n", INVALID, "mapping"),
    plan_case("top-level scalar", "42\n", INVALID, "mapping"),
    plan_case("empty file", "", USAGE, "model", "required"),
    plan_case("only a comment", "# nothing\n", USAGE, "required"),
    plan_case("tenant: a list", HEAD + "tenant: [1, 2]\n", INVALID, "tenant", "mapping", command="size"),
    plan_case(
        "tenant.rps: .nan",
        HEAD + "tenant:\n  rps: .nan\n  prompt_tokens: 1\n  output_tokens: 1\n",
        INVALID,
        "tenant.rps",
        "finite",
        command="size",
    ),
    plan_case(
        "tenant.rps: '5'",
        HEAD + "tenant:\n  rps: '5'\n  prompt_tokens: 1\n  output_tokens: 1\n",
        INVALID,
        "tenant.rps",
        command="size",
    ),
    plan_case(
        "tenant.prompt_tokens: yes",
        HEAD + "tenant:\n  rps: 1\n  prompt_tokens: yes\n  output_tokens: 1\n",
        INVALID,
        "tenant.prompt_tokens",
        command="size",
    ),
    plan_case("tenant: unknown key", TENANT_HEAD + "  burst: 3\n", INVALID, "tenant.burst", command="size"),
    # A tenant section is judged whatever command reads the file (price and kv ignored a negative rps).
    plan_case("tenant: negative rps, for price", TENANT_HEAD.replace("rps: 1", "rps: -1"), INVALID, "tenant.rps"),
    plan_case(
        "tenant: infinite prompt, for kv",
        TENANT_HEAD.replace("prompt_tokens: 100", "prompt_tokens: .inf"),
        INVALID,
        "tenant.prompt_tokens",
        command="kv",
    ),
    plan_case("tenant: only rps, for price", HEAD + "tenant:\n  rps: 2\n", OK),
    plan_case(
        "serve_model with a newline",
        HEAD + 'serve_model: "meta-llama/Llama-3.1-8B-Instruct\\nx: y"\n',
        INVALID,
        "serve_model: must be a hub id or a path: not empty, no control characters",
    ),
    plan_case("larger than 4 MiB", HEAD + "#" * (5 * 2**20) + "\n", INVALID, "MiB"),
    plan_case("valid plan with a BOM", "\ufeff" + HEAD + "batch: 64\n", OK),
    plan_case("anchors and aliases", HEAD + "tp: &n 2\nbatch: *n\n", OK),
    plan_case("alias bomb", HEAD + "a: &a [x, x, x]\nb: &b [*a, *a, *a]\nc: [*b, *b, *b]\n", INVALID, "unknown key"),
    plan_case("merge key into a list", HEAD + "<<: [1, 2]\n", INVALID),
    Case("plan is '-'", ("-",), USAGE, ("no such file",)),
    Case(
        "model beside the plan is a FIFO",
        ("{d}/plan.yaml",),
        USAGE,
        ("regular file",),
        files={"plan.yaml": "model: fifo\ngpu: h100-sxm\n"},
        setup=lambda d: os.mkfifo(d / "fifo"),
    ),
    plan_case("valid tenant plan", TENANT_HEAD, OK, command="size"),
    Case("plan is a FIFO", ("{d}/fifo.yaml",), USAGE, ("regular file",), setup=lambda d: os.mkfifo(d / "fifo.yaml")),
    Case("plan is a directory", ("{d}",), USAGE, ("directory",)),
    Case("plan is /dev/null", ("/dev/null",), USAGE, ("regular file",)),
    Case("plan is missing", ("{d}/nope.yaml",), USAGE, ("nope.yaml", "no such file")),
    Case("plan name too long", ("{d}/" + "p" * 300 + ".yaml",), USAGE, ("too long",)),
    Case(
        "plan is a symlink loop",
        ("{d}/loop.yaml",),
        USAGE,
        ("loop.yaml",),
        setup=lambda d: os.symlink(d / "loop.yaml", d / "loop.yaml"),
    ),
]

# --------------------------------------------------------------------------- model configs

DEEP = '{"model_type": "llama", "x": ' + "[" * 100_000 + "]" * 100_000 + "}"
NESTED_40 = json.dumps(llama(x=json.loads("[" * 40 + "]" * 40)))
CONFIG_CASES = [
    *(
        config_case(f"heads={value!r}"[:40], llama(num_attention_heads=value), INVALID, "num_attention_heads")
        for value in ("32", True, 32.0, -32, 0)
    ),
    config_case("heads=10**400", llama(num_attention_heads=10**400), INVALID, "num_attention_heads", "out of range"),
    config_case("kv heads above heads", llama(num_key_value_heads=64), INVALID, "num_key_value_heads", "more than"),
    config_case("kv heads not dividing", llama(num_key_value_heads=5), INVALID, "num_key_value_heads", "divide"),
    config_case("kv heads 0", llama(num_key_value_heads=0), INVALID, "num_key_value_heads"),
    # More digits than Python converts: one line without Python's own advice (sys.set_int_max_str_digits).
    config_case(
        "hidden 5000 digits",
        json.dumps(llama()).replace('"hidden_size": 4096', '"hidden_size": ' + "9" * 5000),
        INVALID,
        "more than 4,300 digits",
    ),
    # A dtype that is no torch dtype was priced as bf16 without a word; torch's own fp8 names read as no dtype.
    config_case("torch_dtype float7", llama(torch_dtype="float7"), INVALID, "torch_dtype", "must name a torch dtype"),
    config_case("torch_dtype 16", llama(torch_dtype=16), INVALID, "torch_dtype", "got 16"),
    config_case("torch_dtype float8_e4m3fn", llama(torch_dtype="float8_e4m3fn"), OK),
    config_case("kv heads '8'", llama(num_key_value_heads="8"), INVALID, "num_key_value_heads"),
    config_case("layers 10**8", llama(num_hidden_layers=10**8), INVALID, "num_hidden_layers", "10,000"),
    config_case("layers 10001", llama(num_hidden_layers=10_001), INVALID, "num_hidden_layers", "10,000"),
    config_case("layers 0", llama(num_hidden_layers=0), INVALID, "num_hidden_layers"),
    config_case("layers -1", llama(num_hidden_layers=-1), INVALID, "num_hidden_layers"),
    config_case("layers 2.5", llama(num_hidden_layers=2.5), INVALID, "num_hidden_layers"),
    config_case("layers '32'", llama(num_hidden_layers="32"), INVALID, "num_hidden_layers"),
    config_case("hidden 10**30", llama(hidden_size=10**30), INVALID, "hidden_size", "out of range"),
    config_case("hidden NaN", llama(hidden_size=math.nan), INVALID, "hidden_size", "finite"),
    # No reader sizes or times the model with rope_theta: a non-finite one is accepted (as transformers writes
    # Mamba-2's time_step_limit default), a non-finite size is not.
    config_case("rope_theta Infinity", llama(rope_theta=math.inf), OK),
    config_case("intermediate Infinity", llama(intermediate_size=math.inf), INVALID, "intermediate_size"),
    config_case("vocab 0", llama(vocab_size=0), INVALID, "vocab_size"),
    config_case("intermediate -1", llama(intermediate_size=-1), INVALID, "intermediate_size"),
    config_case("head_dim 0", llama(head_dim=0), INVALID),
    config_case("relabelled as mixtral", llama(model_type="mixtral"), INVALID, "model_type", "LlamaForCausalLM"),
    config_case(
        "relabelled, architectures gone",
        llama(model_type="mixtral", drop=("architectures",)),
        INVALID,
        "num_local_experts",
        "missing",
    ),
    config_case(
        "qwen3_moe without experts", llama(model_type="qwen3_moe", drop=("architectures",)), INVALID, "num_experts"
    ),
    config_case("dense llama with experts", llama(num_local_experts=8), INVALID, "num_local_experts", "no experts"),
    config_case("architectures of another family", llama(architectures=["Qwen2ForCausalLM"]), INVALID, "model_type"),
    config_case("model_type 123", llama(model_type=123), INVALID, "model_type"),
    config_case("model_type empty", llama(model_type=""), INVALID, "model_type"),
    config_case("model_type missing", llama(drop=("model_type",)), INVALID, "model_type"),
    config_case("model_type unknown", llama(model_type="frobnicator"), INVALID, "model_type", "frobnicator"),
    config_case("nested 100000 deep", DEEP, INVALID, "nested"),
    config_case("nested 40 deep", NESTED_40, INVALID, "nested more than 32"),
    config_case("larger than 4 MiB", json.dumps(llama(padding="x" * (5 * 2**20))), INVALID, "MiB"),
    config_case("a JSON list", "[1, 2]", INVALID, "not a JSON object"),
    config_case(
        "duplicate key",
        json.dumps(llama())[:-1] + ', "num_hidden_layers": 3}',
        INVALID,
        "duplicate key 'num_hidden_layers'",
    ),
    config_case("empty file", "", INVALID, "malformed config JSON"),
    config_case("non-UTF-8", b'{"model_type": "ll\xe9ma"}', INVALID, "malformed"),
    config_case("trailing comma", '{"model_type": "llama",}', INVALID, "malformed", "line 1"),
    config_case("layer_types 20000", llama(layer_types=["full_attention"] * 20_000), INVALID, "layer_types", "10,000"),
    config_case("layer_types wrong length", llama(layer_types=["full_attention"] * 3), INVALID, "layer_types"),
    config_case("layer_types unknown", llama(layer_types=["warp_attention"] * 32), INVALID, "layer_types"),
    config_case("sliding_window 'abc'", llama(sliding_window="abc"), INVALID),
    config_case("max_position_embeddings 'x'", llama(max_position_embeddings="x"), INVALID),
    config_case("escape in model_type", llama(model_type=f"{ESC}llama"), INVALID, "model_type"),
    # quantization_config: malformed shapes and values are named, never ZeroDivision/Index/Type errors.
    config_case("quantization a string", llama(quantization_config="gptq"), INVALID, "quantization_config", "object"),
    config_case("quantization a list", llama(quantization_config=[]), INVALID, "quantization_config", "object"),
    config_case("quant_method 5", quant(quant_method=5), INVALID, "quant_method"),
    config_case("quant_method unknown", quant(quant_method="zip"), INVALID, "quant_method", "'zip'"),
    config_case("gptq group_size 0", quant(quant_method="gptq", bits=4, group_size=0), INVALID, "group_size"),
    config_case("gptq group_size -2", quant(quant_method="gptq", bits=4, group_size=-2), INVALID, "group_size"),
    config_case("gptq group_size '128'", quant(quant_method="gptq", bits=4, group_size="128"), INVALID, "group_size"),
    config_case("gptq group_size 1.5", quant(quant_method="gptq", bits=4, group_size=1.5), INVALID, "group_size"),
    config_case("gptq bits 3", quant(quant_method="gptq", bits=3, group_size=128), INVALID, "bits"),
    config_case("gptq bits true", quant(quant_method="gptq", bits=True, group_size=128), INVALID, "bits"),
    config_case("awq bits '4'", quant(quant_method="awq", bits="4"), INVALID, "bits"),
    config_case(
        "fp8 block [0, 128]", quant(quant_method="fp8", weight_block_size=[0, 128]), INVALID, "weight_block_size"
    ),
    config_case("fp8 block 5", quant(quant_method="fp8", weight_block_size=5), INVALID, "weight_block_size"),
    config_case("fp8 block [128]", quant(quant_method="fp8", weight_block_size=[128]), INVALID, "weight_block_size"),
    config_case(
        "fp8 block strings", quant(quant_method="fp8", weight_block_size=["a", "b"]), INVALID, "weight_block_size"
    ),
    config_case(
        "compressed-tensors groups a list",
        quant(quant_method="compressed-tensors", config_groups=[1]),
        INVALID,
        "config_groups",
    ),
    config_case(
        "compressed-tensors group 5",
        quant(quant_method="compressed-tensors", config_groups={"g": 5}),
        INVALID,
        "config_groups.g",
    ),
    config_case(
        "compressed-tensors weights a list",
        quant(quant_method="compressed-tensors", config_groups={"g": {"weights": [4]}}),
        INVALID,
        "config_groups.g.weights",
    ),
    config_case(
        "modules_to_not_convert a string",
        quant(quant_method="awq", modules_to_not_convert="lm_head"),
        INVALID,
        "modules_to_not_convert",
    ),
    config_case("gptq per-channel (group_size -1)", quant(quant_method="gptq", bits=4, group_size=-1), OK),
    config_case("gptq int8 per-channel", quant(quant_method="gptq", bits=8, group_size=-1), OK),
    config_case("awq int4", quant(quant_method="awq", bits=4, group_size=128), OK),
    config_case("fp8 128x128 blocks", quant(quant_method="fp8", weight_block_size=[128, 128]), OK),
    # Experts against top-k.
    config_case(
        "top_k above experts",
        mixtral(num_experts_per_tok=9),
        INVALID,
        "num_experts_per_tok",
        "only 8",
        args=("--tp", "2"),
    ),
    config_case("top_k 0", mixtral(num_experts_per_tok=0), INVALID, "num_experts_per_tok", args=("--tp", "2")),
    config_case("experts 0", mixtral(num_local_experts=0), INVALID, "num_local_experts", args=("--tp", "2")),
    config_case("experts 100000", mixtral(num_local_experts=100_000), INVALID, "experts", args=("--tp", "2")),
    config_case("shipped llama copied", llama(), OK),
    # Not a regular file, or no file at all.
    Case(
        "config.json is a FIFO",
        ("--model", "{d}/m", "--gpu", "h100-sxm"),
        USAGE,
        ("regular file",),
        setup=lambda d: (d.joinpath("m").mkdir(), os.mkfifo(d / "m" / "config.json")),
    ),
    Case(
        "--model is a FIFO",
        ("--model", "{d}/fifo", "--gpu", "h100-sxm"),
        USAGE,
        ("regular file",),
        setup=lambda d: os.mkfifo(d / "fifo"),
    ),
    Case(
        "config.json is a directory",
        ("--model", "{d}/m", "--gpu", "h100-sxm"),
        USAGE,  # a folder with no config.json file: the path given cannot be used, as a missing one
        ("config.json",),
        setup=lambda d: d.joinpath("m", "config.json").mkdir(parents=True),
    ),
    Case(
        "config.json is a symlink loop",
        ("--model", "{d}/loop.json", "--gpu", "h100-sxm"),
        USAGE,
        ("loop.json",),
        setup=lambda d: os.symlink(d / "loop.json", d / "loop.json"),
    ),
]

CONFIG_CASES += [
    # transformers' type complaints, in JSON's words with a fix (Python's <class 'int'> and NoneType before).
    config_case(
        "n_group a string (DeepSeek-V3)",
        variant("DeepSeek-V3", n_group="x"),
        INVALID,
        "n_group: transformers rejects the config: must be a whole number or null, got 'x' (correct that key",
        args=("--tp", "8", "--gpu", "h200"),
    ),
]
CASES = FLAG_CASES + PLAN_CASES + CONFIG_CASES


def _write(directory: Path, files: dict[str, Any]) -> None:
    for relative, content in files.items():
        path = directory / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        elif isinstance(content, str):
            path.write_text(content, encoding="utf-8")
        else:
            path.write_text(json.dumps(content), encoding="utf-8")  # NaN and Infinity as JSON5-ish tokens


def assert_error(code: int, out: str, err: str, want: int, needles: tuple[str, ...] = ()) -> str:
    """Exit ``want``, nothing on stdout, one clean line on stderr; returns the line."""
    assert code == want, f"exit {code}, want {want}: stdout={out[:300]!r} stderr={err[:300]!r}"
    assert out == "", f"stdout on error: {out[:300]!r}"
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, f"want one line on stderr, got {len(lines)}: {err[:600]!r}"
    line = lines[0]
    assert line.startswith("quotacalc: error: "), line
    assert "internal error" not in line and "Traceback" not in err
    assert not any(ord(char) < 32 or 0x7F <= ord(char) < 0xA0 for char in line), f"control character: {line!r}"
    for needle in needles:
        assert needle in line, f"{needle!r} not in {line!r}"
    return line


def _numbers(node: Any, key: str = ""):
    if isinstance(node, dict):
        for child, value in node.items():
            yield from _numbers(value, child)
    elif isinstance(node, list):
        for value in node:
            yield from _numbers(value, key)
    elif isinstance(node, (int, float)) and not isinstance(node, bool):
        yield key, node


def assert_valid_result(code: int, out: str, err: str) -> dict:
    """Exit 0, strict JSON (no NaN or Infinity), no negative bytes or parameters, only warnings on stderr."""
    assert code == 0, f"exit {code}: {err[:400]!r}"

    def refuse(constant: str) -> None:
        raise AssertionError(f"non-strict JSON token {constant}")

    document = json.loads(out, parse_constant=refuse)
    assert document["command"] and isinstance(document["schema_version"], int)
    for key, value in _numbers(document):
        assert math.isfinite(value), key
        if "bytes" in key or "params" in key:
            assert value >= 0, (key, value)
    assert all(line.startswith("quotacalc: warning: ") for line in err.splitlines() if line.strip()), err
    return document


@pytest.mark.parametrize("case", CASES, ids=[case.id for case in CASES])
def test_hostile_input(run_cli, tmp_path, case: Case):
    _write(tmp_path, case.files)
    if case.setup:
        case.setup(tmp_path)
    args = [arg.replace("{d}", str(tmp_path)) for arg in case.args]
    result = run_cli(case.command, *args)
    if case.want == OK:
        assert_valid_result(*result)
    else:
        assert_error(*result, case.want, case.needles)


def test_there_are_at_least_150_cases():
    assert len(CASES) + len(CACHE_CORRUPTIONS) + len(ENVIRONMENTS) >= 150


def test_gptq_per_channel_scales_cost_bytes(run_cli, tmp_path):
    # group_size -1: one fp16 scale and one 4-bit zero per output row of hidden_size (4096) inputs,
    # so (2 + 0.5) / 4096 bytes on each quantized weight, on top of its 0.5 bytes.
    _write(tmp_path, {"m/config.json": quant(quant_method="gptq", bits=4, group_size=-1)})
    document = assert_valid_result(*run_cli("price", "--model", str(tmp_path / "m"), "--gpu", "h100-sxm", "--json"))
    groups = document["inputs"]["weights"]["groups"]
    assert groups["attention"]["bytes_per_param"] == pytest.approx(0.5 + 2.5 / 4096, rel=1e-12)
    assert groups["embedding"]["bytes_per_param"] == 2  # kept in the checkpoint dtype
    assert document["results"]["weight_bytes"] > 0


# --------------------------------------------------------------------------- cache entries


def _corrupt_all(cache: Path, writer: Callable[[Path], None]) -> int:
    entries = [path for path in cache.rglob("*.json") if path.is_file()]
    for path in entries:
        path.unlink()
        writer(path)
    return len(entries)


def _digest_ok(body: str) -> bytes:
    import hashlib

    return hashlib.sha256(body.encode()).hexdigest().encode() + b"\n" + body.encode()


CACHE_CORRUPTIONS: dict[str, Callable[[Path], None]] = {
    "garbage bytes": lambda p: p.write_bytes(b"\x00\xff garbage"),
    "empty": lambda p: p.write_bytes(b""),
    "truncated": lambda p: p.write_bytes(b'0123\n{"config_class": "Lla'),
    "old format (no digest)": lambda p: p.write_text('{"config_class": "LlamaConfig"}'),
    "wrong digest": lambda p: p.write_bytes(b"0" * 64 + b'\n{"config": {}}'),
    "digest ok, a list": lambda p: p.write_bytes(_digest_ok("[1, 2, 3]")),
    "digest ok, wrong shape": lambda p: p.write_bytes(_digest_ok('{"config": "not a dict", "x": 1}')),
    "digest ok, NaN": lambda p: p.write_bytes(_digest_ok('{"config": NaN}')),
    "a directory": lambda p: p.mkdir(),
    "a FIFO": lambda p: os.mkfifo(p),
    "huge (sparse)": lambda p: p.open("wb").truncate(64 * 2**20),
    "non-UTF-8": lambda p: p.write_bytes(_digest_ok("{}")[:-2] + b"\xe9}"),
}


@pytest.mark.parametrize("corruption", list(CACHE_CORRUPTIONS), ids=list(CACHE_CORRUPTIONS))
def test_corrupted_cache_entries_are_ignored(run_cli, tmp_path, monkeypatch, corruption):
    monkeypatch.setenv("QUOTACALC_CACHE_DIR", str(tmp_path / "cache"))
    _write(tmp_path, {"m/config.json": llama()})
    args = ("price", "--model", str(tmp_path / "m"), "--gpu", "h100-sxm", "--json")
    cold = assert_valid_result(*run_cli(*args))
    # The catalogs are memoised in-process; the config entry is what a warm call reads.
    assert _corrupt_all(tmp_path / "cache", CACHE_CORRUPTIONS[corruption]) >= 1
    warm = assert_valid_result(*run_cli(*args))
    assert warm["results"] == cold["results"]


def test_cache_dir_that_is_a_file(run_cli, tmp_path, monkeypatch):
    (tmp_path / "cache").write_text("not a directory")
    monkeypatch.setenv("QUOTACALC_CACHE_DIR", str(tmp_path / "cache"))
    assert_valid_result(*run_cli("price", *L, "--json"))


# --------------------------------------------------------------------------- the environment (subprocesses)


def _run(
    args: list[str], env: dict[str, str] | None = None, unset: tuple[str, ...] = (), cwd: Path | None = None
) -> subprocess.CompletedProcess:
    drop = ("PYTHONIOENCODING", "COLUMNS", *unset)
    base = {key: value for key, value in os.environ.items() if key not in drop}
    return subprocess.run(
        [sys.executable, "-c", "from quotacalc.cli.entry import main; main()", *args],
        env={**base, **(env or {})},
        capture_output=True,
        timeout=60,
        cwd=cwd,
    )


#: name: (variables set, variables unset, arguments, exit code)
ENVIRONMENTS: dict[str, tuple[dict[str, str], tuple[str, ...], tuple[str, ...], int]] = {
    "ascii table": ({"PYTHONIOENCODING": "ascii"}, (), ("price", *L), 0),
    "ascii explain": ({"PYTHONIOENCODING": "ascii"}, (), ("price", *MIX, "--expert-parallel", "--explain"), 0),
    "ascii error with µ": ({"PYTHONIOENCODING": "ascii"}, (), ("price", *L[:2], "--gpu", "h100µ"), 2),
    "ascii help": ({"PYTHONIOENCODING": "ascii"}, (), ("size", "--help"), 0),
    "latin-1 table": ({"PYTHONIOENCODING": "latin-1"}, (), ("price", *L), 0),
    "C locale": ({"LC_ALL": "C", "LANG": "C"}, (), ("price", *L), 0),
    "COLUMNS=0": ({"COLUMNS": "0"}, (), ("price", *L), 0),
    "COLUMNS=-5": ({"COLUMNS": "-5"}, (), ("price", *L, "--explain"), 0),
    "COLUMNS=abc": ({"COLUMNS": "abc"}, (), ("gpus",), 0),
    "TERM=dumb NO_COLOR=1": ({"TERM": "dumb", "NO_COLOR": "1"}, (), ("price", *L), 0),
    # HOME empty: the cache is off (never ./.cache in the working directory).
    "HOME empty": ({"HOME": "", "XDG_CACHE_HOME": "relative"}, ("QUOTACALC_CACHE_DIR",), ("gpus", "--json"), 0),
    "cache dir under /dev/null": ({"QUOTACALC_CACHE_DIR": "/dev/null/x"}, (), ("gpus", "--json"), 0),
    "HF_HUB_OFFLINE hub id": (
        {"HF_HUB_OFFLINE": "1"},
        (),
        ("price", "--model", "someorg/none", "--gpu", "h100-sxm"),
        1,
    ),
}


@pytest.mark.parametrize("name", list(ENVIRONMENTS), ids=list(ENVIRONMENTS))
def test_environment(name, run_cli, tmp_path):
    # The session's cache dir (conftest), warmed in-process, so each subprocess skips transformers' import.
    run_cli("price", *MIX, "--json")
    variables, unset, args, want = ENVIRONMENTS[name]
    proc = _run(list(args), variables, unset, cwd=tmp_path)
    assert not (tmp_path / ".cache").exists() and not (tmp_path / "relative").exists()
    err = proc.stderr.decode("utf-8", "replace")
    assert proc.returncode == want, err[:400]
    assert "Traceback" not in err and "internal error" not in err
    if variables.get("PYTHONIOENCODING") == "ascii":
        proc.stdout.decode("ascii")  # every byte ASCII: no UnicodeEncodeError, no mojibake
        proc.stderr.decode("ascii")
    if want:
        assert len([line for line in err.splitlines() if line.strip()]) == 1, err
    elif "--json" in args:
        assert_valid_result(0, proc.stdout.decode(), err)
    else:
        assert proc.stdout.strip()


def test_ascii_output_keeps_the_figures():
    proc = _run(["price", *L], {"PYTHONIOENCODING": "ascii", "COLUMNS": "200"})
    out = proc.stdout.decode("ascii")
    assert "1x h100-sxm" in out  # × as x
    assert " us " in out or "us |" in out or " us" in out  # µs as us
    assert "8,030,261,248" in out


#: Signals once the interpreter is up and the package's (light) __init__ imported, so the test interrupts
#: quotacalc itself, not Python's own start-up (where any program dies with a traceback).
_READY_THEN_RUN = (
    "import sys, quotacalc.cli; sys.stderr.write('ready\\n'); sys.stderr.flush(); "
    "from quotacalc.cli.entry import main; main()"
)


@pytest.mark.parametrize("delay_s", [0.05, 0.5], ids=["while importing", "while running"])
def test_ctrl_c_exits_130(tmp_path, delay_s):
    # A cold start (fresh cache dir, a config transformers must read) takes over a second: long enough
    # to interrupt while the CLI imports its libraries, and while it reads the config.
    _write(tmp_path, {"m/config.json": llama()})
    env = {**os.environ, "QUOTACALC_CACHE_DIR": str(tmp_path / "cache")}
    args = ["price", "--model", str(tmp_path / "m"), "--gpu", "h100-sxm"]
    process = subprocess.Popen(
        [sys.executable, "-c", _READY_THEN_RUN, *args], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    assert process.stderr.readline() == b"ready\n"
    time.sleep(delay_s)
    process.send_signal(signal.SIGINT)
    _, err = process.communicate(timeout=60)
    assert process.returncode == 130, err[-400:]
    assert err.decode().strip().splitlines() == ["quotacalc: interrupted"]


#: A Ctrl-C whose KeyboardInterrupt Python drops: raised inside a weakref callback (as the import system's
#: module-lock cleanup runs one), which CPython reports as "Exception ignored in ..." and does not propagate.
_INTERRUPT_DROPPED = (
    "import weakref, quotacalc.cli.app as app, quotacalc.cli.entry as entry\n"
    "class Lock: pass\n"
    "def command():\n"
    "    lock = Lock()\n"
    "    ref = weakref.ref(lock, lambda _: entry._on_interrupt(2, None))\n"
    "    del lock\n"
    "    print('the command ran on')\n"
    "app.main = command\n"
    "entry.main()\n"
)


def test_ctrl_c_that_python_drops_still_exits_130():
    """The interrupt the CI run once lost: Ctrl-C landing in a callback Python cannot raise from. The command runs
    on (nothing can stop it there), then the CLI exits 130 with its one line, and Python's own report of the
    dropped exception is not printed."""
    process = subprocess.run([sys.executable, "-c", _INTERRUPT_DROPPED], capture_output=True, timeout=60)
    assert process.returncode == 130, process.stderr[-400:]
    assert process.stderr.decode().strip().splitlines() == ["quotacalc: interrupted"]
    assert process.stdout.decode() == "the command ran on\n"


_INTERRUPT_WRAPPED = (
    "import quotacalc.cli.app as app, quotacalc.cli.entry as entry\n"
    "class Field:\n"
    "    def __set_name__(self, owner, name):\n"
    "        entry._on_interrupt(2, None)\n"
    "def command(*args, **kwargs):\n"
    "    class Explainer:\n"
    "        ledger = Field()\n"
    "app.app = command\n"
    "entry.main()\n"
)


def test_ctrl_c_that_python_wraps_still_exits_130():
    """Another interrupt a CI run once misreported: Ctrl-C landing in a class body's __set_name__, which Python 3.11
    wraps in a RuntimeError ('Error calling __set_name__ ...'; 3.12 lets it through): the CLI reports the interrupt,
    in one line, not an internal error."""
    process = subprocess.run([sys.executable, "-c", _INTERRUPT_WRAPPED], capture_output=True, timeout=60)
    assert process.returncode == 130, process.stderr[-400:]
    assert process.stderr.decode().strip().splitlines() == ["quotacalc: interrupted"]


_INTERRUPT_WRAPPED_WHILE_IMPORTING = (
    "import sys, types, quotacalc.cli.entry as entry\n"
    "class Field:\n"
    "    def __set_name__(self, owner, name):\n"
    "        entry._on_interrupt(2, None)\n"
    "class Finder:\n"
    "    def find_spec(self, name, path=None, target=None):\n"
    "        if name != 'quotacalc.cli.app':\n"
    "            return None\n"
    "        class Explainer:\n"
    "            ledger = Field()\n"
    "sys.modules.pop('quotacalc.cli.app', None)\n"
    "sys.meta_path.insert(0, Finder())\n"
    "entry.main()\n"
)


def test_ctrl_c_that_python_wraps_while_importing_still_exits_130():
    """The same while the CLI's own modules import (no handler of theirs in place yet): one line, exit 130, no
    traceback."""
    process = subprocess.run(
        [sys.executable, "-c", _INTERRUPT_WRAPPED_WHILE_IMPORTING], capture_output=True, timeout=60
    )
    assert process.returncode == 130, process.stderr[-400:]
    assert process.stderr.decode().strip().splitlines() == ["quotacalc: interrupted"]


def test_bare_command_prints_the_help_not_an_error(run_cli):
    code, out, err = run_cli()
    assert code == USAGE and err == ""
    assert out.startswith("Usage: ") and "Commands:" in out


@pytest.mark.parametrize(
    "args",
    [
        ("check", "examples/platform.yaml", "--salt-secret-file", "a\x00b"),
        ("calibrate", "--model", "Llama-3.1-8B-Instruct", "--gpu", "h100-sxm", "--log", "x\x00.log"),
        ("calibrate", "--model", "Llama-3.1-8B-Instruct", "--gpu", "h100-sxm", "--bench", "x\x00.csv"),
        ("simulate", "s\x00.yaml"),
        ("price", "p\x00.yaml"),
    ],
    ids=["secret", "log", "bench", "scenario", "plan"],
)
def test_a_path_with_a_nul_byte_is_a_usage_error(run_cli, args):
    # No file has such a name; os.open raised ValueError, which reached the user as an internal error.
    code, out, err = run_cli(*args)
    assert code == 2 and out == "" and err.count("\n") == 1, err
    assert "is not a file name (it holds a NUL byte)" in err, err


@pytest.mark.parametrize(
    "command", [("simulate", "/dev/zero"), ("check", "examples/platform.yaml", "--salt-secret-file", "/dev/zero")]
)
def test_a_device_is_refused_not_read_until_memory_runs_out(run_cli, command):
    code, out, err = run_cli(*command)
    assert code == 2 and out == "" and "is not a regular file (a FIFO, device or socket)" in err, err


def test_every_non_ascii_character_quotacalc_prints_has_an_ascii_stand_in():
    """No operator turns into '?' on an ASCII terminal: every non-ASCII character in the package's code (its
    tables, formulas and messages; comments aside) has a stand-in in cli/streams.py's map."""
    from pathlib import Path

    from quotacalc.cli.streams import _ASCII

    package = Path(__file__).resolve().parent.parent / "quotacalc"
    printed = {
        char
        for path in package.rglob("*.py")
        for line in path.read_text(encoding="utf-8").splitlines()
        if not line.strip().startswith("#")
        for char in line
        if ord(char) > 127
    }
    assert printed - set(_ASCII) == set()


def test_an_ascii_explain_keeps_its_minus_signs():
    """The engine-memory step subtracts (0.9 × memory − weights − reserve): on an ASCII terminal the minus is '-',
    not '?'."""
    proc = _run(["price", *L, "--explain"], {"PYTHONIOENCODING": "ascii", "COLUMNS": "200"})
    out = proc.stdout.decode("ascii")
    assert "?" not in out
    assert " - " in out
