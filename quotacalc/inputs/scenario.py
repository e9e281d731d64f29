"""Simulation scenarios: a plan (named or embedded), each tenant's workload, the policies to compare.

Everything is validated by pydantic; a bad file becomes one line naming the YAML path
(``workload.tenants[2].arrival.rate_rps``). Usage files for replay (CSV or JSONL with timestamp,
tenant, prompt_tokens, output_tokens) are read here too, so the simulator never touches a file.
"""

from __future__ import annotations

import contextlib
import math
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal, get_args

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from quotacalc.admission.policies import POLICY_NAMES, RETIRED_NAMES, option_defaults
from quotacalc.core.deployment import MAX_BATCH, MAX_BURST_S, MAX_CONTEXT_TOKENS, MAX_TOKENS_PER_REQUEST, digit_count
from quotacalc.core.plan import Plan
from quotacalc.errors import QuotacalcError, close_names

if TYPE_CHECKING:
    from quotacalc.inputs.plan import ReadPlan

#: Who pays for the prompt of a request that ends before its first token through no act of the client (an engine
#: failure or error during prefill): the platform (the tenant received nothing, docs/method.md) or the tenant.
FAILED_PREFILL_BILLING = ("platform", "tenant")
QUEUEING_NAMES = ("fair", "deep_priority")
#: A scenario expected to send more requests than this without a request cap is a typo, not a plan:
#: at ~150 us a request it would run for hours.
MAX_EXPECTED_REQUESTS = 20_000_000
#: The largest seed: random.Random takes any integer, but JSON readers and the flag's range stop at 63 bits.
MAX_SEED = 2**63 - 1
#: The longest length a distribution, a max_tokens or a usage row may give (a prompt or output longer than any
#: context is a typo); past it, W x max_tokens overflows a float.
MAX_TOKENS = MAX_TOKENS_PER_REQUEST
#: The longest time a scenario's seconds may give (a burst, a silence, a window, a restart, a run): a year. Past it
#: the simulated clock loses its milliseconds, and at 1e308 becomes infinity (NaN latencies).
MAX_SECONDS = MAX_BURST_S
#: The slowest arrival rate: one request a year.
MIN_RATE_RPS = 1 / MAX_SECONDS
#: The shortest window over which overshoot is reported: a millisecond (a window index stays a small integer).
MIN_WINDOW_S = 1e-3
#: Failures per replica per hour at most: one a second (more is an engine that never serves, and a run that never ends).
MAX_FAILURES_PER_HOUR = 3600
#: A usage file's timestamp in seconds past this is no Unix time in seconds (it is the year 5138): milliseconds.
MAX_TIMESTAMP_S = 1e11


class _Strict(BaseModel):
    model_config = ConfigDict(defer_build=True, frozen=True, extra="forbid", allow_inf_nan=False)


def _positive(value: float) -> float:
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"must be a positive finite number, got {value}")
    return value


def _seconds(value: float) -> float:
    """A positive, finite time of at most a year."""
    _positive(value)
    if value > MAX_SECONDS:
        raise ValueError(f"must be at most {MAX_SECONDS:,} s (a year), got {value:g}")
    return value


def _tokens(value: int) -> int:
    """A length or a max_tokens: at least one token (vLLM refuses max_tokens < 1), at most MAX_TOKENS."""
    if value < 1:
        raise ValueError("must be at least 1")
    if value > MAX_TOKENS:
        raise ValueError(f"must be at most {MAX_TOKENS:,}, got {_shown(value)}")
    return value


def _mean_tokens(value: float) -> float:
    """A median or mean length: positive, finite, at most MAX_TOKENS."""
    _positive(value)
    if value > MAX_TOKENS:
        raise ValueError(f"must be at most {MAX_TOKENS:,}, got {value:g}")
    return value


def _shown(value: int) -> str:
    return f"a {digit_count(value)}-digit number" if value > 10**20 else f"{value:,}"


Tokens = Annotated[int, AfterValidator(_tokens)]


# Length distributions (tokens) ----------------------------------------------------------------


class Fixed(_Strict):
    """Every request has the same length."""

    kind: Literal["fixed"]
    tokens: Tokens = Field(description="tokens")


