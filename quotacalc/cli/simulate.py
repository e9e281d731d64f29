"""``quotacalc simulate SCENARIO.yaml``: run the scenario under each policy and queueing mode, and render.

Parse, call the simulator, render: a rich table, ``--json`` or ``--plot FILE``. Ctrl-C stops the
run in progress; what was simulated is printed, marked partial, and the exit code is 130.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
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


#: The most seeds --seeds runs (each runs every policy and queueing mode again).
MAX_SEEDS = 1000
#: Formats --trace and --timeseries write, by suffix (Parquet needs pyarrow: the 'trace' extra).
TABLE_FORMATS = (".jsonl", ".csv", ".parquet")


def run_simulate(
    path: str,
    *,
    seed: int | None,
    as_json: bool,
    plot: str | None,
    requests: int | None,
    seeds: int | None = None,
    trace: str | None = None,
    timeseries: str | None = None,
    max_seconds: float | None = None,
) -> None:
    """The command's body: every flag checked before the scenario is read, the runs, then the outputs."""
    from quotacalc.inputs.scenario import MAX_SEED, load_scenario
    from quotacalc.sim.events import build_setup

    _check_flags(
        seed=seed,
        plot=plot,
        requests=requests,
        seeds=seeds,
        trace=trace,
        timeseries=timeseries,
        max_seconds=max_seconds,
    )
    updates: dict[str, Any] = {}
    if seed is not None:
        updates["seed"] = seed
    if requests is not None:
        updates["requests"] = requests
        updates["duration_s"] = None
    loaded = load_scenario(path, updates)
    setup = build_setup(loaded)
    if seed is not None and seed + (seeds or 1) - 1 > MAX_SEED:
        raise QuotacalcError(f"--seed {seed:,} with --seeds {seeds:,} runs past the largest seed", field="--seeds")
    done = _run_all(setup, loaded.scenario, seeds=seeds, trace=trace, timeseries=timeseries, max_seconds=max_seconds)
    _emit(setup, done, seeds=seeds, as_json=as_json, trace=trace, timeseries=timeseries, plot=plot)


def _check_flags(
    *,
    seed: int | None,
    plot: str | None,
    requests: int | None,
    seeds: int | None,
    trace: str | None,
    timeseries: str | None,
    max_seconds: float | None,
) -> None:
    """Every flag's value and target, before anything is read or run."""
    from quotacalc.inputs.scenario import MAX_EXPECTED_REQUESTS, MAX_SEED

    if plot is not None and Path(plot).suffix.lower() not in (".png", ".svg"):
        raise UsageError(f"cannot plot to '{plot}'", field="--plot", fix="name a .png or .svg file")
    _check_range("--requests", requests, 1, MAX_EXPECTED_REQUESTS)
    _check_range("--seed", seed, 0, MAX_SEED)
    _check_range("--seeds", seeds, 1, MAX_SEEDS)
    if max_seconds is not None and not (0 < max_seconds < float("inf")):
        raise QuotacalcError(f"must be a positive number of seconds, got {max_seconds:g}", field="--max-seconds")
    for flag, target in (("--trace", trace), ("--timeseries", timeseries)):
        if target is not None:
            _check_table_target(flag, Path(target))
    if plot is not None:
        from quotacalc.cli.sim_plot import require_matplotlib

        require_matplotlib()
        _check_plot_folder(Path(plot))


@dataclass
class _Runs:
    """What the runs of every seed, policy and queueing mode gave (``runs``: the first seed's, one per pair)."""

    seed_list: list[int]
    combos: list[tuple[str, str]]
    runs: list[PolicyRun] = field(default_factory=list)
    seed_runs: list[tuple[int, PolicyRun]] = field(default_factory=list)
    trace_rows: list[dict[str, Any]] = field(default_factory=list)
    series_rows: list[dict[str, Any]] = field(default_factory=list)
    stopped_by: str | None = None

    @property
    def partial(self) -> bool:
        return self.stopped_by is not None or len(self.seed_runs) < len(self.combos) * len(self.seed_list)


