"""Two-point calibration on every measured deployment, not only NIM's (the two-point target: the other points within 5%).

Usage (from the repo root, quotacalc installed):

    python bench/two_point.py [--markdown] [--min-points 4]

tests/test_calibrate_real.py holds NIM's two deployments to their stated misses. This asks the same question of
every deployment in tests/data/measurements/ (decode_itl.yaml's ITL runs, ttft.yaml's first tokens) that has at
least ``--min-points`` of them: one source, engine, engine version, model, GPU, TP and dtypes. The two runs are
chosen by one rule, fixed before any result was seen, the sweep a user would run:

- the workload shape (the run's id without its ``-c<N>`` concurrency) whose highest concurrency is the highest
  of the deployment (ties: the shape with more runs, then the first in the file);
- its lowest-concurrency run (ITL, with the concurrency-1 TTFT of that prompt length where one is measured) and
  its highest-concurrency run (ITL);
- ``calibrate``'s default parameters, each point priced with its engine's profile as bench/accuracy.py prices it.

Every other point of the deployment is then predicted. Held-out flags are ignored here: they say what the
defaults were fitted on, not what a user calibrates on. A deployment whose points have a single shape at a single
concurrency gives no pair and is listed as such. Each row also gives the same points at the defaults, so the
table shows what two runs add.
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from accuracy import deployment_of, load

from quotacalc import resolve
from quotacalc.core.calibrate import BenchmarkPoint, calibrate, predictions

TARGET = 0.05
_CONCURRENCY = re.compile(r"-c(\d+)$")


@dataclass(frozen=True)
class Outcome:
    """One deployment's two-point calibration: the runs used, each other point's error before and after."""

    deployment: str
    engine: str
    used: tuple[str, ...]
    #: point id -> (error at the defaults, error calibrated)
    errors: dict[str, tuple[float, float]]
    parameters: dict[str, float]

    @property
    def within(self) -> int:
        return sum(abs(after) <= TARGET for _, after in self.errors.values())

    @property
    def within_default(self) -> int:
        return sum(abs(before) <= TARGET for before, _ in self.errors.values())


def _key(point: dict[str, Any]) -> tuple:
    deployment = deployment_of(point)
    return (point["source"], point.get("engine_version"), deployment.model_dump_json())


def _label(point: dict[str, Any]) -> str:
    model = Path(point["model"]).parent.name if "/" in point["model"] else point["model"]
    dtypes = "/".join(str(point.get(name) or "auto") for name in ("weight_dtype", "kv_dtype"))
    return f"{point['source']}: {model} on {point['tp']}x {point['gpu']} ({dtypes})"


def deployments(min_points: int) -> list[list[dict[str, Any]]]:
    """The measured points grouped by deployment, ITL runs and concurrency-1 first tokens, in file order."""
    groups: dict[tuple, list[dict[str, Any]]] = {}
    for point in load("decode_itl.yaml"):
        if point["kind"] == "itl":
            groups.setdefault(_key(point), []).append(point)
    for point in load("ttft.yaml"):
        if not point.get("engine_only"):
            groups.setdefault(_key(point), []).append({**point, "kind": "ttft"})
    return [points for points in groups.values() if len(points) >= min_points]


def _shape(point: dict[str, Any]) -> str:
    return _CONCURRENCY.sub("", point["id"])


def two_point_rule(points: list[dict[str, Any]]) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any] | None] | None:
    """The module docstring's rule: (lowest-concurrency run, highest-concurrency run, its TTFT or None)."""
    shapes: dict[str, list[dict[str, Any]]] = {}
    for point in points:
        if point["kind"] == "itl":
            shapes.setdefault(_shape(point), []).append(point)
    ranked = [runs for runs in shapes.values() if len({run["concurrency"] for run in runs}) > 1]
    if not ranked:
        return None
    order = list(shapes)
    runs = max(ranked, key=lambda r: (max(p["concurrency"] for p in r), len(r), -order.index(_shape(r[0]))))
    low = min(runs, key=lambda p: p["concurrency"])
    high = max(runs, key=lambda p: p["concurrency"])
    ttft = next(
        (p for p in points if p["kind"] == "ttft" and p["prompt_tokens"] == low["prompt_tokens"]),
        None,
    )
    return low, high, ttft