class Lognormal(_Strict):
    """Lengths whose logarithm is normal: median e^mu, spread sigma (typical of chat outputs)."""

    kind: Literal["lognormal"]
    median: float = Field(description="median length, tokens")
    sigma: float = Field(ge=0, le=5, description="standard deviation of ln(length)")
    max: Tokens | None = Field(None, description="lengths above this are clamped to it")

    _median = field_validator("median")(classmethod(lambda cls, v: _mean_tokens(v)))

    @model_validator(mode="after")
    def _max_above_median(self) -> Lognormal:
        # A clamp below the median clamps most of the draws: every length would be max, not a lognormal.
        if self.max is not None and self.max < self.median:
            raise ValueError(
                f"max {self.max:,} is below the median {self.median:,g}: more than half the lengths would be clamped "
                "to it (raise max above the median, or use kind: fixed)"
            )
        return self


class Exponential(_Strict):
    """Geometric lengths with the given mean (memoryless: the textbook M/M/1 service)."""

    kind: Literal["exponential"]
    mean: float = Field(description="mean length, tokens")

    _mean = field_validator("mean")(classmethod(lambda cls, v: _mean_tokens(v)))


class Empirical(_Strict):
    """Lengths drawn uniformly from observed values."""

    kind: Literal["empirical"]
    values: tuple[Tokens, ...] = Field(min_length=1, description="observed lengths, tokens")


LengthDistribution = Annotated[Fixed | Lognormal | Exponential | Empirical, Field(discriminator="kind")]


# Arrivals ---------------------------------------------------------------------------------------


def _rate_rps(value: float) -> float:
    """Requests per second: positive, finite, at least one a year (slower, the clock runs to infinity)."""
    _positive(value)
    if value < MIN_RATE_RPS:
        raise ValueError(f"must be at least {MIN_RATE_RPS:.3g} (one request a year), got {value:g}")
    return value


class Poisson(_Strict):
    """Independent arrivals at a constant mean rate."""

    kind: Literal["poisson"]
    rate_rps: float = Field(description="mean requests per second")

    _rate = field_validator("rate_rps")(classmethod(lambda cls, v: _rate_rps(v)))


class OnOff(_Strict):
    """Bursty: Poisson at rate_rps for on_s seconds, then silence for off_s seconds, repeating."""

    kind: Literal["on_off"]
    rate_rps: float = Field(description="mean requests per second while on")
    on_s: float = Field(description="length of a burst, seconds")
    off_s: float = Field(description="silence between bursts, seconds")

    _rate = field_validator("rate_rps")(classmethod(lambda cls, v: _rate_rps(v)))
    _times = field_validator("on_s", "off_s")(classmethod(lambda cls, v: _seconds(v)))


class Replay(_Strict):
    """Arrivals and lengths replayed from a usage file (CSV or JSONL: timestamp, tenant, prompt_tokens, output_tokens)."""

    kind: Literal["replay"]
    file: str = Field(min_length=1, description="usage file, relative to the scenario file")
    tenant: str | None = Field(None, description="the tenant column's value to replay; default: this tenant's name")

    @field_validator("file")
    @classmethod
    def _a_path(cls, value: str) -> str:
        # A NUL or another control character: no file has such a name (and resolving it raised ValueError).
        if any(not character.isprintable() for character in value):
            raise ValueError("is not a file name (it holds a control character or a NUL byte)")
        return value


#: The most users a closed loop may simulate (each is a pending event at all times).
MAX_CLOSED_LOOP_USERS = 1_000_000


class ClosedLoop(_Strict):
    """N users, each sending its next request a think time after its previous one ended (or was refused)."""

    kind: Literal["closed_loop"]
    users: int = Field(ge=1, le=MAX_CLOSED_LOOP_USERS, description="users, each with one request at a time")
    think_s_mean: float = Field(description="mean think time between a request's end and the next, seconds (exp.)")

    _think = field_validator("think_s_mean")(classmethod(lambda cls, v: _seconds(v)))


Arrival = Annotated[Poisson | OnOff | Replay | ClosedLoop, Field(discriminator="kind")]

#: Each ``kind`` of a length distribution or an arrival, and its model: an unknown key lists the kind's own keys.
_KINDS: dict[str, type[BaseModel]] = {
    get_args(model.model_fields["kind"].annotation)[0]: model
    for model in (Fixed, Lognormal, Exponential, Empirical, Poisson, OnOff, Replay, ClosedLoop)
}


