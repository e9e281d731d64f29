"""``quotacalc simulate SCENARIO.yaml``: run the scenario under each policy and queueing mode, and render.

Parse, call the simulator, render: a rich table, ``--json`` or ``--plot FILE``. Ctrl-C stops the
run in progress; what was simulated is printed, marked partial, and the exit code is 130.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from quotacalc.core.words import plural
from quotacalc.errors import QuotacalcError, UsageError

if TYPE_CHECKING:
    from quotacalc.sim.events import SimSetup
    from quotacalc.sim.metrics import PolicyRun

#: Bumped only when a key or a policy's name is renamed or removed; new keys may appear at any time.
SIMULATE_SCHEMA_VERSION = 2


def _check_plot_folder(plot: Path) -> None:
    """The plot's folder must exist and take a new file before the simulation runs, not after (a run can take
    minutes); the write itself is still checked when it happens."""
    import os

    folder = plot.parent
    if plot.is_dir():
        why = "is a directory"
    elif not folder.is_dir():
        why = "is in no folder that exists"
    elif not os.access(folder, os.W_OK | os.X_OK):
        why = "is in a folder this user cannot write"
    else:
        return
    raise UsageError(why, source=str(plot), field="--plot", fix="name a file in a directory you can write")


def run_simulate(path: str, *, seed: int | None, as_json: bool, plot: str | None, requests: int | None) -> None:
    """The command's body."""
    from quotacalc.inputs.scenario import MAX_EXPECTED_REQUESTS, MAX_SEED, load_scenario
    from quotacalc.sim.events import Simulation, build_setup

    if plot is not None and Path(plot).suffix.lower() not in (".png", ".svg"):
        raise UsageError(f"cannot plot to '{plot}'", field="--plot", fix="name a .png or .svg file")
    _check_range("--requests", requests, 1, MAX_EXPECTED_REQUESTS)
    _check_range("--seed", seed, 0, MAX_SEED)
    if plot is not None:
        from quotacalc.cli.sim_plot import require_matplotlib

        require_matplotlib()
        _check_plot_folder(Path(plot))
    updates: dict[str, Any] = {}
    if seed is not None:
        updates["seed"] = seed
    if requests is not None:
        updates["requests"] = requests
        updates["duration_s"] = None
    loaded = load_scenario(path, updates)
    setup = build_setup(loaded)
    scenario = loaded.scenario
    combos = [(policy, queueing) for queueing in scenario.queueing for policy in scenario.policies]
    runs: list[PolicyRun] = []
    ttft_samples: list[dict[str, list[float]]] = []
    with _progress(len(combos)) as advance:
        for number, (policy, queueing) in enumerate(combos):
            simulation = Simulation(setup, policy, queueing)
            result = simulation.run(progress=lambda done, n=number: advance(n + done))
            runs.append(result)
            ttft_samples.append(
                {t.name: list(c.ttft_s) for t, c in zip(setup.tenants, simulation.counters, strict=True) if c.ttft_s}
            )
            if result.partial:
                break
    partial = any(run.partial for run in runs) or len(runs) < len(combos)
    document = simulate_json(setup, runs, partial=partial)
    if as_json:
        sys.stdout.write(json.dumps(document, indent=2, allow_nan=False) + "\n")
    else:
        _tables(setup, runs, partial=partial)
    if plot is not None:
        from quotacalc.cli.sim_plot import plot_runs

        plot_runs(runs, ttft_samples, Path(plot))
    from quotacalc.cli.streams import print_warnings

    print_warnings(setup.warnings)
    if partial:
        # 128 + SIGINT, as everywhere in quotacalc: an interrupted CI job must never look green.
        sys.stderr.write("quotacalc: interrupted: the results above are partial\n")
        sys.exit(130)


def _check_range(flag: str, value: int | None, low: int, high: int) -> None:
    """A count flag outside what the scenario accepts: a bad value (exit 1), said in the flag's terms."""
    if value is not None and not low <= value <= high:
        raise QuotacalcError(f"must be from {low:,} to {high:,}, got {value:,}", field=flag)


