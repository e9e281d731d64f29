"""Write the SYNTHETIC calibration examples: benchmark runs predicted by quotacalc's own replica model
from a known parameter set, so that a fit of them must give those parameters back (tests/test_calibrate.py).

They are not measurements. Regenerate them when the replica model changes:

    python examples/calibration/make_synthetic.py
"""

from __future__ import annotations

import json
from pathlib import Path

from quotacalc.core.calibrate import BenchmarkPoint, predictions
from quotacalc.core.deployment import Deployment
from quotacalc.inputs.resolve import resolve

HERE = Path(__file__).parent
#: The worked example's deployment (docs/method.md §7), at efficiencies and overheads unlike the defaults.
DEPLOYMENT = Deployment(model="Llama-3.3-70B-Instruct", gpu="h100-sxm", tp=4, weight_dtype="fp8", kv_dtype="bf16")
KNOWN = {"mfu": 0.42, "mbu": 0.68, "sequence_overhead_s": 4.1e-05, "request_overhead_s": 0.025}
#: (concurrency, prompt tokens, output tokens) of each run: a sweep a user might run.
RUNS = [(1, 1000, 200), (4, 200, 200), (8, 2000, 400), (16, 8000, 256), (32, 500, 300), (64, 4000, 500)]
HEADER = (
    "# SYNTHETIC, not a measurement: predicted by quotacalc's replica model for Llama-3.3-70B-Instruct, FP8 weights,\n"
    "# BF16 KV, TP 4 on H100 SXM at " + ", ".join(f"{name}={value}" for name, value in KNOWN.items()) + ".\n"
    "# Written by examples/calibration/make_synthetic.py; calibrate must recover those values.\n"
)


def synthetic_points() -> list[BenchmarkPoint]:
    inputs = resolve(DEPLOYMENT)
    blank = [
        BenchmarkPoint(
            source="synthetic", row=f"run {n}", concurrency=c, prompt_tokens=p, output_tokens=o, ttft_s=1, itl_s=1
        )
        for n, (c, p, o) in enumerate(RUNS, 1)
    ]
    values = predictions(inputs, KNOWN, blank)
    return [
        point.model_copy(update={"ttft_s": values[2 * n], "itl_s": values[2 * n + 1]}) for n, point in enumerate(blank)
    ]


def main() -> None:
    points = synthetic_points()
    rows = ["concurrency,prompt_tokens,output_tokens,ttft_s,itl_s"]
    rows += [f"{p.concurrency},{p.prompt_tokens:g},{p.output_tokens:g},{p.ttft_s:.6g},{p.itl_s:.6g}" for p in points]
    (HERE / "synthetic-llama-3.3-70b-h100-tp4.csv").write_text(HEADER + "\n".join(rows) + "\n", encoding="utf-8")
    # The same runs as 'vllm bench serve --save-result --append-result' writes them: one JSON object per line.
    lines = []
    for p in points:
        completed = 200
        lines.append(
            json.dumps(
                {
                    "backend": "vllm",
                    "label": "SYNTHETIC (examples/calibration/make_synthetic.py), not a measurement",
                    "model_id": "meta-llama/Llama-3.3-70B-Instruct",
                    "num_prompts": completed,
                    "request_rate": "inf",
                    "burstiness": 1.0,
                    "max_concurrency": p.concurrency,
                    "completed": completed,
                    "failed": 0,
                    "total_input_tokens": round(p.prompt_tokens * completed),
                    "total_output_tokens": round(p.output_tokens * completed),
                    "mean_ttft_ms": round(p.ttft_s * 1000, 4),
                    "median_ttft_ms": round(p.ttft_s * 1000, 4),
                    "mean_tpot_ms": round(p.itl_s * 1000, 4),
                    "mean_itl_ms": round(p.itl_s * 1000, 4),
                    "median_itl_ms": round(p.itl_s * 1000, 4),
                }
            )
        )
    (HERE / "synthetic-llama-3.3-70b-h100-tp4.vllm.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