class TenantWorkload(_Strict):
    """One tenant's traffic."""

    tenant: str = Field(description="a tenant of the plan")
    arrival: Arrival
    prompt_tokens: LengthDistribution | None = Field(None, description="prompt lengths (not for replay)")
    output_tokens: LengthDistribution | None = Field(
        None, description="lengths the model would produce before its stop condition (not for replay)"
    )
    max_tokens: int | LengthDistribution = Field(4096, description="the max_tokens clients send (at least 1)")
    cached_fraction: float = Field(0.0, ge=0, le=1, description="share of prompt tokens served from the prefix cache")
    cancel_probability: float = Field(0.0, ge=0, le=1, description="share of requests the client cancels")
    cancel_after_s_mean: float = Field(5.0, description="mean delay from arrival to a cancellation, seconds")
    disconnect_probability: float = Field(0.0, ge=0, le=1, description="share of streams the client drops mid-way")
    error_probability: float = Field(0.0, ge=0, le=1, description="share of requests ending in an engine error")
    max_retries: int = Field(
        0,
        ge=0,
        le=100,
        description="times a client retries a 429 (after its Retry-After, with jitter) or, with "
        "retry_on_engine_failure, an engine failure; then it gives up",
    )
    retry_jitter: float = Field(
        0.2, ge=0, le=10, description="a retry waits Retry-After x (1 + retry_jitter x U), U uniform on [0, 1)"
    )
    retry_on_engine_failure: bool = Field(
        False, description="a request lost to an engine failure is sent again at once (another replica takes it)"
    )
    timeout_s: float | None = Field(
        None, description="a client abandons a request with no first token this long after it first sent it"
    )

    _delay = field_validator("cancel_after_s_mean")(classmethod(lambda cls, v: _seconds(v)))
    _timeout = field_validator("timeout_s")(classmethod(lambda cls, v: None if v is None else _seconds(v)))

    @field_validator("max_tokens")
    @classmethod
    def _max_tokens(cls, value: int | Fixed | Lognormal | Exponential | Empirical) -> object:
        # Checked here, not on the union's int branch: a bad distribution's error stays the one reported.
        return _tokens(value) if isinstance(value, int) else value

    @model_validator(mode="after")
    def _lengths(self) -> TenantWorkload:
        if self.arrival.kind != "replay" and (self.prompt_tokens is None or self.output_tokens is None):
            raise ValueError("prompt_tokens and output_tokens are required unless arrival.kind is replay")
        if self.arrival.kind == "replay":
            given = [name for name in ("prompt_tokens", "output_tokens") if getattr(self, name) is not None]
            if given:
                # The file's rows carry each request's lengths; a distribution beside them would never be drawn.
                raise ValueError(
                    f"{' and '.join(given)} cannot go with a replay: the usage file gives each request's "
                    "lengths (remove them, or use another arrival kind)"
                )
        return self


class Workload(_Strict):
    tenants: tuple[TenantWorkload, ...] = Field(min_length=1)


class EngineSettings(_Strict):
    """How each replica's engine schedules (applies to every pool)."""

    order: Literal["fcfs", "priority"] = Field("priority", description="engine queue order in fair mode")
    queue_depth: int = Field(2, ge=1, description="fair mode: requests waiting in each engine's queue at most")
    deep_queue_depth: int = Field(100_000, ge=1, description="deep_priority mode: the engine queue's depth")
    max_num_seqs: int | None = Field(
        None,
        ge=1,
        description="sequences per step; default: the batch each pool is priced at (generate's max-num-seqs)",
    )
    max_num_batched_tokens: int | None = Field(
        None,
        ge=1,
        description="tokens per step (chunked-prefill budget); default: each pool's, as generate writes it (the "
        "deployment's, else its engine's default on that GPU)",
    )
    failure_rate_per_hour: float = Field(
        0.0, description=f"engine failures per replica per hour (Poisson), at most {MAX_FAILURES_PER_HOUR:,}"
    )
    restart_s: float = Field(60.0, description="time a failed replica stays down, seconds (at most a year)")

    @field_validator("max_num_seqs", "max_num_batched_tokens")
    @classmethod
    def _engine_count(cls, value: int | None, info: Any) -> int | None:
        # The deployment's own bounds on the engine's sequences and tokens a step.
        limit = MAX_CONTEXT_TOKENS if info.field_name == "max_num_batched_tokens" else MAX_BATCH
        if value is not None and value > limit:
            raise ValueError(f"must be at most {limit:,}, got {_shown(value)}")
        return value

    @field_validator("failure_rate_per_hour", "restart_s")
    @classmethod
    def _failures(cls, value: float, info: Any) -> float:
        # Past these a run schedules more failures than requests, or a restart that never ends.
        limit, unit = {
            "failure_rate_per_hour": (MAX_FAILURES_PER_HOUR, " (one failure a second)"),
            "restart_s": (MAX_SECONDS, " s (a year)"),
        }[info.field_name]
        if not math.isfinite(value) or value < 0:
            raise ValueError(f"must be a finite number >= 0, got {value}")
        if value > limit:
            raise ValueError(f"must be at most {limit:,}{unit}, got {value:g}")
        return value