def _run_all(
    setup: Any,
    scenario: Any,
    *,
    seeds: int | None,
    trace: str | None,
    timeseries: str | None,
    max_seconds: float | None,
) -> _Runs:
    """Every policy and queueing mode for every seed, under one progress bar; Ctrl-C ends them all, --max-seconds
    gives each run that remains an equal share of the wall time that remains."""
    import time

    from quotacalc.sim.events import Simulation

    done = _Runs(
        seed_list=[scenario.seed + offset for offset in range(seeds or 1)],
        combos=[(policy, queueing) for queueing in scenario.queueing for policy in scenario.policies],
    )
    total = len(done.combos) * len(done.seed_list)
    started = time.monotonic()
    with _progress(total) as advance:
        for seed_number, run_seed in enumerate(done.seed_list):
            for number, (policy, queueing) in enumerate(done.combos):
                done_before = seed_number * len(done.combos) + number
                deadline = None
                if max_seconds is not None:
                    left = max_seconds - (time.monotonic() - started)
                    deadline = time.monotonic() + max(0.0, left) / (total - done_before)
                simulation = Simulation(
                    setup,
                    policy,
                    queueing,
                    trace=trace is not None,
                    timeseries_interval_s=scenario.timeseries_interval_s if timeseries is not None else None,
                    seed=run_seed,
                )
                result = simulation.run(
                    progress=lambda count, n=done_before: advance(n + count),
                    should_stop=None if deadline is None else (lambda d=deadline: time.monotonic() >= d),
                )
                _keep(done, simulation, result, run_seed, first_seed=seed_number == 0)
                if result.stopped_by == "interrupted":
                    break
            if done.stopped_by == "interrupted":
                break
    return done


def _keep(done: _Runs, simulation: Any, result: PolicyRun, run_seed: int, *, first_seed: bool) -> None:
    """One run's result, trace and time series added to ``done``; how it stopped, if it stopped early."""
    from quotacalc.sim.events import TIMESERIES_COLUMNS, TRACE_COLUMNS

    done.seed_runs.append((run_seed, result))
    extra = {"seed": run_seed, "policy": result.policy, "queueing": result.queueing}
    if simulation.trace is not None:
        done.trace_rows += [{**extra, **dict(zip(TRACE_COLUMNS, row, strict=True))} for row in simulation.trace]
    if simulation.timeseries is not None:
        done.series_rows += [
            {**extra, **dict(zip(TIMESERIES_COLUMNS, row, strict=True))} for row in simulation.timeseries
        ]
    if first_seed:
        done.runs.append(result)
    if result.stopped_by in ("interrupted", "max_seconds"):
        done.stopped_by = result.stopped_by


def _emit(
    setup: Any,
    done: _Runs,
    *,
    seeds: int | None,
    as_json: bool,
    trace: str | None,
    timeseries: str | None,
    plot: str | None,
) -> None:
    """The tables or JSON, the trace, time series and plot files, the warnings, and how a partial run ends."""
    from quotacalc.sim.events import TIMESERIES_COLUMNS, TRACE_COLUMNS

    seed_list = done.seed_list if seeds else None
    summary = _seed_summary(done.seed_runs, done.combos) if seeds is not None else None
    document = simulate_json(setup, done.runs, partial=done.partial, seeds=seed_list, summary=summary)
    if done.stopped_by is not None:
        document["stopped_by"] = done.stopped_by
    if as_json:
        sys.stdout.write(json.dumps(document, indent=2, allow_nan=False) + "\n")
    else:
        _tables(setup, done.runs, partial=done.partial, summary=summary, seeds=seed_list)
    if trace is not None:
        _write_table(Path(trace), ("seed", "policy", "queueing", *TRACE_COLUMNS), done.trace_rows, flag="--trace")
    if timeseries is not None:
        columns = ("seed", "policy", "queueing", *TIMESERIES_COLUMNS)
        _write_table(Path(timeseries), columns, done.series_rows, flag="--timeseries")
    if plot is not None:
        from quotacalc.cli.sim_plot import plot_runs

        plot_runs(done.runs, Path(plot))
    from quotacalc.cli.streams import print_warnings

    print_warnings(setup.warnings)
    if done.stopped_by == "max_seconds":
        sys.stderr.write("quotacalc: --max-seconds reached: the results above cover what was simulated\n")
    elif done.partial:
        # 128 + SIGINT, as everywhere in quotacalc: an interrupted CI job must never look green.
        sys.stderr.write("quotacalc: interrupted: the results above are partial\n")
        sys.exit(130)


