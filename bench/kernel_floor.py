"""A decode step's kernel floor on the GPU at hand: what plain kernels reach with no engine around them.

Run on a machine with a CUDA GPU and PyTorch (not part of the test suite; quotacalc itself needs neither):

    python bench/kernel_floor.py --out bench/data/kernel_floor_h200.json

It builds Llama-shaped decoders with random bf16 weights (Llama 3.1 8B whole; Llama 3.3 70B as one rank of
TP 2, 4 and 8 holds it, without the all-reduces), captures one decode step in a CUDA graph (cuBLAS GEMMs,
PyTorch's fused RMSNorm, SiLU x up, and scaled-dot-product attention over a KV cache, the query heads of one
KV head folded into the query length as flash-decoding kernels do) and replays it: the time a step's kernels
take with no scheduler, sampler or Python between them. It also times each weight matrix alone at small
batches (cycling over enough copies that none stays in the 60 MB L2 cache) and a plain read and copy of
8 GiB. Every figure is the median of timed replays after warm-ups, with the bytes the step must read, so a
bandwidth can be checked by hand. ``bench/kernel_floor_compare.py`` sets these beside quotacalc's roofline.
"""

from __future__ import annotations

import argparse
import functools
import json
import statistics
import time

import torch
import torch.nn.functional as F

BF16_BYTES = 2
DEVICE = "cuda"
HEAD_DIM = 128

# Llama 3.1 8B and Llama 3.3 70B (models/*/config.json).
MODELS = {
    "llama-3.1-8b": dict(hidden=4096, heads=32, kv_heads=8, ffn=14336, layers=32, vocab=128256),
    "llama-3.3-70b": dict(hidden=8192, heads=64, kv_heads=8, ffn=28672, layers=80, vocab=128256),
}

# (model, tp, weight dtype, batches, contexts): what fits one 141 GB GPU with the KV cache of batch x context.
STEPS = [
    ("llama-3.1-8b", 1, "bf16", (1, 8, 32, 64, 128), (1024,)),
    ("llama-3.1-8b", 1, "bf16", (1, 8, 32, 64), (8192,)),
    ("llama-3.3-70b", 2, "bf16", (1, 8, 32, 64), (1024,)),
    ("llama-3.3-70b", 2, "bf16", (1,), (8192,)),
    ("llama-3.3-70b", 4, "bf16", (1, 8, 32, 64), (1024,)),
    ("llama-3.3-70b", 8, "bf16", (1, 8, 32, 64), (1024,)),
    ("llama-3.1-8b", 1, "fp8", (1, 8, 32, 64), (1024,)),
    ("llama-3.3-70b", 1, "fp8", (1, 8), (1024,)),
    ("llama-3.3-70b", 2, "fp8", (1, 8, 32, 64), (1024,)),
    ("llama-3.3-70b", 4, "fp8", (1, 8, 32, 64), (1024,)),
    ("llama-3.3-70b", 8, "fp8", (1, 8, 32, 64), (1024,)),
]


ONE = None  # a float32 scale of 1 on the device, made once
PAD_ROWS = None  # rows an FP8 GEMM needs a multiple of, found at the first call


def to_weight(matrix: torch.Tensor, weight_dtype: str) -> torch.Tensor:
    """A (in, out) bf16 matrix as a step multiplies it: as is, or FP8 E4M3 stored (out, in) and passed
    transposed, the column-major layout cuBLASLt's FP8 GEMM takes (a per-tensor scale of 1)."""
    if weight_dtype == "bf16":
        return matrix
    return matrix.t().contiguous().to(torch.float8_e4m3fn).t()


