"""Kernel-level decode and prefill times of a Llama-3.1-8B-shaped decoder on one GPU (needs CUDA and torch).

Not part of the test suite and never run in CI: it measures, on a real GPU, what quotacalc's roofline
assumes: how close a memory-bound decode step (every weight read once, plus each sequence's KV) comes
to the HBM bandwidth, and how close a prefill comes to the matrix peak. Random bf16 weights with the
model's exact shapes; decode steps are captured in CUDA graphs (as engines do), so launch gaps are
gone and what remains is the kernels. There is no scheduler, sampler or tokenizer here: an engine's
per-step overhead comes on top of these times.

    python bench/gpu_decode.py --out measurements.json

Writes every timing with the bytes and FLOPs it moved, the device, and torch's version.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys

# Llama-3.1-8B (models/Llama-3.1-8B-Instruct/config.json).
HIDDEN, INTERMEDIATE, LAYERS, HEADS, KV_HEADS, HEAD_DIM, VOCAB = 4096, 14336, 32, 32, 8, 128, 128256


def main() -> None:
    import torch
    import torch.nn.functional as F

    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--prefill-only", action="store_true")
    args = parser.parse_args()
    device = torch.device("cuda")
    dtype = torch.bfloat16
    torch.manual_seed(0)
    record: dict = {
        "device": torch.cuda.get_device_name(0),
        "torch": torch.__version__,
        "model_shape": "Llama-3.1-8B",
        "dtype": "bfloat16",
        "decode": [],
        "prefill": [],
    }

    def timed(fn, repeats: int = args.repeats) -> float:
        for _ in range(3):
            fn()
        torch.cuda.synchronize()
        times = []
        for _ in range(repeats):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) / 1e3)
        return statistics.median(times)

    # Ceilings: a large device-to-device copy (bytes read + written) and a large bf16 matrix product.
    def ceilings() -> tuple[float, float]:
        source = torch.randn(2 * 1024**3 // 2, dtype=dtype, device=device)
        target = torch.empty_like(source)
        copy_s = timed(lambda: target.copy_(source))
        a = torch.randn(8192, 8192, dtype=dtype, device=device)
        b = torch.randn(8192, 8192, dtype=dtype, device=device)
        matmul_s = timed(lambda: a @ b)
        return 2 * source.numel() * 2 / copy_s, 2 * 8192**3 / matmul_s

    record["copy_bytes_per_s"], record["matmul_flops_per_s"] = ceilings()
    torch.cuda.empty_cache()

    def weight(rows: int, cols: int):
        return (torch.randn(rows, cols, dtype=dtype, device=device) * 0.02).contiguous()

    layers = [
        {
            "qkv": weight(HIDDEN, (HEADS + 2 * KV_HEADS) * HEAD_DIM),
            "o": weight(HEADS * HEAD_DIM, HIDDEN),
            "gate_up": weight(HIDDEN, 2 * INTERMEDIATE),
            "down": weight(INTERMEDIATE, HIDDEN),
            "norm1": torch.ones(HIDDEN, dtype=dtype, device=device),
            "norm2": torch.ones(HIDDEN, dtype=dtype, device=device),
        }
        for _ in range(LAYERS)
    ]
    lm_head = weight(HIDDEN, VOCAB)
    layer_weight_bytes = sum(t.numel() * t.element_size() for layer in layers for t in layer.values())
    lm_head_bytes = lm_head.numel() * lm_head.element_size()
    record["weight_bytes_read_per_step"] = layer_weight_bytes + lm_head_bytes
    record["params_per_token"] = sum(t.numel() for layer in layers for t in layer.values()) + lm_head.numel()

    def rms(x, w):
        return F.rms_norm(x, (HIDDEN,), w, 1e-5)

    batches = [] if args.prefill_only else [1, 8, 32, 64, 128]
    contexts = [] if args.prefill_only else [1024, 4096]
    max_batch, max_context = max(batches, default=0), max(contexts, default=0)
    # One KV buffer per layer, sliced per case: [2, batch, kv_heads, context, head_dim].
    kv = [torch.randn(2, max_batch, KV_HEADS, max_context, HEAD_DIM, dtype=dtype, device=device) for _ in range(LAYERS)]
    kv_bytes_per_token = LAYERS * 2 * KV_HEADS * HEAD_DIM * 2

    def decode_step(x, batch: int, context: int):
        group = HEADS // KV_HEADS
        for layer, cache in zip(layers, kv, strict=True):
            h = rms(x, layer["norm1"])
            qkv = h @ layer["qkv"]
            q = qkv[:, : HEADS * HEAD_DIM].view(batch, KV_HEADS, group, HEAD_DIM)
            k, v = cache[0, :batch, :, :context], cache[1, :batch, :, :context]
            # GQA decode as a length-`group` query per KV head: one flash call, no KV copies.
            attn = F.scaled_dot_product_attention(q, k, v).reshape(batch, HEADS * HEAD_DIM)
            x = x + attn @ layer["o"]
            h = rms(x, layer["norm2"])
            gate, up = (h @ layer["gate_up"]).chunk(2, dim=-1)
            x = x + (F.silu(gate) * up) @ layer["down"]
        return x @ lm_head

    for context in contexts:
        for batch in batches:
            x = torch.randn(batch, HIDDEN, dtype=dtype, device=device)
            stream = torch.cuda.Stream()
            stream.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(stream):
                for _ in range(2):
                    decode_step(x, batch, context)
            torch.cuda.current_stream().wait_stream(stream)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                decode_step(x, batch, context)
            step_s = timed(graph.replay)
            eager_s = timed(lambda x=x, b=batch, c=context: decode_step(x, b, c), repeats=5)
            record["decode"].append(
                {
                    "batch": batch,
                    "context": context,
                    "step_s": step_s,
                    "eager_step_s": eager_s,
                    "kv_bytes_read": batch * context * kv_bytes_per_token,
                }
            )
            del graph
            print(f"decode batch {batch:4d} context {context:5d}: {step_s * 1e3:8.3f} ms (eager {eager_s * 1e3:.3f})")
    kv.clear()
    torch.cuda.empty_cache()

    def prefill(x, tokens: int):
        for layer in layers:
            h = rms(x, layer["norm1"])
            qkv = (h @ layer["qkv"]).view(1, tokens, HEADS + 2 * KV_HEADS, HEAD_DIM).transpose(1, 2)
            q, k, v = qkv.split([HEADS, KV_HEADS, KV_HEADS], dim=1)
            # 4-D (batch, heads, tokens, head_dim) with GQA, so the flash kernel runs, not the math fallback.
            attn = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
            x = x + attn.transpose(1, 2).reshape(tokens, HEADS * HEAD_DIM) @ layer["o"]
            h = rms(x, layer["norm2"])
            gate, up = (h @ layer["gate_up"]).chunk(2, dim=-1)
            x = x + (F.silu(gate) * up) @ layer["down"]
        return x[-1:] @ lm_head

    for tokens in [128, 512, 1024, 2048, 4096, 8192, 16384]:
        x = torch.randn(tokens, HIDDEN, dtype=dtype, device=device)
        prefill_s = timed(lambda x=x, t=tokens: prefill(x, t), repeats=10)
        record["prefill"].append({"tokens": tokens, "prefill_s": prefill_s})
        print(f"prefill {tokens:6d} tokens: {prefill_s * 1e3:8.3f} ms")

    with open(args.out, "w") as handle:
        json.dump(record, handle, indent=1)
    print(json.dumps({k: v for k, v in record.items() if k not in ("decode", "prefill")}))


if __name__ == "__main__":
    sys.exit(main())
