"""How fast a prefill chunk's expert GEMMs run on the GPU at hand, against a large dense GEMM.

Run on a machine with a CUDA GPU and PyTorch (not part of the test suite):

    python bench/moe_gemm.py --out bench/data/moe_gemm_h200.json

A prefill chunk of 8,192 tokens routed uniformly gives each expert chunk x top_k / experts rows; under tensor
parallelism each rank holds 1/TP of every expert's width. Each case times the experts' gate-up and down
products of one layer as one batched GEMM (torch.bmm over [experts, rows, in] x [experts, in, out], BF16: what
a grouped GEMM does when every expert gets the same rows) captured in a CUDA graph, and reports its FLOP rate
beside an 8,192-cube dense BF16 GEMM's on the same GPU. The shapes are the shipped MoE models' (DeepSeek-V3,
Qwen3-235B-A22B, gpt-oss-120b, Mixtral 8x7B) at TP 1, 2, 4 and 8, and DeepSeek-V3's per-rank attention
projections at the same chunk for comparison.
"""

from __future__ import annotations

import argparse
import json

import torch
from kernel_floor import timed_graph_ms

CHUNK = 8192
# name: (experts, top_k, hidden, expert intermediate): models/*/config.json.
MOE = {
    "DeepSeek-V3": (256, 8, 7168, 2048),
    "Qwen3-235B-A22B": (128, 8, 4096, 1536),
    "gpt-oss-120b": (128, 4, 2880, 2880),
    "Mixtral-8x7B-v0.1": (8, 2, 4096, 14336),
}
TPS = (1, 2, 4, 8)


def bmm_rate(batch: int, rows: int, n_in: int, n_out: int) -> float:
    """FLOP/s of [batch, rows, n_in] x [batch, n_in, n_out] in BF16."""
    a = torch.randn(batch, rows, n_in, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(batch, n_in, n_out, device="cuda", dtype=torch.bfloat16)
    ms = timed_graph_ms(lambda: torch.bmm(a, b), warmups=3, replays=20)
    return 2 * batch * rows * n_in * n_out / (ms / 1e3)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    torch.manual_seed(0)
    dense = bmm_rate(1, 8192, 8192, 8192)
    result = {
        "device": torch.cuda.get_device_properties(0).name,
        "torch": torch.__version__,
        "dense_flops_per_s": dense,
    }
    print(json.dumps(result), flush=True)
    rows = []
    for model, (experts, top_k, hidden, width) in MOE.items():
        per_expert = CHUNK * top_k // experts
        for tp in TPS:
            local = width // tp
            gate_up = bmm_rate(experts, per_expert, hidden, 2 * local)
            down = bmm_rate(experts, per_expert, local, hidden)
            flops_up, flops_down = (
                2 * experts * per_expert * hidden * 2 * local,
                2 * experts * per_expert * local * hidden,
            )
            rate = (flops_up + flops_down) / (flops_up / gate_up + flops_down / down)
            rows.append(
                dict(
                    model=model,
                    tp=tp,
                    rows_per_expert=per_expert,
                    expert_width_per_rank=local,
                    flops_per_s=rate,
                    of_dense=rate / dense,
                )
            )
            print(json.dumps(rows[-1]), flush=True)
    # DeepSeek-V3's per-rank attention projections over the same chunk (dense GEMMs of the same layer).
    projections = []
    for tp in TPS:
        for name, (n_in, n_out) in {
            "q_b": (1536, 128 * 192 // tp),
            "kv_b": (512, 128 * 256 // tp),
            "o": (128 * 128 // tp, 7168),
        }.items():
            rate = bmm_rate(1, CHUNK, n_in, n_out)
            projections.append(dict(tp=tp, matrix=name, flops_per_s=rate, of_dense=rate / dense))
            print(json.dumps(projections[-1]), flush=True)
    result |= {"experts": rows, "deepseek_projections": projections}
    with open(args.out, "w") as handle:
        json.dump(result, handle, indent=1)
        handle.write("\n")


if __name__ == "__main__":
    main()