def _seed_summary(seed_runs: list[tuple[int, PolicyRun]], combos: list[tuple[str, str]]) -> list[dict[str, Any]]:
    from quotacalc.sim.metrics import seed_summary

    summary = []
    for policy, queueing in combos:
        headlines = [run.headline for _, run in seed_runs if run.policy == policy and run.queueing == queueing]
        figures = seed_summary(headlines)
        summary.append(
            {
                "policy": policy,
                "queueing": queueing,
                "seeds": len(headlines),
                "figures": {name: value.model_dump() for name, value in figures.items()},
            }
        )
    return summary


def _check_table_target(flag: str, target: Path) -> None:
    """A --trace or --timeseries file: a known format, in a folder that exists, checked before the run."""
    suffix = target.suffix.lower()
    if suffix not in TABLE_FORMATS:
        raise UsageError(
            f"cannot write '{target}'", field=flag, fix=f"name a {', '.join(TABLE_FORMATS)} file (by its suffix)"
        )
    if suffix == ".parquet":
        try:
            import pyarrow  # noqa: F401
        except ImportError:
            raise UsageError(
                "writing Parquet needs pyarrow",
                field=flag,
                fix="pip install 'quotacalc[trace]', or name a .jsonl or .csv file",
            ) from None
    folder = target.parent
    if target.is_dir() or not folder.is_dir():
        raise UsageError(
            "is a directory" if target.is_dir() else "is in no folder that exists",
            source=str(target),
            field=flag,
            fix="name a file in a directory you can write",
        )