def matmul(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """x @ weight; for FP8 weights x is quantized to FP8 first (one more kernel, as W8A8 engines run it)."""
    if weight.dtype == torch.bfloat16:
        return x @ weight
    global ONE, PAD_ROWS
    if ONE is None:
        ONE = torch.ones((), device=DEVICE, dtype=torch.float32)
    rows = x.shape[0]
    if PAD_ROWS is None:
        try:
            torch._scaled_mm(x.to(torch.float8_e4m3fn), weight, scale_a=ONE, scale_b=ONE, out_dtype=torch.bfloat16)
            PAD_ROWS = 1
        except RuntimeError:
            PAD_ROWS = 16  # older cuBLASLt wants rows in multiples of 16, as engines pad them
    if rows % PAD_ROWS:
        x = F.pad(x, (0, 0, 0, PAD_ROWS - rows % PAD_ROWS))
    product = torch._scaled_mm(x.to(torch.float8_e4m3fn), weight, scale_a=ONE, scale_b=ONE, out_dtype=torch.bfloat16)
    return product[:rows]


def rank_shapes(model: dict, tp: int) -> dict:
    """One TP rank's share: heads, KV heads, FFN width and LM head rows split over TP."""
    return dict(
        hidden=model["hidden"],
        heads=model["heads"] // tp,
        kv_heads=max(1, model["kv_heads"] // tp),
        ffn=model["ffn"] // tp,
        layers=model["layers"],
        vocab=model["vocab"] // tp,
    )


def layer_matrices(shape: dict) -> dict[str, tuple[int, int]]:
    """(in, out) of each weight matrix of one layer."""
    qkv = (shape["heads"] + 2 * shape["kv_heads"]) * HEAD_DIM
    return {
        "qkv": (shape["hidden"], qkv),
        "o": (shape["heads"] * HEAD_DIM, shape["hidden"]),
        "gate_up": (shape["hidden"], 2 * shape["ffn"]),
        "down": (shape["ffn"], shape["hidden"]),
    }


def timed_graph_ms(run, warmups: int = 5, replays: int = 30) -> float:
    """Median milliseconds of one replay of ``run`` captured in a CUDA graph."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(3):
            run()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        run()
    for _ in range(warmups):
        graph.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(replays):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    del graph
    return statistics.median(times)


class Decoder:
    """Random bf16 weights of one rank and a KV cache; ``step`` is one decode step of ``batch`` tokens."""

    def __init__(self, shape: dict, batch: int, context: int, weight_dtype: str = "bf16"):
        self.shape, self.batch, self.context, self.weight_dtype = shape, batch, context, weight_dtype
        device, dtype = DEVICE, torch.bfloat16
        mats = layer_matrices(shape)
        self.layers = []
        for _ in range(shape["layers"]):
            layer = {
                name: to_weight(torch.randn(n_in, n_out, device=device, dtype=dtype) * 0.02, weight_dtype)
                for name, (n_in, n_out) in mats.items()
            }
            layer["norm1"] = torch.ones(shape["hidden"], device=device, dtype=dtype)
            layer["norm2"] = torch.ones(shape["hidden"], device=device, dtype=dtype)
            cache = (batch, shape["kv_heads"], context, HEAD_DIM)
            layer["k"] = torch.randn(cache, device=device, dtype=dtype)
            layer["v"] = torch.randn(cache, device=device, dtype=dtype)
            self.layers.append(layer)
        self.final_norm = torch.ones(shape["hidden"], device=device, dtype=dtype)
        self.lm_head = torch.randn(shape["hidden"], shape["vocab"], device=device, dtype=dtype) * 0.02
        self.hidden_in = torch.randn(batch, shape["hidden"], device=device, dtype=dtype)

    def weight_bytes(self) -> int:
        per_layer = sum(n_in * n_out for n_in, n_out in layer_matrices(self.shape).values())
        element_bytes = BF16_BYTES if self.weight_dtype == "bf16" else 1
        # The LM head stays bf16, as engines run it under FP8 weights.
        return (
            element_bytes * self.shape["layers"] * per_layer + BF16_BYTES * self.shape["hidden"] * self.shape["vocab"]
        )

    def kv_bytes(self) -> int:
        per_layer = 2 * self.batch * self.shape["kv_heads"] * self.context * HEAD_DIM
        return BF16_BYTES * self.shape["layers"] * per_layer

    def step(self):
        x = self.hidden_in
        for layer in self.layers:
            x = self.layer_fn(x, layer)
        return F.rms_norm(x, (self.shape["hidden"],), self.final_norm) @ self.lm_head

    def layer_fn(self, x: torch.Tensor, layer: dict) -> torch.Tensor:
        return layer_step(x, layer, self.batch, self.shape["heads"], self.shape["kv_heads"], self.shape["hidden"])


def layer_step(x: torch.Tensor, layer: dict, batch: int, heads: int, kv_heads: int, hidden: int) -> torch.Tensor:
    """One decoder layer's decode step for ``batch`` tokens: about a dozen kernels run as written, fewer compiled."""
    group = heads // kv_heads
    h = F.rms_norm(x, (hidden,), layer["norm1"])
    qkv = matmul(h, layer["qkv"])
    q = qkv[:, : heads * HEAD_DIM].reshape(batch, kv_heads, group, HEAD_DIM)
    attn = F.scaled_dot_product_attention(q, layer["k"], layer["v"])
    x = x + matmul(attn.reshape(batch, heads * HEAD_DIM), layer["o"])
    h = F.rms_norm(x, (hidden,), layer["norm2"])
    gate, up = matmul(h, layer["gate_up"]).chunk(2, dim=-1)
    return x + matmul(F.silu(gate) * up, layer["down"])


class FusedDecoder(Decoder):
    """The same step with each layer compiled by torch.compile (Inductor fuses the norms with the residual adds
    and SiLU with the multiply, as engines' fused kernels do; GEMMs and attention stay cuBLAS and FlashAttention)."""

    def __init__(self, shape: dict, batch: int, context: int, weight_dtype: str = "bf16"):
        super().__init__(shape, batch, context, weight_dtype)
        self.compiled = torch.compile(
            functools.partial(
                layer_step, batch=batch, heads=shape["heads"], kv_heads=shape["kv_heads"], hidden=shape["hidden"]
            ),
            dynamic=False,
        )

    def layer_fn(self, x: torch.Tensor, layer: dict) -> torch.Tensor:
        return self.compiled(x, layer)


#: Batch-1 steps at 1,024 tokens (what the per-layer fit uses) and two larger batches, compiled.
FUSED_STEPS = [
    ("llama-3.1-8b", 1, "bf16", (1, 64), (1024,)),
    ("llama-3.3-70b", 2, "bf16", (1,), (1024,)),
    ("llama-3.3-70b", 4, "bf16", (1,), (1024,)),
    ("llama-3.3-70b", 8, "bf16", (1, 64), (1024,)),
    ("llama-3.1-8b", 1, "fp8", (1,), (1024,)),
    ("llama-3.3-70b", 1, "fp8", (1,), (1024,)),
    ("llama-3.3-70b", 2, "fp8", (1,), (1024,)),
    ("llama-3.3-70b", 4, "fp8", (1,), (1024,)),
    ("llama-3.3-70b", 8, "fp8", (1,), (1024,)),
]


def decode_steps(steps=STEPS, decoder_class=Decoder, on_row=None) -> list[dict]:
    rows = []
    for model_name, tp, weight_dtype, batches, contexts in steps:
        shape = rank_shapes(MODELS[model_name], tp)
        for context in contexts:
            for batch in batches:
                decoder = decoder_class(shape, batch, context, weight_dtype)
                with torch.no_grad():
                    step_ms = timed_graph_ms(decoder.step)
                read = decoder.weight_bytes() + decoder.kv_bytes()
                rows.append(
                    dict(
                        model=model_name,
                        tp=tp,
                        weight_dtype=weight_dtype,
                        layers=shape["layers"],
                        batch=batch,
                        context=context,
                        step_ms=step_ms,
                        weight_bytes=decoder.weight_bytes(),
                        kv_bytes=decoder.kv_bytes(),
                        achieved_bytes_per_s=read / (step_ms / 1e3),
                    )
                )
                print(json.dumps(rows[-1]), flush=True)
                if on_row:
                    on_row(rows)
                del decoder
                torch.cuda.empty_cache()
    return rows


def gemm_sweep(l2_bytes: int = 60 * 2**20) -> list[dict]:
    """Each matrix alone at small batches, over enough copies that every product reads its matrix from HBM."""
    rows = []
    seen = set()
    for model_name, tp, weight_dtype, *_ in STEPS:
        shape = rank_shapes(MODELS[model_name], tp)
        for name, (n_in, n_out) in layer_matrices(shape).items():
            if (n_in, n_out, weight_dtype) in seen:
                continue
            seen.add((n_in, n_out, weight_dtype))
            matrix_bytes = (BF16_BYTES if weight_dtype == "bf16" else 1) * n_in * n_out
            copies = max(8, -(-8 * l2_bytes // matrix_bytes))
            weights = [
                to_weight(torch.randn(n_in, n_out, device=DEVICE, dtype=torch.bfloat16), weight_dtype)
                for _ in range(copies)
            ]
            for batch in (1, 8, 32, 64, 128, 256):
                x = torch.randn(batch, n_in, device=DEVICE, dtype=torch.bfloat16)

                def run(x=x, weights=weights):
                    for w in weights:
                        matmul(x, w)

                ms = timed_graph_ms(run) / copies
                rows.append(
                    dict(
                        model=model_name,
                        tp=tp,
                        weight_dtype=weight_dtype,
                        matrix=name,
                        n_in=n_in,
                        n_out=n_out,
                        batch=batch,
                        us=ms * 1e3,
                        achieved_bytes_per_s=matrix_bytes / (ms / 1e3),
                    )
                )
            print(json.dumps(rows[-6]), flush=True)
            del weights
            torch.cuda.empty_cache()
    return rows


def stream_bandwidth() -> dict:
    """A plain read (sum) and copy of 8 GiB: the card's reachable bandwidth without a GEMM's tiles."""
    source = torch.randn(2**32 // BF16_BYTES * 2, device=DEVICE, dtype=torch.bfloat16)
    target = torch.empty_like(source)
    total = source.numel() * BF16_BYTES
    read_ms = timed_graph_ms(lambda: source.sum(dtype=torch.float32))
    copy_ms = timed_graph_ms(lambda: target.copy_(source))
    return dict(
        bytes=total,
        read_bytes_per_s=total / (read_ms / 1e3),
        copy_bytes_per_s=2 * total / (copy_ms / 1e3),
    )


def write(path: str, result: dict) -> None:
    with open(path, "w") as handle:
        json.dump(result, handle, indent=1)
        handle.write("\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument(
        "--fused", action="store_true", help="only the compiled (fused) decode steps of FUSED_STEPS, no GEMM sweep"
    )
    args = parser.parse_args()
    torch.manual_seed(0)
    # Each shape is its own compile; past dynamo's default of 8 it would run the rest eagerly.
    torch._dynamo.config.recompile_limit = 64
    began = time.time()
    properties = torch.cuda.get_device_properties(0)
    result = dict(
        device=properties.name,
        multiprocessors=properties.multi_processor_count,
        memory_bytes=properties.total_memory,
        torch=torch.__version__,
        cuda=torch.version.cuda,
        stream=stream_bandwidth(),
        fused=args.fused,
    )
    print(json.dumps(result), flush=True)
    if args.fused:
        # Written after every step, so a run cut short keeps what it measured.
        result["decode"] = decode_steps(
            FUSED_STEPS, FusedDecoder, lambda rows: write(args.out, result | {"decode": rows})
        )
    else:
        result["gemm"] = gemm_sweep()
        result["decode"] = decode_steps()
    result["seconds"] = time.time() - began
    write(args.out, result)


if __name__ == "__main__":
    main()
