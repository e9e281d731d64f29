"""Generate benchmark: `quotacalc generate` for a plan of many tenants, as CI runs it.

Usage (from the repo root, quotacalc installed):

    python bench/generate.py [--tenants 1000] [--runs 5] [--markdown]

Writes a platform plan of N tenants (the example's pools and tiers; tenants cycle through contracts
and traffic profiles, salted and shared), then times, in fresh processes: `generate` of every target
in this build into an empty directory, the same again into the now-current directory (nothing to
write), and `generate --check`. It also times the in-process stages once warm (read the plan, price
the pools, build the policy, each exporter, the writer) to show where the time goes.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "platform.yaml"
SECRET = "bench-secret-not-for-production"  # at least 16 bytes, as generate requires


def plan_document(tenants: int) -> dict:
    """The example plan with ``tenants`` tenants, sized to fit its pools (check is clean)."""
    document = yaml.safe_load(EXAMPLE.read_text(encoding="utf-8"))
    tiers = [tier["name"] for tier in document["tiers"]]
    # Enough replicas for every tenant's load, so the plan stays sound at any size.
    document["pools"][0]["replicas"] = max(6, tenants // 5)
    entries = []
    for index in range(tenants):
        entry: dict = {"name": f"tenant-{index:05d}", "tier": tiers[index % 3], "pool": "shared"}
        if index % 2:
            entry["units_per_s"] = 1000 + (index % 7) * 250
        else:
            entry["traffic"] = {"rps": 0.2 + (index % 5) * 0.1, "prompt_tokens": 1200, "output_tokens": 300}
        if index % 4 == 3:
            entry["cache_isolation"] = "shared"
        if index % 50 == 0:
            entry["lora_adapters"] = [f"adapter-{index:05d}"]
        entries.append(entry)
    document["tenants"] = entries
    return document


def _cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _run(args: list[str], env: dict[str, str]) -> tuple[float, float]:
    """(wall, CPU) seconds of one command. On a shared machine the CPU time is the steadier figure."""
    start, cpu = time.perf_counter(), _cpu_s()
    result = subprocess.run(args, env=env, capture_output=True, text=True, check=False)
    elapsed = time.perf_counter() - start
    if result.returncode not in (0,):
        sys.exit(f"{' '.join(args)} failed ({result.returncode}): {result.stderr}")
    return elapsed, _cpu_s() - cpu


def in_process_stages(plan_path: Path, out_dir: Path, targets: str) -> list[tuple[str, float]]:
    """Each stage of one generate, timed once after a warm-up run."""
    from quotacalc.cli.plan_cmds import _exporter, price_pools
    from quotacalc.core.checks import check_plan
    from quotacalc.core.policy import build_policy
    from quotacalc.core.salts import derive_salts
    from quotacalc.exporters.base import ExportOptions
    from quotacalc.exporters.registry import names as target_names
    from quotacalc.exporters.writer import write_files
    from quotacalc.inputs.plan import load_plan

    stages: list[tuple[str, float]] = []

    def timed(name, action):
        start = time.process_time()  # CPU time: steadier than wall time on a shared machine
        value = action()
        stages.append((name, time.process_time() - start))
        return value

    for warm in (True, False):
        stages.clear()
        plan, _ = timed("read and validate the plan", lambda: load_plan(str(plan_path)))
        priced = timed("price the pools", lambda p=plan: price_pools(p, source=str(plan_path)))
        policy = timed("build the policy", lambda p=plan, q=priced: build_policy(p, q))
        salts = timed("derive the salts", lambda p=policy: derive_salts(p, SECRET.encode()))
        timed("check the plan", lambda p=policy, s=salts: check_plan(p, salts=s))
        generated = {}
        for target in target_names() if targets == "all" else targets.split(","):
            exporter = _exporter(target, explicit=False)
            if exporter is None:
                continue
            export = timed(f"export {target}", lambda e=exporter, p=policy, s=salts: e(p, s, ExportOptions()))
            generated[export.target] = list(export.files)
        target_dir = out_dir / ("warm" if warm else "timed")
        timed("write (empty directory)", lambda g=generated, d=target_dir: write_files(d, g))
    return stages


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tenants", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--markdown", action="store_true")
    parser.add_argument("--target", default="all", help="generate's --target (default: all)")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="quotacalc-bench-"))
    try:
        plan_path = work / "plan.yaml"
        plan_path.write_text(yaml.safe_dump(plan_document(args.tenants), sort_keys=False), encoding="utf-8")
        env = {**os.environ, "QUOTACALC_SALT_SECRET": SECRET}
        quotacalc = [shutil.which("quotacalc") or "quotacalc", "generate", str(plan_path), "--target", args.target]
        _run([*quotacalc, "--out", str(work / "warm-up")], env)  # fills the config cache
        fresh, current, check = [], [], []
        for run in range(args.runs):
            out = work / f"out-{run}"
            fresh.append(_run([*quotacalc, "--out", str(out)], env))
            current.append(_run([*quotacalc, "--out", str(out)], env))
            check.append(_run([*quotacalc, "--out", str(out), "--check"], env))
        stages = in_process_stages(plan_path, work / "stages", args.target)
        files = sum(1 for path in (work / "out-0").rglob("*") if path.is_file())
        rows = [
            ("generate, empty directory", fresh),
            ("generate, directory current", current),
            ("generate --check", check),
        ]
        load = os.getloadavg()[0]
        if args.markdown:
            print(
                f"| command ({args.tenants} tenants, {files} files) | wall min | wall median | CPU min | CPU median |"
            )
            print("|---|---:|---:|---:|---:|")
            for name, samples in rows:
                walls, cpus = [w for w, _ in samples], [c for _, c in samples]
                print(
                    f"| {name} | {min(walls):.2f} s | {statistics.median(walls):.2f} s | {min(cpus):.2f} s | "
                    f"{statistics.median(cpus):.2f} s |"
                )
            print(
                f"\n{args.runs} runs each in fresh processes (warm config cache), load average {load:.1f} "
                f"on {os.cpu_count()} CPUs. In-process stages, warm, CPU time:\n"
            )
            print("| stage | time |")
            print("|---|---:|")
            for name, seconds in stages:
                print(f"| {name} | {seconds * 1e3:.0f} ms |")
        else:
            print(f"load average {load:.1f} on {os.cpu_count()} CPUs")
            for name, samples in rows:
                walls, cpus = [w for w, _ in samples], [c for _, c in samples]
                print(f"{name:30s} wall min {min(walls):.2f} s  CPU min {min(cpus):.2f} s")
            for name, seconds in stages:
                print(f"  {name:30s} {seconds * 1e3:7.1f} ms")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
