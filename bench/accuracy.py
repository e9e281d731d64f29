"""Accuracy of the engine model against public measurements (tests/data/measurements/*.yaml).

Usage (from the repo root, quotacalc installed):

    python bench/accuracy.py [--markdown] [--set fit|held_out|all]
    python bench/accuracy.py --closed-loop [--markdown]

For every measured point it prints the prediction at the default efficiencies and overheads, the
measurement and the relative error, then the summary: mean absolute error of decode ITL and of
TTFT, median absolute error of the KV pool, on the points the defaults were fitted on and on the
held-out points separately, then the same errors per GPU (every point, fitted or not), then the
signed mean error per engine, engine version, weight dtype and GPU (positive: the model is slower than measured).
Prediction per kind:

- itl: ReplicaModel.loaded_itl_s(concurrency, prompt, output) (the other requests' prefills
  interleaved);
- e2e_latency (a fixed batch from an empty engine): one prefill step of the batch's prompts (each
  prompt attends only to itself: batch × one prompt's FLOPs, or one read of the weights, and the
  prefill pass's overheads), then (output − 1) decode steps at batch, context prompt + output / 2;
- ttft: ReplicaModel.ttft_s(prompt); a point measured on the engine alone (``engine_only``: no API
  server or tokenizer) without the request overhead it does not pay.

Each point is priced with its engine's profile (``engine``: quotacalc/catalog/engines.yaml).
- kv_pool: the estimated KV pool in tokens (or, without a token count, the KV bytes per GPU);
- weight logs: quotacalc's weight bytes per GPU against vLLM's 'Model loading took' figure;
- hybrid token logs: a hybrid model's logged 'GPU KV cache size' and 'Maximum concurrency' from its logged
  KV GiB, by vLLM's hybrid manager's block arithmetic alone (core/kv_groups.py).

``--closed-loop`` compares, instead, three models of a closed-loop benchmark run at concurrency C:
the steady-state ITL above (``loaded_itl_s``, with the idle replica's TTFT), the step-by-step
simulation of quotacalc.core.benchmark started in lock-step (every client at once) or spread
(the clients evenly apart), and a blend (lock-step while every client's prompt fits one step's
token budget beside the decodes, spread beyond), on every ITL point at C > 1 and the runs of ``closed_loop.yaml``
(TTFT and ITL at C > 1, never fitted to); then what each gives in tests/test_calibrate_real.py's
two-point calibration (calibrate's ITL predictor swapped for the duration).
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path
from typing import Any

import yaml

from quotacalc import Deployment, price, resolve
from quotacalc.core.benchmark import closed_loop
from quotacalc.core.deployment import GENERIC_ENGINE
from quotacalc.core.kv_groups import TokenCountRule, hybrid_layout
from quotacalc.core.memory import GIB
from quotacalc.core.replica import ReplicaModel, replica_model
from quotacalc.core.weights import engine_extra_bytes_per_gpu

DATA = Path(__file__).resolve().parent.parent / "tests" / "data" / "measurements"


def load(name: str) -> list[dict[str, Any]]:
    return yaml.safe_load((DATA / name).read_text())["points"]


ROOT = DATA.parent.parent.parent


def model_of_point(point: dict[str, Any]) -> str:
    """A shipped model's name, or a config under tests/data/ (a path from the repository root)."""
    model = point["model"]
    return str(ROOT / model) if model.startswith("tests/") else model


def deployment_of(point: dict[str, Any], **overrides: Any) -> Deployment:
    fields = {
        "model": model_of_point(point),
        "gpu": point["gpu"],
        "tp": point["tp"],
        "weight_dtype": point.get("weight_dtype"),
        "kv_dtype": point.get("kv_dtype"),
        "engine": point.get("engine", GENERIC_ENGINE),
    }
    for key in (
        "memory_utilization",
        "max_num_batched_tokens",
        "max_num_seqs",
        "mxfp4_moe_backend",
        "sampler_bytes_per_logit",
    ):
        if point.get(key) is not None:
            fields[key] = point[key]
    return Deployment(**{**fields, **overrides})