def _policy_name(name: str) -> str:
    """A registered policy's name; a retired one is refused with what to name instead, never run as another."""
    if name in RETIRED_NAMES:
        raise ValueError(f"policy '{name}' is retired: {RETIRED_NAMES[name]}")
    if name not in POLICY_NAMES:
        close = close_names(name, list(POLICY_NAMES), n=1)
        hint = f"did you mean '{close[0]}'? " if close else ""
        raise ValueError(f"unknown policy '{name}': {hint}one of {', '.join(POLICY_NAMES)}")
    return name


PolicyName = Annotated[str, AfterValidator(_policy_name)]


class Scenario(_Strict):
    """A simulation: a plan, its workload, and what to compare."""

    plan: str | dict[str, Any] = Field(
        description="a plan file (relative to the scenario) or an embedded platform plan (pools, tiers, tenants)"
    )
    workload: Workload
    duration_s: float | None = Field(None, description="stop arrivals after this many seconds")
    requests: int | None = Field(
        None, ge=1, le=MAX_EXPECTED_REQUESTS, description="stop arrivals after this many requests"
    )
    seed: int = Field(
        0, ge=0, le=MAX_SEED, description="random seed: the same seed gives the same output, byte for byte"
    )
    policies: tuple[PolicyName, ...] = Field(POLICY_NAMES, min_length=1, description="admission policies to compare")
    queueing: tuple[Literal[QUEUEING_NAMES], ...] = Field(("fair",), min_length=1)  # type: ignore[valid-type]
    lease_tokens: int = Field(128, ge=1, description="incremental_lease: output tokens per lease")
    policy_options: dict[str, int] = Field(
        {}, description="the options the policies declare, by name (a whole number >= 1 each): lease_tokens, ..."
    )
    window_s: float = Field(60.0, description="window over which quota overshoot is reported, seconds")
    warmup_fraction: float = Field(
        0.1,
        ge=0,
        lt=1,
        description="share of the run (of duration_s, else of the requests) left out of the headline figures, so "
        "that buckets starting full do not flatter a short run",
    )
    timeseries_interval_s: float = Field(1.0, description="--timeseries: simulated seconds between samples")
    failed_prefill_billing: Literal[FAILED_PREFILL_BILLING] = Field(  # type: ignore[valid-type]
        "platform",
        description="who pays the prompt of a request the platform fails before its first token: platform or tenant",
    )
    engine: EngineSettings = EngineSettings()

    @field_validator("window_s")
    @classmethod
    def _window(cls, value: float) -> float:
        _seconds(value)
        if value < MIN_WINDOW_S:
            raise ValueError(f"must be at least {MIN_WINDOW_S:g} s, got {value:g}")
        return value

    _interval = field_validator("timeseries_interval_s")(classmethod(lambda cls, v: _seconds(v)))

    @field_validator("duration_s")
    @classmethod
    def _duration(cls, value: float | None) -> float | None:
        return None if value is None else _seconds(value)

    @field_validator("policy_options")
    @classmethod
    def _options(cls, value: dict[str, int]) -> dict[str, int]:
        declared = option_defaults()
        for name, number in value.items():
            if name not in declared:
                raise ValueError(f"unknown option '{name}': the policies declare {', '.join(declared) or 'none'}")
            if number < 1:
                raise ValueError(f"{name}: must be at least 1, got {number}")
        return value

    def options(self) -> dict[str, int]:
        """Every policy option's value: the declared default, the top-level lease_tokens, then policy_options."""
        return {**option_defaults(), "lease_tokens": self.lease_tokens, **self.policy_options}

    @model_validator(mode="after")
    def _stop(self) -> Scenario:
        if "lease_tokens" in self.policy_options and "lease_tokens" in self.model_fields_set:
            raise ValueError("lease_tokens is given twice (top level and policy_options): keep one")
        if self.duration_s is None and self.requests is None:
            raise ValueError("give duration_s or requests (or both): when arrivals stop")
        if len(set(self.policies)) != len(self.policies):
            raise ValueError("policies: a policy is listed twice")
        if len(set(self.queueing)) != len(self.queueing):
            raise ValueError("queueing: a mode is listed twice")
        return self


class UsageRow(BaseModel):
    """One request of a usage file."""

    model_config = ConfigDict(frozen=True)

    time_s: float
    prompt_tokens: int
    output_tokens: int


class LoadedScenario(BaseModel):
    """A scenario with its plan resolved and its replay files read."""

    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)

    scenario: Scenario
    plan: Plan
    source: str
    replays: dict[str, tuple[UsageRow, ...]] = Field(description="tenant -> rows of its replay file, in time order")
    #: The named plan file as read once (an ``inputs.plan.ReadPlan``); None for an embedded plan.
    plan_read: Any = None


