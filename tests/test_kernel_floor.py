"""The kernel floor measured on an H200 (bench/kernel_floor.py, bench/data/kernel_floor_h200.json) and the
comparison docs/accuracy.md prints from it (bench/kernel_floor_compare.py).

The measurement itself needs a GPU and is not re-run here; what is tested is the arithmetic drawn from it: the
least-squares split of a step into bytes over a bandwidth and a fixed cost per layer, checked on steps made up by
hand, and that the doc holds the table and the figures the script prints from the stored measurement.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

import kernel_floor_compare  # noqa: E402


def step(layers: int, gigabytes: float, batch: int = 1, context: int = 1024) -> dict:
    """A step of exactly bytes / 4 TB/s + layers x 50 us."""
    seconds = gigabytes * 1e9 / 4e12 + layers * 50e-6
    return {
        "batch": batch,
        "context": context,
        "layers": layers,
        "weight_bytes": gigabytes * 1e9,
        "kv_bytes": 0.0,
        "step_ms": seconds * 1e3,
    }


def test_the_fit_splits_bytes_from_layers():
    """Steps made by hand at 4 TB/s and 50 us a layer give both back; a batch-1 step at 8,192 tokens (PyTorch's
    attention without split KV is slow there) and larger batches are left out of the fit."""
    rows = [step(32, 15.0), step(80, 70.0), step(80, 35.0), step(80, 17.5)]
    rows += [step(80, 17.5, context=8192) | {"step_ms": 99.0}, step(32, 15.0, batch=64) | {"step_ms": 99.0}]
    bandwidth, per_layer = kernel_floor_compare.per_layer_fit(rows)
    assert bandwidth == pytest.approx(4e12, rel=1e-9)
    assert per_layer == pytest.approx(50e-6, rel=1e-9)


def test_the_measurement_holds_what_the_doc_says():
    """The stored H200 run: a plain read of 8 GiB at 4.26 TB/s, and its batch-1 steps fitted to 4.29 TB/s and
    66 us a layer (docs/accuracy.md, *The kernel floor on an H200*)."""
    data = json.loads(kernel_floor_compare.DATA.read_text())
    assert data["device"] == "NVIDIA H200"
    assert data["stream"]["read_bytes_per_s"] == pytest.approx(4.26e12, rel=5e-3)
    bandwidth, per_layer = kernel_floor_compare.per_layer_fit(data["decode"])
    assert bandwidth == pytest.approx(4.29e12, rel=5e-3)
    assert per_layer == pytest.approx(66e-6, rel=1e-2)
    # Each step's achieved bandwidth is its bytes over its time, as stored.
    for row in data["decode"]:
        achieved = (row["weight_bytes"] + row["kv_bytes"]) / (row["step_ms"] / 1e3)
        assert row["achieved_bytes_per_s"] == pytest.approx(achieved, rel=1e-9)


def test_the_compiled_run_saves_kernels_not_their_cost():
    """The same steps compiled (fewer, fused kernels): 4.28 TB/s and 45 us a layer, against 66 us as written."""
    data = json.loads((ROOT / "bench" / "data" / "kernel_floor_h200_fused.json").read_text())
    assert data["fused"] is True
    bandwidth, per_layer = kernel_floor_compare.per_layer_fit(data["decode"])
    assert bandwidth == pytest.approx(4.28e12, rel=5e-3)
    assert per_layer == pytest.approx(45e-6, rel=2e-2)


@pytest.mark.parametrize("data", ["kernel_floor_h200.json", "kernel_floor_h200_fused.json"])
def test_the_doc_holds_the_table_the_script_prints(data):
    table = subprocess.run(
        [
            sys.executable,
            str(ROOT / "bench" / "kernel_floor_compare.py"),
            "--markdown",
            "--data",
            str(ROOT / "bench" / "data" / data),
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert table in (ROOT / "docs" / "accuracy.md").read_text(encoding="utf-8")


def test_the_moe_gemm_table_is_the_stored_run():
    """docs/accuracy.md's *MoE prefill GEMMs on an H200* table, row by row, from bench/data/moe_gemm_h200.json."""
    data = json.loads((ROOT / "bench" / "data" / "moe_gemm_h200.json").read_text())
    doc = (ROOT / "docs" / "accuracy.md").read_text(encoding="utf-8")
    assert data["dense_flops_per_s"] == pytest.approx(773e12, rel=1e-3)
    for model in ("DeepSeek-V3", "Qwen3-235B-A22B", "gpt-oss-120b"):
        cells = [f"{row['of_dense']:.2f}" for row in data["experts"] if row["model"] == model]
        assert any(
            line.startswith(f"| {model} (") and line.endswith(" | ".join(cells) + " |") for line in doc.splitlines()
        )
    ratios = [row["of_dense"] for row in data["deepseek_projections"]]
    assert f"{min(ratios):.2f}-{max(ratios):.1f} of the dense rate" in doc