def _write_table(target: Path, columns: tuple[str, ...], rows: list[dict[str, Any]], *, flag: str) -> None:
    """Rows to JSONL, CSV or Parquet, written atomically."""
    from quotacalc.fileio import unwritable, write_bytes_atomic

    suffix = target.suffix.lower()
    if suffix == ".jsonl":
        data = "".join(json.dumps(row, allow_nan=False) + "\n" for row in rows).encode()
    elif suffix == ".csv":
        import csv
        import io

        buffer = io.StringIO()
        writer = csv.DictWriter(buffer, fieldnames=list(columns), lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
        data = buffer.getvalue().encode()
    else:
        import io

        import pyarrow as pa
        import pyarrow.parquet as pq

        table = pa.Table.from_pylist(rows, schema=None) if rows else pa.table({c: [] for c in columns})
        sink = io.BytesIO()
        pq.write_table(table, sink)
        data = sink.getvalue()
    try:
        write_bytes_atomic(target, data)
    except OSError as error:
        raise unwritable(error, target, field=flag) from None


def _check_range(flag: str, value: int | None, low: int, high: int) -> None:
    """A count flag outside what the scenario accepts: a bad value (exit 1), said in the flag's terms."""
    if value is not None and not low <= value <= high:
        raise QuotacalcError(f"must be from {low:,} to {high:,}, got {value:,}", field=flag)


class _progress:
    """A progress bar on stderr with the time left, shown once a run has taken a second, on a terminal only;
    ``advance(done_runs)`` (a fraction of a run counts)."""

    #: Seconds before the bar appears: a quick run prints nothing but its results.
    DELAY_S = 1.0

    def __init__(self, total: int) -> None:
        import time

        self.total = total
        self.bar: Any = None
        self.started = time.monotonic()
        self.enabled = sys.stderr.isatty()

    def __enter__(self):
        return self._advance

    def _start(self) -> None:
        from rich.console import Console
        from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

        self.bar = Progress(
            TextColumn("simulating"),
            BarColumn(),
            TextColumn("{task.percentage:>3.0f}%"),
            TimeElapsedColumn(),
            TextColumn("left"),
            TimeRemainingColumn(),
            console=Console(stderr=True),
            transient=True,
        )
        self.bar.start()
        self.task = self.bar.add_task("simulate", total=self.total)

    def _advance(self, completed: float) -> None:
        if not self.enabled:
            return
        if self.bar is None:
            import time

            if time.monotonic() - self.started < self.DELAY_S:
                return
            self._start()
        self.bar.update(self.task, completed=completed)

    def __exit__(self, *exc: object) -> None:
        if self.bar is not None:
            self.bar.stop()


def simulate_json(
    setup: SimSetup,
    runs: list[PolicyRun],
    *,
    partial: bool,
    seeds: list[int] | None = None,
    summary: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """The ``--json`` document: stable keys, no NaN, every run with its per-tenant breakdown (the first seed's),
    and with --seeds each headline figure's mean and 95% interval over the seeds."""
    scenario = setup.loaded.scenario
    document = {
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
            "policy_options": scenario.options(),
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
    if seeds is not None:
        document["seeds"] = {"seeds": seeds, "summary": summary}
    return document


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


def _tables(
    setup: SimSetup,
    runs: list[PolicyRun],
    *,
    partial: bool,
    summary: list[dict[str, Any]] | None = None,
    seeds: list[int] | None = None,
) -> None:
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
    if summary is not None and seeds is not None:
        print_whole(console, _summary_table(summary, seeds))
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


def _summary_table(summary: list[dict[str, Any]], seeds: list[int]) -> Any:
    """The headline's figures over the seeds: mean [95% interval]."""
    from rich.box import SIMPLE_HEAD
    from rich.table import Table

    table = Table(box=SIMPLE_HEAD, title=f"over {len(seeds)} seeds ({seeds[0]}..{seeds[-1]}): mean [95% interval]")
    columns = (
        ("429 share", "admission_reject_share", lambda v: f"{100 * v:.1f}%"),
        ("overshoot % contract", "overshoot_pct_of_contract", lambda v: f"{v:,.1f}%"),
        ("unused reserved % contract", "unused_reservation_pct_of_contract", lambda v: f"{v:,.1f}%"),
        ("TTFT p99 within", "ttft_p99_within_s", _fmt_s),
        ("TTFT p99 above", "ttft_p99_above_s", _fmt_s),
        ("Jain", "jain_fairness_index", lambda v: f"{v:.3f}"),
    )
    table.add_column("policy", no_wrap=True)
    table.add_column("queueing", no_wrap=True)
    for title, _, _ in columns:
        table.add_column(title, justify="right", no_wrap=True)
    for row in summary:
        cells = []
        for _, key, fmt in columns:
            figure = row["figures"][key]
            if figure["mean"] is None:
                cells.append("-")
            elif figure["ci95_low"] is None:
                cells.append(fmt(figure["mean"]))
            else:
                cells.append(f"{fmt(figure['mean'])} [{fmt(figure['ci95_low'])}, {fmt(figure['ci95_high'])}]")
        table.add_row(row["policy"], row["queueing"], *cells)
    return table


def _share(served: float | None, weight: float | None) -> str:
    if served is None or weight is None:
        return "-"
    return f"{served:.0%} / {weight:.0%}"


def _waits(waits: dict[str, float]) -> str:
    """The reasons a request waited, longest first, those under a millisecond left out."""
    shown = sorted(((seconds, reason) for reason, seconds in waits.items() if seconds >= 1e-3), reverse=True)
    return ", ".join(f"{reason} {_fmt_s(seconds)}" for seconds, reason in shown) or "-"