# Errors -----------------------------------------------------------------------------------------


def yaml_path(loc: tuple[Any, ...]) -> str:
    """pydantic's error location as a YAML path: ``workload.tenants[2].arrival.rate_rps``."""
    text = ""
    for part in loc:
        if isinstance(part, int):
            text += f"[{part}]"
        elif part in _KINDS:
            continue  # the discriminator's tag, not a key of the file
        elif isinstance(part, str) and (
            part in ("str", "int", "float") or part[:1].isupper() or part.startswith("function-") or "[" in part
        ):
            continue  # union branch labels pydantic inserts (a type's name); the file's keys are lower-case
        else:
            text += f".{part}" if text else str(part)
    return text or "(top level)"


def _validation_error(error: ValidationError, *, source: str, prefix: str = "") -> QuotacalcError:
    errors = error.errors()
    first = next((entry for entry in errors if entry["type"] == "extra_forbidden"), errors[0])
    if len(first["loc"]) > 1 and first["loc"][-1] in ("str", "int") and len(errors) > 1:
        # A union (a plan file's name or an embedded plan): the other branch's error is the useful one.
        first = max(errors[1:], key=lambda e: len(e["loc"]))
    loc = tuple(first["loc"])
    field = yaml_path(loc)
    if prefix:
        field = prefix + ("" if field == "(top level)" else ("" if field.startswith("[") else ".") + field)
    kind = first["type"]
    if kind == "extra_forbidden":
        # The keys the same mapping misses are what a misspelt key most likely meant.
        missing = [
            str(entry["loc"][-1]) for entry in errors if entry["type"] == "missing" and entry["loc"][:-1] == loc[:-1]
        ]
        close = close_names(str(loc[-1]), missing, n=1)
        kind_tag = next((part for part in reversed(loc[:-1]) if isinstance(part, str) and part in _KINDS), None)
        if close:
            fix = f"did you mean '{close[0]}'?"
        elif kind_tag is not None:
            # A distribution's keys differ by kind (fixed has tokens, lognormal median and sigma): name them all.
            fix = f"kind {kind_tag} takes: {', '.join(_KINDS[kind_tag].model_fields)}"
        else:
            fix = "check the spelling"
        return QuotacalcError(f"unknown key '{loc[-1]}'", source=source, field=field, fix=fix)
    if kind == "missing":
        return QuotacalcError("is required", source=source, field=field)
    if kind == "union_tag_invalid":
        context = first.get("ctx", {})
        return QuotacalcError(
            f"unknown kind '{context.get('tag')}'",
            source=source,
            field=field,
            fix=f"one of {context.get('expected_tags')}",
        )
    if kind == "union_tag_not_found":
        return QuotacalcError("needs a 'kind'", source=source, field=field)
    if kind == "too_short":
        return QuotacalcError("is empty", source=source, field=field, fix=_NOT_EMPTY.get(str(loc[-1])))
    from quotacalc.inputs.key_errors import worded_message

    return QuotacalcError(worded_message(first), source=source, field=field)


#: What an empty list should hold.
_NOT_EMPTY = {
    "tenants": "give at least one tenant's workload: tenant, arrival, prompt_tokens, output_tokens",
    "values": "give at least one observed length",
    "policies": f"one or more of {', '.join(POLICY_NAMES)}",
    "queueing": f"one or more of {', '.join(QUEUEING_NAMES)}",
}


# Reading ----------------------------------------------------------------------------------------


def _read_yaml(path: Path, what: str) -> object:
    from quotacalc.inputs.yaml_strict import load_yaml_text, read_text_file

    text = read_text_file(path, what=what)

    return load_yaml_text(text, source=str(path))


def _plan_from_file(path: Path) -> ReadPlan:
    """A plan file through the plan reader, read once: the same errors as ``quotacalc check``."""
    from quotacalc.inputs.plan import read_plan

    return read_plan(str(path))


def _embedded_plan(document: dict[str, Any], *, source: str) -> Plan:
    """An embedded platform plan through the plan reader; its errors' paths start at ``plan.``."""
    from quotacalc.inputs.plan import is_platform, read_platform_plan

    if not is_platform(document):
        raise QuotacalcError(
            "an embedded plan needs pools", source=source, field="plan.pools", fix="or name a plan file"
        )
    return read_platform_plan(document, source, at="plan.")