def model_of(point: dict[str, Any], **overrides: Any) -> ReplicaModel:
    inputs = resolve(deployment_of(point, **overrides))
    return replica_model(inputs, price(inputs).kv_pool_bytes_per_gpu)


def predict_decode(point: dict[str, Any], **overrides: Any) -> float:
    model = model_of(point, **overrides)
    prompt, output = point["prompt_tokens"], point["output_tokens"]
    if point["kind"] == "itl":
        return model.loaded_itl_s(point["concurrency"], prompt, output)
    batch = point["batch"]
    context = prompt + output / 2
    return batch_prefill_s(model, batch, prompt) + (output - 1) * model.step_time_s(batch, context)


def batch_prefill_s(model: ReplicaModel, batch: int, prompt_tokens: int) -> float:
    """One prefill step of ``batch`` prompts together: each attends only to its own tokens, so the FLOPs
    are ``batch`` times one prompt's (one sequence of batch × prompt tokens would charge attention over
    all of them), or one read of the weights if that is longer; plus the prefill pass's overheads and
    all-reduces."""
    return model.mixed_step_time_s(0, 0.0, batch * model.prefill_compute_s(prompt_tokens), batch * prompt_tokens)


def measured_decode(point: dict[str, Any]) -> float:
    return point["itl_s"] if point["kind"] == "itl" else point["latency_s"]


def predict_ttft(point: dict[str, Any], **overrides: Any) -> float:
    model = model_of(point, **overrides)
    ttft_s = model.ttft_s(point["prompt_tokens"])
    return ttft_s - model.request_overhead_s if point.get("engine_only") else ttft_s


def predict_pool(point: dict[str, Any], **overrides: Any) -> tuple[float, float, str]:
    """(predicted, measured, unit): tokens when the log gives them, else KV GiB per GPU."""
    result = price(resolve(deployment_of(point, **overrides)))
    if point.get("kv_pool_tokens") is not None:
        return result.kv_pool_tokens, point["kv_pool_tokens"], "tokens"
    return result.kv_pool_bytes_per_gpu / GIB, point["available_kv_gib"], "GiB/GPU"


def hybrid_token_rows() -> list[tuple[str, str, float, float]]:
    """(id, figure, predicted, measured): a hybrid model's logged 'GPU KV cache size' and 'Maximum concurrency'
    from its logged KV memory, by vLLM's hybrid manager's arithmetic (core/kv_groups.py)."""
    out = []
    for point in yaml.safe_load((DATA / "kv_pool.yaml").read_text()).get("hybrid_token_logs", []):
        if point.get("available_kv_gib") is None:
            continue
        fields = {"model": model_of_point(point), "gpu": "h100-sxm", "tp": point["tp"]}
        fields |= {key: point[key] for key in ("kv_dtype", "state_dtype") if point.get(key)}
        inputs = resolve(Deployment(**fields))
        layout = hybrid_layout(
            inputs.arch, inputs.kv_dtype.bytes_per_element, inputs.state_dtype.bytes_per_element, point["tp"]
        )
        blocks = layout.num_blocks(point["available_kv_gib"] * GIB)
        length, batched, pages = point["max_model_len"], point["max_num_batched_tokens"], point["state_pages"]
        tokens = layout.logged_tokens(blocks, length, batched, TokenCountRule(point["token_rule"]), pages)
        out.append((point["id"], "tokens", tokens, point["kv_pool_tokens"]))
        if point.get("max_concurrency") is not None:
            concurrency = layout.max_concurrency(blocks, length, batched, pages)
            out.append((point["id"], "concurrency", concurrency, point["max_concurrency"]))
    return out