def benchmark_point(point: dict[str, Any], ttft: dict[str, Any] | None = None) -> BenchmarkPoint:
    """A measurement of decode_itl.yaml (``kind`` itl) or ttft.yaml (``kind`` ttft) as calibrate reads a run; a
    concurrency-1 ITL run carries ``ttft``'s first token."""
    if point["kind"] == "ttft":
        return BenchmarkPoint(
            source="ttft.yaml",
            row=point["id"],
            concurrency=1,
            prompt_tokens=point["prompt_tokens"],
            output_tokens=1,
            ttft_s=point["ttft_s"],
        )
    return BenchmarkPoint(
        source="decode_itl.yaml",
        row=point["id"],
        concurrency=point["concurrency"],
        prompt_tokens=point["prompt_tokens"],
        output_tokens=point["output_tokens"],
        itl_s=point["itl_s"],
        ttft_s=None if ttft is None or point["concurrency"] != 1 else ttft["ttft_s"],
    )


def _measured(point: BenchmarkPoint) -> float:
    return next(iter(point.measured().values()))


def outcome(points: list[dict[str, Any]]) -> Outcome | None:
    """Calibrate one deployment on the rule's two runs and predict its other points (None: no pair)."""
    chosen = two_point_rule(points)
    if chosen is None:
        return None
    low, high, ttft = chosen
    used = {low["id"], high["id"]} | ({ttft["id"]} if ttft and low["concurrency"] == 1 else set())
    inputs = resolve(deployment_of(points[0]))
    runs = [benchmark_point(low, ttft), benchmark_point(high)]
    fitted = calibrate(inputs, runs)
    values = {parameter.name: parameter.after for parameter in fitted.parameters}
    others = [(p["id"], benchmark_point(p)) for p in points if p["id"] not in used]
    before = predictions(inputs, {}, [point for _, point in others])
    after = predictions(inputs, values, [point for _, point in others])
    errors = {
        ident: (b / _measured(point) - 1, a / _measured(point) - 1)
        for (ident, point), b, a in zip(others, before, after, strict=True)
    }
    return Outcome(
        deployment=_label(points[0]),
        engine=points[0].get("engine", "vllm"),
        used=tuple(sorted(used)),
        errors=errors,
        parameters={name: value for name, value in values.items() if value != getattr(inputs.deployment, name)},
    )


def outcomes(min_points: int = 4) -> list[tuple[str, Outcome | None]]:
    return [(_label(points[0]), outcome(points)) for points in deployments(min_points)]


def _worst(values: Iterable[float]) -> float:
    return max((abs(v) for v in values), default=0.0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--markdown", action="store_true", help="print the table as Markdown")
    parser.add_argument("--min-points", type=int, default=4, help="deployments with at least this many points")
    parser.add_argument("--points", action="store_true", help="list every other point's error too")
    args = parser.parse_args()
    rows = outcomes(args.min_points)
    header = (
        "deployment",
        "engine",
        "other points",
        "within 5%: defaults",
        "calibrated",
        "worst: defaults",
        "calibrated",
    )
    if args.markdown:
        print("| " + " | ".join(header) + " |")
        print("|---|---|---:|---:|---:|---:|---:|")
    total = within = within_default = 0
    for label, result in rows:
        if result is None:
            line = (label, "-", "no pair (one shape at one concurrency)", "", "", "", "")
        else:
            n = len(result.errors)
            total, within, within_default = total + n, within + result.within, within_default + result.within_default
            worst_before = _worst(b for b, _ in result.errors.values())
            worst_after = _worst(a for _, a in result.errors.values())
            line = (
                label,
                result.engine,
                str(n),
                f"{result.within_default}",
                f"{result.within}",
                f"{worst_before:.1%}",
                f"{worst_after:.1%}",
            )
        print(("| " + " | ".join(line) + " |") if args.markdown else "  ".join(line))
        if args.points and result is not None:
            print(f"    calibrated on {', '.join(result.used)}: {result.parameters}")
            for ident, (before, after) in result.errors.items():
                flag = " *" if abs(after) > TARGET else ""
                print(f"    {ident}: defaults {before:+.1%}, calibrated {after:+.1%}{flag}")
    if total:
        print(
            f"\n{within} of {total} other points within 5% calibrated ({within / total:.0%}); "
            f"{within_default} of {total} at the defaults ({within_default / total:.0%}); "
            f"median deployment share within 5%: "
            f"{statistics.median(r.within / len(r.errors) for _, r in rows if r and r.errors):.0%}"
        )


if __name__ == "__main__":
    main()