#: The columns of a usage file, in the order a CSV header gives them.
USAGE_COLUMNS = ("timestamp", "tenant", "prompt_tokens", "output_tokens")


def _parse_time(value: object, *, source: str, field: str) -> float:
    """A timestamp: seconds (a finite number >= 0, on any origin) or an ISO 8601 time."""
    number: float | None = None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        number = float(value) if not isinstance(value, int) or abs(value) < 10**300 else math.inf
    elif isinstance(value, str):
        try:
            number = float(value)
        except ValueError:
            from datetime import datetime

            try:
                return datetime.fromisoformat(value.strip().replace("Z", "+00:00")).timestamp()
            except (ValueError, OverflowError, OSError):
                pass
    shown = _value(value)
    if number is None:
        raise QuotacalcError(
            f"expected a finite number of seconds >= 0 or an ISO 8601 time, got {shown}", source=source, field=field
        )
    if not math.isfinite(number) or number < 0:
        raise QuotacalcError(f"expected a finite number of seconds >= 0, got {shown}", source=source, field=field)
    if number > MAX_TIMESTAMP_S:
        raise QuotacalcError(
            f"{number:g} s is past the year 5138 as a Unix time",
            source=source,
            field=field,
            fix="give seconds, not milliseconds, or an ISO 8601 time",
        )
    return number


def _clock(value: object) -> str:
    """How a timestamp is given: 'an ISO 8601 time' or 'seconds' (a number, or a string of one)."""
    if isinstance(value, str):
        try:
            float(value)
        except ValueError:
            return "an ISO 8601 time"
    return "seconds"


def _count(value: object, *, source: str, field: str) -> int:
    """A token count of a usage row: a whole number from 1 (what every length distribution gives) to MAX_TOKENS."""
    number = math.nan
    if not isinstance(value, bool):
        with contextlib.suppress(TypeError, ValueError, OverflowError):  # OverflowError: an int past a float
            number = float(value)  # type: ignore[arg-type]
    if not math.isfinite(number) or number != int(number) or not 1 <= number <= MAX_TOKENS:
        raise QuotacalcError(
            f"expected a whole number of tokens from 1 to {MAX_TOKENS:,}, got {_value(value)}",
            source=source,
            field=field,
        )
    return int(number)


def _value(value: object) -> str:
    """A usage file's value as an error shows it: a string quoted, a huge integer by its digits, never too long."""
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value) if abs(value) <= 10**20 else f"a {digit_count(abs(value))}-digit number"
    text = str(value)
    if len(text) > 40:
        text = text[:37] + "..."
    return repr(text) if isinstance(value, str) else text


def _usage_records(text: str, path: Path) -> list[tuple[int, dict[str, object]]]:
    """(line number, record) of each row of a usage file, CSV or JSONL; a missing column is refused here."""
    source = str(path)
    records: list[tuple[int, dict[str, object]]] = []
    if path.suffix.lower() in (".jsonl", ".ndjson"):
        import json

        from quotacalc.inputs.json_strict import DuplicateKey, loads_unique

        for number, line in enumerate(text.splitlines(), start=1):
            if not line.strip():
                continue
            try:
                record = loads_unique(line)
            except DuplicateKey as error:
                raise QuotacalcError(
                    f"duplicate key '{error.args[0]}': JSON keeps the last, so one of its values would be dropped",
                    source=source,
                    field=f"line {number}",
                    fix="keep one",
                ) from None
            except RecursionError:  # json's own limit: arrays or objects nested thousands deep
                raise QuotacalcError(
                    "not JSON: nested too deeply", source=source, field=f"line {number}", fix="one JSON object a line"
                ) from None
            except ValueError as error:  # JSONDecodeError, or an integer of more than 4,300 digits
                reason = error.msg if isinstance(error, json.JSONDecodeError) else str(error).split(":")[0]
                raise QuotacalcError(
                    f"not JSON: {reason}", source=source, field=f"line {number}", fix="one JSON object a line"
                ) from None
            if not isinstance(record, dict):
                raise QuotacalcError(
                    "expected a JSON object",
                    source=source,
                    field=f"line {number}",
                    fix='such as {"timestamp": 0, "tenant": "acme", "prompt_tokens": 900, "output_tokens": 200}',
                )
            records.append((number, record))
        return records
    import csv
    import io

    expected = ",".join(USAGE_COLUMNS)
    reader = csv.DictReader(io.StringIO(text), skipinitialspace=True)
    try:
        header = reader.fieldnames
        if not header:
            raise QuotacalcError(
                "no header", source=source, field="line 1", fix=f"the first line names the columns: {expected}"
            )
        missing = [column for column in USAGE_COLUMNS if column not in header]
        if len(missing) == len(USAGE_COLUMNS):
            # Not a usage file at all (a .env, /proc/self/environ): its first line is not shown, it may be a secret.
            raise QuotacalcError(
                "the first line names none of a usage file's columns: is it a usage file?",
                source=source,
                field="line 1",
                fix=f"a CSV whose first line names the columns {expected}",
            )
        if missing:
            raise QuotacalcError(
                f"no {', '.join(missing)} column{'s' if len(missing) > 1 else ''} in the header",
                source=source,
                field="line 1",
                fix=f"the header names {expected}; it has {','.join(str(name) for name in header)}",
            )
        for row in reader:
            records.append((reader.line_num, dict(row)))
    except csv.Error as error:
        raise QuotacalcError(
            f"not CSV: {error}", source=source, field=f"line {reader.reader.line_num}", fix=f"columns {expected}"
        ) from None
    return records