def weight_rows() -> list[tuple[str, float, float]]:
    """(id, predicted GiB per GPU, vLLM's 'Model loading took' GiB) for every weight log."""
    logs = yaml.safe_load((DATA / "kv_pool.yaml").read_text()).get("weight_logs", [])
    return [(log["id"], resident_weights_gib(log), log["weights_gib"]) for log in logs]


def resident_weights_gib(point: dict[str, Any]) -> float:
    """quotacalc's weights per GPU as the engine holds them (replicated layers and padding included), without
    pricing: a log
    whose pool came out negative still has weights to compare."""
    inputs = resolve(deployment_of(point))
    layout, deployment = inputs.weights, inputs.deployment
    checkpoint = layout.weight_bytes(inputs.arch.params_by_group()) / deployment.tp
    return (checkpoint + engine_extra_bytes_per_gpu(inputs.arch, layout, deployment, inputs.gpu)) / GIB


def rows() -> list[tuple[str, str, str, float, float, bool]]:
    """(group, id, unit, predicted, measured, held_out) for every point."""
    return [row[:6] for row in gpu_rows()]


def gpu_rows() -> list[tuple[str, str, str, float, float, bool, str]]:
    """rows() with each point's GPU (catalog key) appended."""
    out = []
    for point in load("decode_itl.yaml"):
        unit = "ITL s" if point["kind"] == "itl" else "e2e s"
        held = bool(point.get("held_out"))
        out.append(("ITL", point["id"], unit, predict_decode(point), measured_decode(point), held, point["gpu"]))
    for point in load("ttft.yaml"):
        held = bool(point.get("held_out"))
        out.append(("TTFT", point["id"], "s", predict_ttft(point), point["ttft_s"], held, point["gpu"]))
    for point in load("kv_pool.yaml"):
        predicted, measured, unit = predict_pool(point)
        out.append(("KV pool", point["id"], unit, predicted, measured, bool(point.get("held_out")), point["gpu"]))
    return out


def per_gpu(table: list[tuple[str, str, str, float, float, bool, str]]) -> dict[str, dict[str, tuple[float, int]]]:
    """GPU -> group -> (absolute error, number of points) over every point of that GPU: the mean for ITL
    and TTFT, the median for the KV pool, as in summary()."""
    result: dict[str, dict[str, tuple[float, int]]] = {}
    for gpu in sorted({row[6] for row in table}):
        for group, stat in (("ITL", statistics.mean), ("TTFT", statistics.mean), ("KV pool", statistics.median)):
            errors = [
                abs(pred / meas - 1) for g, _, _, pred, meas, _, row_gpu in table if g == group and row_gpu == gpu
            ]
            if errors:
                result.setdefault(gpu, {})[group] = (stat(errors), len(errors))
    return result


def engine_rows() -> list[tuple[str, str, str, str, float]]:
    """(group, engine, version and weight dtype, GPU, id, signed error) for every ITL and TTFT point."""
    out = []
    for name, group in (("decode_itl.yaml", "ITL"), ("ttft.yaml", "TTFT")):
        for point in load(name):
            if group == "ITL":
                predicted, measured = predict_decode(point), measured_decode(point)
            else:
                predicted, measured = predict_ttft(point), point["ttft_s"]
            engine = f"{point['engine']} {point.get('engine_version', '?')}, {point.get('weight_dtype') or 'default'}"
            out.append((group, engine, point["gpu"], point["id"], predicted / measured - 1))
    return out


def per_engine(table: list[tuple[str, str, str, str, float]]) -> list[tuple[str, str, str, float, float, int]]:
    """(group, engine/version/weights, GPU, signed mean error, mean absolute error, points), grouped."""
    keys = sorted({(group, engine, gpu) for group, engine, gpu, _, _ in table})
    out = []
    for key in keys:
        errors = [error for group, engine, gpu, _, error in table if (group, engine, gpu) == key]
        out.append((*key, statistics.mean(errors), statistics.mean(abs(e) for e in errors), len(errors)))
    return out