class _progress:
    """A rich progress bar on stderr, only when stderr is a terminal; ``advance(done_runs)``."""

    def __init__(self, total: int) -> None:
        self.total = total
        self.bar: Any = None

    def __enter__(self):
        if sys.stderr.isatty():
            from rich.console import Console
            from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

            self.bar = Progress(
                TextColumn("simulating"),
                BarColumn(),
                TextColumn("{task.percentage:>3.0f}%"),
                TimeElapsedColumn(),
                console=Console(stderr=True),
                transient=True,
            )
            self.bar.start()
            self.task = self.bar.add_task("simulate", total=self.total)
        return self._advance

    def _advance(self, completed: float) -> None:
        if self.bar is not None:
            self.bar.update(self.task, completed=completed)

    def __exit__(self, *exc: object) -> None:
        if self.bar is not None:
            self.bar.stop()


def simulate_json(setup: SimSetup, runs: list[PolicyRun], *, partial: bool) -> dict[str, Any]:
    """The ``--json`` document: stable keys, no NaN, every run with its per-tenant breakdown."""
    scenario = setup.loaded.scenario
    return {
        "schema_version": SIMULATE_SCHEMA_VERSION,
        "command": "simulate",
        "partial": partial,
        # The pools' pricing warnings (stderr carries them too), as every command's JSON has them.
        "warnings": list(setup.warnings),
        "scenario": {
            "source": setup.loaded.source,
            "seed": scenario.seed,
            "warmup_fraction": scenario.warmup_fraction,
            "failed_prefill_billing": scenario.failed_prefill_billing,
            "duration_s": scenario.duration_s,
            "requests": scenario.requests,
            "lease_tokens": scenario.lease_tokens,
            "window_s": scenario.window_s,
            "engine": scenario.engine.model_dump(),
        },
        "pools": [
            {
                "pool": pool.name,
                "replicas": pool.replicas,
                "output_weight": pool.output_weight,
                "replica_units_per_s": pool.replica_units_per_s,
                "kv_pool_tokens": pool.kv_pool_tokens,
                "max_num_seqs": pool.max_num_seqs,
                "max_num_batched_tokens": pool.max_num_batched_tokens,
            }
            for pool in setup.pools
        ],
        "policies": [run.model_dump(mode="json") for run in runs],
    }


def _fmt_s(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value * 1e3:,.1f} ms" if value < 1 else f"{value:,.2f} s"


def _fmt_units(value: float) -> str:
    return f"{value:,.0f}"


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:,.1f}%"


def _rate(value: float | None, pct: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:,.0f} ({_pct(pct)})"