#: A usage file has a row per request: a million requests are tens of MB.
MAX_USAGE_BYTES = 512 * 2**20


def read_usage_file(path: Path) -> dict[str, list[tuple[float, int, int]]]:
    """Rows of a usage file by tenant: (timestamp in seconds, prompt tokens, output tokens)."""
    source = str(path)
    from quotacalc.inputs.yaml_strict import read_text_file

    # (utf-8-sig: a spreadsheet's CSV may start with a byte-order mark, which read_text_file drops.)
    text = read_text_file(path, what="usage file (arrival.file)", limit=MAX_USAGE_BYTES)
    by_tenant: dict[str, list[tuple[float, int, int]]] = {}
    #: (line, kind) of the first row: seconds on an origin of their own and ISO times do not share a clock.
    first_clock: tuple[int, str] | None = None
    for number, record in _usage_records(text, path):
        where = f"line {number}"
        for key in USAGE_COLUMNS:
            if record.get(key) in (None, ""):
                raise QuotacalcError(
                    "is missing" if record.get(key) is None else "is empty",
                    source=source,
                    field=f"{where}: {key}",
                    fix=f"every row gives {', '.join(USAGE_COLUMNS)}",
                )
        clock = _clock(record["timestamp"])
        if first_clock is None:
            first_clock = (number, clock)
        elif clock != first_clock[1]:
            raise QuotacalcError(
                f"{clock} among {first_clock[1]} (line {first_clock[0]} gives {first_clock[1]}): seconds from an origin "
                "of the file's own and ISO times are no one clock, and the rows would land decades apart",
                source=source,
                field=f"{where}: timestamp",
                fix="give every timestamp one way",
            )
        row = (
            _parse_time(record["timestamp"], source=source, field=f"{where}: timestamp"),
            _count(record["prompt_tokens"], source=source, field=f"{where}: prompt_tokens"),
            _count(record["output_tokens"], source=source, field=f"{where}: output_tokens"),
        )
        by_tenant.setdefault(str(record["tenant"]), []).append(row)
    return by_tenant


def load_scenario(path: str, overrides: dict[str, Any] | None = None) -> LoadedScenario:
    """Read and validate a scenario file, its plan and its replay files; ``overrides`` (from flags) win."""
    file = Path(path)
    document = _read_yaml(file, "scenario file")
    if not isinstance(document, dict):
        raise QuotacalcError("expected a mapping (plan, workload, ...)", source=path)
    _refuse_plan_file(document, file)
    if document and not any(key in Scenario.model_fields for key in document):
        # Not a scenario at all (a .env read as YAML): its keys are not shown, they may be secrets.
        raise QuotacalcError(
            "names none of a scenario's keys (plan, workload, ...): is it a scenario file?",
            source=path,
            fix="see quotacalc examples simulate-named-plan",
        )
    try:
        scenario = Scenario.model_validate(document)
    except ValidationError as error:
        raise _validation_error(error, source=path) from None
    if overrides:
        # Validated like the file's values (model_copy would let a flag past every bound).
        try:
            scenario = Scenario.model_validate({**document, **overrides})
        except ValidationError as error:
            first = error.errors()[0]
            name = str(first["loc"][0]) if first["loc"] else ""
            if name in overrides:  # a flag's value out of range (the command checks its bounds first)
                message = first["msg"].removeprefix("Value error, ")
                raise QuotacalcError(message, field="--" + name.replace("_", "-")) from None
            raise _validation_error(error, source=path) from None
    if isinstance(scenario.plan, str):
        read = _plan_from_file(file.parent / scenario.plan)
        return _finish(scenario, read.plan, source=path, base=file.parent, plan_read=read)
    plan = _embedded_plan(scenario.plan, source=path)
    return _finish(scenario, plan, source=path, base=file.parent)