def summary(table: list[tuple[str, str, str, float, float, bool]], held_out: bool | None) -> dict[str, float]:
    chosen = [row for row in table if held_out is None or row[5] == held_out]
    result = {}
    for group, stat in (("ITL", statistics.mean), ("TTFT", statistics.mean), ("KV pool", statistics.median)):
        errors = [abs(pred / meas - 1) for g, _, _, pred, meas, _ in chosen if g == group]
        if errors:
            result[group] = stat(errors)
    return result


ITL_MODELS = ("steady", "lockstep", "spread", "blend")


def blend_start(model: ReplicaModel, concurrency: int, prompt: float) -> str:
    """The blend: lock-step while every client's prompt fits one step's token budget beside the decodes."""
    return "lockstep" if concurrency * prompt <= model.max_num_batched_tokens - concurrency else "spread"


def closed_loop_predictions(model: ReplicaModel, concurrency: int, prompt: float, output: float) -> dict[str, tuple]:
    """ITL model -> (TTFT, ITL) of a closed-loop run: the steady-state formula with the idle TTFT, and the
    simulation from either start."""
    out = {"steady": (model.ttft_s(round(prompt)), model.loaded_itl_s(concurrency, prompt, output))}
    for start in ("lockstep", "spread"):
        run = closed_loop(model, concurrency, prompt, output, start)
        out[start] = (run.mean_ttft_s, run.mean_itl_s)
    out["blend"] = out[blend_start(model, concurrency, prompt)]
    return out


def closed_loop_rows() -> list[tuple[str, str, str, str, float | None, float, dict[str, tuple]]]:
    """(id, engine, set, pool, measured TTFT or None, measured ITL, predictions) for every run at C > 1."""
    runs = [(p, "held out" if p.get("held_out") else "fit") for p in load("decode_itl.yaml") if p["kind"] == "itl"]
    runs += [(p, "check") for p in load("closed_loop.yaml")]
    rows = []
    for point, mark in runs:
        if point["concurrency"] == 1:
            continue
        inputs = resolve(deployment_of(point))
        priced = price(inputs)
        model = replica_model(inputs, priced.kv_pool_bytes_per_gpu)
        fits = point["concurrency"] * (point["prompt_tokens"] + point["output_tokens"]) <= priced.kv_pool_tokens
        predicted = closed_loop_predictions(model, point["concurrency"], point["prompt_tokens"], point["output_tokens"])
        rows.append(
            (
                point["id"],
                point["engine"],
                mark,
                "fits" if fits else "queues",
                point.get("ttft_s"),
                point["itl_s"],
                predicted,
            )
        )
    return rows


def two_point_outcome(real: Any, model_name: str, deployment: Deployment) -> tuple[int, int, dict[str, float]]:
    """tests/test_calibrate_real.py's rule (module ``real``) on one deployment, with calibrate's predictors as they
    are now: (other points within 5%, other points, the misses by id)."""
    from quotacalc.core import calibrate as calibration

    inputs = resolve(deployment)
    points = real._points(model_name)
    used, runs = real.two_point_rule(points)
    fitted = calibration.calibrate(inputs, runs)
    values = {parameter.name: parameter.after for parameter in fitted.parameters}
    others = [(ident, point) for ident, _, point in points if ident not in used]
    predicted = calibration.predictions(inputs, values, [point for _, point in others])
    errors = {
        ident: value / next(iter(point.measured().values())) - 1
        for (ident, point), value in zip(others, predicted, strict=True)
    }
    misses = {ident: error for ident, error in errors.items() if abs(error) > real.TARGET}
    return len(errors) - len(misses), len(errors), misses


