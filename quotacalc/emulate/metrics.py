"""``GET /metrics``: Prometheus text with vLLM's metric names (``vllm/v1/metrics/loggers.py``), one series per replica.

Each series carries ``model_name`` and ``engine`` (the replica's index) labels, as vLLM's do. Times are engine
seconds (wall seconds × ``--speed``), so the histograms read as the priced deployment's whatever the speed.
"""

from __future__ import annotations

from collections.abc import Sequence as Seq

from quotacalc.emulate.engine import EngineCore, Histogram


def _labels(model: str, engine: int, **extra: str) -> str:
    pairs = {"model_name": model, "engine": str(engine), **extra}
    return "{" + ",".join(f'{key}="{_escape(value)}"' for key, value in pairs.items()) + "}"


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _number(value: float) -> str:
    return repr(float(value)) if isinstance(value, float) else str(value)


def render(model: str, cores: Seq[EngineCore], late_steps: Seq[int] = (), lags: Seq[Histogram] = ()) -> str:
    """The metrics of every replica of the pool; ``late_steps``: each replica's steps that fell too far behind the
    clock to catch up; ``lags``: how late each replica's steps handed out their tokens (wall seconds)."""
    lines: list[str] = []

    def family(name: str, kind: str, help_text: str, values: list[tuple[str, float]]) -> None:
        lines.append(f"# HELP {name} {help_text}")
        lines.append(f"# TYPE {name} {kind}")
        for labels, value in values:
            lines.append(f"{name}{labels} {_number(value)}")

    def each(get) -> list[tuple[str, float]]:
        return [(_labels(model, index), get(core)) for index, core in enumerate(cores)]

    family("vllm:num_requests_running", "gauge", "Number of requests in model execution batches.",
           each(lambda c: len(c.running)))  # fmt: skip
    family("vllm:num_requests_waiting", "gauge", "Number of requests waiting to be processed.",
           each(lambda c: c.n_waiting))  # fmt: skip
    family("vllm:kv_cache_usage_perc", "gauge", "KV-cache usage. 1 means 100 percent usage.",
           each(lambda c: c.pool.usage()))  # fmt: skip
    config = [
        (_labels(model, index, block_size=str(core.settings.block_tokens), num_gpu_blocks=str(core.pool.num_blocks),
                 enable_prefix_caching="True"), 1)
        for index, core in enumerate(cores)
    ]  # fmt: skip
    family("vllm:cache_config_info", "gauge", "Information of the LLMEngine CacheConfig", config)
    family("vllm:prefix_cache_queries_total", "counter",
           "Prefix cache queries, in terms of number of queried tokens.",
           each(lambda c: c.stats.prefix_cache_queries))  # fmt: skip
    family("vllm:prefix_cache_hits_total", "counter", "Prefix cache hits, in terms of number of cached tokens.",
           each(lambda c: c.stats.prefix_cache_hits))  # fmt: skip
    family("vllm:num_preemptions_total", "counter", "Cumulative number of preemption from the engine.",
           each(lambda c: c.stats.preemptions))  # fmt: skip
    family("vllm:prompt_tokens_total", "counter", "Number of prefill tokens processed.",
           each(lambda c: c.stats.prompt_tokens))  # fmt: skip
    family("vllm:generation_tokens_total", "counter", "Number of generation tokens processed.",
           each(lambda c: c.stats.generation_tokens))  # fmt: skip
    finished = []
    for index, core in enumerate(cores):
        for reason, count in sorted(core.stats.finished.items()):
            finished.append((_labels(model, index, finished_reason=reason), count))
    family("vllm:request_success_total", "counter", "Count of finished requests by finish reason.", finished)
    for name, help_text, get in (
        ("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", lambda c: c.stats.ttft_s),
        ("vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", lambda c: c.stats.itl_s),
        ("vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.", lambda c: c.stats.e2e_s),
    ):
        lines.append(f"# HELP {name} {help_text}")
        lines.append(f"# TYPE {name} histogram")
        for index, core in enumerate(cores):
            _histogram(lines, name, model, index, get(core))
    family("quotacalc:emulate_late_steps_total", "counter",
           "Steps a replica started more than the catch-up allowance behind its deadline: the emulator lost time.",
           [(_labels(model, index), count) for index, count in enumerate(late_steps)])  # fmt: skip
    if lags:
        name = "quotacalc:emulate_step_lag_seconds"
        lines.append(f"# HELP {name} How late a step handed out its tokens after its deadline, wall seconds.")
        lines.append(f"# TYPE {name} histogram")
        for index, histogram in enumerate(lags):
            _histogram(lines, name, model, index, histogram)
    return "\n".join(lines) + "\n"


def _histogram(lines: list[str], name: str, model: str, engine: int, histogram: Histogram) -> None:
    for bound, count in zip(histogram.bounds, histogram.cumulative(), strict=True):
        lines.append(f"{name}_bucket{_labels(model, engine, le=repr(float(bound)))} {count}")
    lines.append(f"{name}_bucket{_labels(model, engine, le='+Inf')} {histogram.count}")
    lines.append(f"{name}_count{_labels(model, engine)} {histogram.count}")
    lines.append(f"{name}_sum{_labels(model, engine)} {histogram.sum!r}")