#: Top-level keys of a plan file (flat: a deployment's keys; platform: pools, tiers, tenants) that no scenario has.
_PLAN_KEYS = ("pools", "deployment", "tiers", "tenants", "model", "gpu", "tp")


def _refuse_plan_file(document: dict[str, Any], file: Path) -> None:
    """A plan given where a scenario goes: say so, and how a scenario names it, not that its first key is unknown."""
    if "plan" in document or "workload" in document or not any(key in document for key in _PLAN_KEYS):
        return
    raise QuotacalcError(
        "is a plan file, not a scenario",
        source=str(file),
        fix=f"name it in a scenario's plan key, 'plan: {file.name}' from a scenario in the same folder, and give "
        "its tenants' workload; see quotacalc examples simulate-named-plan",
    )


def scenario_from_dict(
    document: dict[str, Any], *, source: str = "<scenario>", base: Path | None = None
) -> LoadedScenario:
    """A scenario from an in-memory mapping (tests, library users)."""
    try:
        scenario = Scenario.model_validate(document)
    except ValidationError as error:
        raise _validation_error(error, source=source) from None
    if isinstance(scenario.plan, str):
        read = _plan_from_file((base or Path.cwd()) / scenario.plan)
        return _finish(scenario, read.plan, source=source, base=base or Path.cwd(), plan_read=read)
    plan = _embedded_plan(scenario.plan, source=source)
    return _finish(scenario, plan, source=source, base=base or Path.cwd())


def _finish(scenario: Scenario, plan: Plan, *, source: str, base: Path, plan_read: Any = None) -> LoadedScenario:
    names = [tenant.name for tenant in plan.tenants]
    seen: set[str] = set()
    replays: dict[str, tuple[UsageRow, ...]] = {}
    files: dict[Path, dict[str, list[tuple[float, int, int]]]] = {}
    for index, workload in enumerate(scenario.workload.tenants):
        field = f"workload.tenants[{index}]"
        if workload.tenant not in names:
            raise QuotacalcError(
                f"unknown tenant '{workload.tenant}'",
                source=source,
                field=f"{field}.tenant",
                fix=f"the plan's tenants: {', '.join(names) or 'none'}",
            )
        if workload.tenant in seen:
            raise QuotacalcError(
                f"tenant '{workload.tenant}' has two workloads", source=source, field=f"{field}.tenant"
            )
        seen.add(workload.tenant)
        plan_tenant = next(t for t in plan.tenants if t.name == workload.tenant)
        if plan_tenant.placement == "dedicated" and plan_tenant.pool is None:
            pass  # a dedicated tenant without a named pool shares the default pool in the simulation
        if isinstance(workload.arrival, Replay):
            usage_path = (base / workload.arrival.file).resolve()
            if usage_path not in files:
                files[usage_path] = read_usage_file(usage_path)
            by_tenant = files[usage_path]
            key = workload.arrival.tenant or workload.tenant
            rows = by_tenant.get(key)
            if not rows:
                raise QuotacalcError(
                    f"no rows for tenant '{key}' in {workload.arrival.file}",
                    source=source,
                    field=f"{field}.arrival.tenant",
                )
            replays[workload.tenant] = tuple(
                UsageRow(time_s=t, prompt_tokens=p, output_tokens=o) for t, p, o in sorted(rows)
            )
    if scenario.requests is None and scenario.duration_s is not None:
        expected = 0.0
        for workload in scenario.workload.tenants:
            arrival = workload.arrival
            if isinstance(arrival, Poisson):
                expected += arrival.rate_rps * scenario.duration_s
            elif isinstance(arrival, OnOff):
                expected += arrival.rate_rps * scenario.duration_s * arrival.on_s / (arrival.on_s + arrival.off_s)
        if expected > MAX_EXPECTED_REQUESTS:
            raise QuotacalcError(
                f"about {expected:.3g} requests would arrive in {scenario.duration_s:g} s",
                source=source,
                field="duration_s",
                fix=f"shorten it, lower the rates, or cap the run with requests (at most {MAX_EXPECTED_REQUESTS:,} expected)",
            )
    if replays:  # replayed tenants keep their relative timing: time 0 is the earliest row of any file
        start = min(rows[0].time_s for rows in replays.values())
        replays = {
            name: tuple(row.model_copy(update={"time_s": row.time_s - start}) for row in rows)
            for name, rows in replays.items()
        }
    return LoadedScenario(scenario=scenario, plan=plan, source=source, replays=replays, plan_read=plan_read)