def two_point_results() -> dict[str, dict[str, tuple[int, int, dict[str, float]]]]:
    """ITL model -> deployment -> (points within 5%, points, the misses), by tests/test_calibrate_real.py's rule."""
    import sys

    from quotacalc.core import calibrate as calibration

    sys.path.insert(0, str(ROOT / "tests"))
    import test_calibrate_real as real

    def predictor(name: str):
        def itl(model: ReplicaModel, point) -> float:
            if name == "steady":
                return model.loaded_itl_s(point.concurrency, point.prompt_tokens, point.output_tokens)
            start = blend_start(model, point.concurrency, point.prompt_tokens) if name == "blend" else name
            return closed_loop(model, point.concurrency, point.prompt_tokens, point.output_tokens, start).mean_itl_s

        return itl

    original = calibration.PREDICTORS["itl_s"]
    results: dict[str, dict[str, tuple[int, int, dict[str, float]]]] = {}
    try:
        for name in ITL_MODELS:
            calibration.PREDICTORS["itl_s"] = predictor(name)
            for model_name, deployment in real.DEPLOYMENTS.items():
                results.setdefault(name, {})[model_name] = two_point_outcome(real, model_name, deployment)
    finally:
        calibration.PREDICTORS["itl_s"] = original
    return results


def print_closed_loop(markdown: bool) -> None:
    rows = closed_loop_rows()
    if markdown:
        print("| run | engine | set | pool | TTFT measured | steady (idle TTFT) | lock-step | spread | blend |")
        print("|---|---|---|---|---:|---:|---:|---:|---:|")
    for ident, engine, mark, pool, ttft, itl, predicted in rows:
        cells = [f"{predicted[m][1] / itl - 1:+.1%}" for m in ITL_MODELS]
        tcells = [f"{predicted[m][0] / ttft - 1:+.0%}" if ttft else "-" for m in ITL_MODELS]
        both = [f"{c} / {t}" for c, t in zip(cells, tcells, strict=True)]
        measured = f"{ttft * 1e3:.0f} ms" if ttft else "-"
        if markdown:
            print(f"| {ident} | {engine} | {mark} | {pool} | {measured} | " + " | ".join(both) + " |")
        else:
            print(f"{ident:34s} {engine:12s} {mark:8s} {pool:6s} TTFT {measured:>9s}  " + "  ".join(both))
    print()
    if markdown:
        print(
            "| runs (C > 1, requests fit the pool) | n | "
            + " | ".join(f"{m} ITL / TTFT MAE" for m in ITL_MODELS)
            + " |"
        )
        print("|---|---:|" + "---:|" * len(ITL_MODELS))
    groups = {
        "decode_itl.yaml, fit": lambda r: r[2] == "fit",
        "decode_itl.yaml, held out": lambda r: r[2] == "held out",
        "closed_loop.yaml, NIM (TensorRT-LLM)": lambda r: r[2] == "check" and r[1] == "tensorrt-llm",
        "closed_loop.yaml, vLLM": lambda r: r[2] == "check" and r[1] == "vllm",
    }
    for label, chosen in groups.items():
        selected = [r for r in rows if chosen(r) and r[3] == "fits"]
        cells = []
        for m in ITL_MODELS:
            itl = statistics.mean(abs(r[6][m][1] / r[5] - 1) for r in selected)
            ttfts = [abs(r[6][m][0] / r[4] - 1) for r in selected if r[4]]
            cells.append(f"{itl:.1%} / {statistics.mean(ttfts):.0%}" if ttfts else f"{itl:.1%} / -")
        if markdown:
            print(f"| {label} | {len(selected)} | " + " | ".join(cells) + " |")
        else:
            print(
                f"{label:40s} n={len(selected):3d} "
                + "  ".join(f"{m} {c}" for m, c in zip(ITL_MODELS, cells, strict=True))
            )
    print()
    results = two_point_results()
    if markdown:
        print("| ITL model | deployment | other points within 5% | misses |")
        print("|---|---|---:|---|")
    for name, deployments in results.items():
        for model_name, (within, total, misses) in deployments.items():
            listed = ", ".join(f"{ident} {error:+.1%}" for ident, error in misses.items())
            if markdown:
                print(f"| {name} | {model_name} | {within} of {total} | {listed} |")
            else:
                print(f"{name:9s} {model_name:24s} {within}/{total} within 5%: {listed}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--markdown", action="store_true")
    parser.add_argument("--closed-loop", action="store_true", help="compare the closed-loop models instead")
    args = parser.parse_args()
    if args.closed_loop:
        print_closed_loop(args.markdown)
        return
    with_gpu = gpu_rows()
    table = [row[:6] for row in with_gpu]
    if args.markdown:
        print("| kind | point | set | unit | predicted | measured | error |")
        print("|---|---|---|---|---:|---:|---:|")
        for group, ident, unit, pred, meas, held in table:
            mark = "held out" if held else "fit"
            print(f"| {group} | {ident} | {mark} | {unit} | {pred:.4g} | {meas:.4g} | {pred / meas - 1:+.1%} |")
        print()
        print("| set | ITL mean abs. error | TTFT mean abs. error | KV pool median abs. error |")
        print("|---|---:|---:|---:|")
        for label, held in (("fit", False), ("held out", True), ("all", None)):
            s = summary(table, held)
            print(f"| {label} | {s.get('ITL', 0):.1%} | {s.get('TTFT', 0):.1%} | {s.get('KV pool', 0):.1%} |")
        print()
        print(
            "| GPU (all points) | ITL mean abs. error (points) | TTFT mean abs. error (points) | KV pool median abs. error (points) |"
        )
        print("|---|---:|---:|---:|")
        for gpu, groups in per_gpu(with_gpu).items():
            cells = [f"{groups[g][0]:.1%} ({groups[g][1]})" if g in groups else "-" for g in ("ITL", "TTFT", "KV pool")]
            print(f"| {gpu} | " + " | ".join(cells) + " |")
        print()
        print("| kind | engine and version, weights | GPU | signed mean error | mean abs. error | points |")
        print("|---|---|---|---:|---:|---:|")
        for group, engine, gpu, signed, absolute, count in per_engine(engine_rows()):
            print(f"| {group} | {engine} | {gpu} | {signed:+.1%} | {absolute:.1%} | {count} |")
        print()
        print("| weight log | quotacalc GiB/GPU | vLLM 'Model loading took' GiB | error |")
        print("|---|---:|---:|---:|")
        for ident, pred, meas in weight_rows():
            print(f"| {ident} | {pred:.2f} | {meas:.2f} | {pred / meas - 1:+.1%} |")
        print()
        print("| hybrid log (from its KV GiB) | figure | quotacalc | vLLM log | error |")
        print("|---|---|---:|---:|---:|")
        for ident, figure, pred, meas in hybrid_token_rows():
            print(f"| {ident} | {figure} | {pred:.6g} | {meas:.6g} | {pred / meas - 1:+.1%} |")
        return
    for group, ident, unit, pred, meas, held in table:
        mark = "H" if held else " "
        print(f"{group:8s} {mark} {ident:44s} {unit:8s} pred {pred:12.5g} meas {meas:12.5g} {pred / meas - 1:+7.1%}")
    for label, held in (("fit", False), ("held out", True), ("all", None)):
        s = summary(table, held)
        print(f"{label:9s} " + "  ".join(f"{key} {value:.1%}" for key, value in s.items()))
    for gpu, groups in per_gpu(with_gpu).items():
        print(f"{gpu:14s} " + "  ".join(f"{g} {err:.1%} ({n})" for g, (err, n) in groups.items()))
    for group, engine, gpu, signed, absolute, count in per_engine(engine_rows()):
        print(f"{group:5s} {engine:30s} {gpu:14s} signed {signed:+7.1%}  abs {absolute:6.1%}  ({count})")
    for ident, figure, pred, meas in hybrid_token_rows():
        print(f"hybrid   {ident:44s} {figure:11s} pred {pred:12.6g} meas {meas:12.6g} {pred / meas - 1:+7.1%}")


if __name__ == "__main__":
    main()