def _tables(setup: SimSetup, runs: list[PolicyRun], *, partial: bool) -> None:
    from rich.box import SIMPLE_HEAD
    from rich.console import Console
    from rich.table import Table

    from quotacalc.cli.tables import print_whole  # never cuts a figure, at any terminal width

    # Wide enough for the comparison when piped (rich assumes 80 columns off a terminal).
    console = Console(highlight=False, soft_wrap=False, width=max(Console().width, 180))
    scenario = setup.loaded.scenario
    pools = ", ".join(
        f"{p.name}: {plural(p.replicas, 'replica')}, W {p.output_weight:.2f}, {p.replica_units_per_s:,.0f} units/s each"
        for p in setup.pools
    )
    console.print(f"{setup.loaded.source}: seed {scenario.seed}; {pools}")
    console.print(
        f"headline: after a warm-up of {scenario.warmup_fraction:.0%} of the run, until arrivals stop; "
        f"a prefill the platform fails is billed to the {scenario.failed_prefill_billing}"
    )
    if partial:
        console.print("[bold yellow]partial: stopped early; the figures cover what was simulated[/]")
    headline = Table(box=SIMPLE_HEAD)
    for name in (
        "policy",
        "queueing",
        "429 share",
        "never adm.",
        "overshoot units/s (% contract)",
        "unused reserved units/s (% contract)",
        "TTFT p99 within / above",
        "ITL p99 within / above",
        "Jain",
    ):
        headline.add_column(name, justify="left" if name in ("policy", "queueing") else "right", no_wrap=True)
    for run in runs:
        h = run.headline
        headline.add_row(
            run.policy + (" (partial)" if run.partial else ""),
            run.queueing,
            _pct(None if h.admission_reject_share is None else 100 * h.admission_reject_share),
            f"{h.never_admissible:,}",
            _rate(h.overshoot_units_per_s, h.overshoot_pct_of_contract),
            _rate(h.unused_reservation_units_per_s, h.unused_reservation_pct_of_contract),
            f"{_fmt_s(h.ttft_p99_within_s)} / {_fmt_s(h.ttft_p99_above_s)}",
            f"{_fmt_s(h.itl_p99_within_s)} / {_fmt_s(h.itl_p99_above_s)}",
            "-" if h.jain_fairness_index is None else f"{h.jain_fairness_index:.3f}",
        )
    print_whole(console, headline)
    above = sorted({name for run in runs for name in run.headline.tenants_above_contract})
    console.print(
        "above contract (offered more units/s than contracted, in the window): " + (", ".join(above) or "none")
    )
    columns = (
        ("policy", "left"),
        ("queueing", "left"),
        ("admitted", "right"),
        ("429s", "right"),
        ("overshoot", "right"),
        ("unused unit·s", "right"),
        ("leaked", "right"),
        ("preempt", "right"),
        ("KV peak", "right"),
        ("TTFT p50/p99", "right"),
        ("ITL p50/p99", "right"),
        ("goodput units/s", "right"),
    )
    table = Table(box=SIMPLE_HEAD, title="whole run")
    for name, justify in columns:
        table.add_column(name, justify=justify, no_wrap=True)  # type: ignore[arg-type]
    for run in runs:
        table.add_row(
            run.policy + (" (partial)" if run.partial else ""),
            run.queueing,
            f"{run.admitted:,}/{run.requests:,}",
            f"{run.admission_rejects:,}",
            _fmt_units(run.quota_overshoot_units),
            f"{run.unused_reservation_unit_s:,.3g}",
            _fmt_units(run.leaked_reservation_units),
            f"{run.preemptions:,}",
            f"{run.resident_kv_peak_tokens:,}",
            f"{_fmt_s(run.ttft_p50_s)} / {_fmt_s(run.ttft_p99_s)}",
            f"{_fmt_s(run.itl_p50_s)} / {_fmt_s(run.itl_p99_s)}",
            _fmt_units(run.goodput_units_per_s),
        )
    print_whole(console, table)
    tenants = Table(box=SIMPLE_HEAD, title="per tenant")
    for name, justify in (
        ("policy / queueing", "left"),
        ("tenant", "left"),
        ("tier", "left"),
        ("offered / contract", "right"),
        ("admitted", "right"),
        ("429s", "right"),
        ("other rejects", "left"),
        ("overshoot", "right"),
        ("preempt", "right"),
        ("KV p99", "right"),
        ("TTFT p99", "right"),
        ("ITL p99", "right"),
        ("served / weight share", "right"),
        ("mean wait by reason", "left"),
    ):
        tenants.add_column(name, justify=justify, no_wrap=True)  # type: ignore[arg-type]
    for run in runs:
        for index, tenant in enumerate(run.tenants):
            tenants.add_row(
                f"{run.policy} / {run.queueing}" if index == 0 else "",
                tenant.tenant,
                tenant.tier,
                "-"
                if tenant.offered_units_per_s is None
                else f"{tenant.offered_units_per_s / tenant.bucket_rate_units_per_s:,.2f}x",
                f"{tenant.admitted:,}/{tenant.requests:,}",
                f"{tenant.admission_rejects:,}",
                ", ".join(f"{k} {v:,}" for k, v in tenant.other_rejects.items() if v) or "-",
                _fmt_units(tenant.quota_overshoot_units),
                f"{tenant.preemptions:,}",
                "-" if tenant.resident_kv_p99_tokens is None else f"{tenant.resident_kv_p99_tokens:,.0f}",
                _fmt_s(tenant.ttft_p99_s),
                _fmt_s(tenant.itl_p99_s),
                _share(tenant.served_share_backlogged, tenant.weight_share_backlogged),
                _waits(tenant.wait_s_mean),
            )
    print_whole(console, tenants)


def _share(served: float | None, weight: float | None) -> str:
    if served is None or weight is None:
        return "-"
    return f"{served:.0%} / {weight:.0%}"


def _waits(waits: dict[str, float]) -> str:
    """The reasons a request waited, longest first, those under a millisecond left out."""
    shown = sorted(((seconds, reason) for reason, seconds in waits.items() if seconds >= 1e-3), reverse=True)
    return ", ".join(f"{reason} {_fmt_s(seconds)}" for seconds, reason in shown) or "-"
