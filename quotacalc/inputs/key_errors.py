"""How a key or value of a plan, a deployment or a tenant that does not validate is said: one line naming the flag
or the file's key, its likely spelling, and what was wanted."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ValidationError

from quotacalc.core.deployment import digit_count
from quotacalc.errors import QuotacalcError, UsageError, close_names

#: Names other tools use for a field (vLLM's flags, common spellings), for "did you mean".
KEY_SYNONYMS = {
    "tensor_parallel": "tp",
    "tensor_parallel_size": "tp",
    "tensor_parallelism": "tp",
    "tp_size": "tp",
    "enable_expert_parallel": "expert_parallel",
    "max_num_seqs": "batch",
    "batch_size": "batch",
    "context_length": "context",
    "kv_cache_dtype": "kv_dtype",
    "dtype": "weight_dtype",
    "gpu_memory_utilization": "memory_utilization",
    "num_gpu_blocks": "kv_pool_tokens",
    "price_per_gpu_hour": "gpu_hour_usd",
}


def suggest_key(key: str, known: list[str]) -> str | None:
    """The known key a mistyped one most likely meant, synonyms included."""
    candidates = {name: name for name in known}
    candidates.update({synonym: target for synonym, target in KEY_SYNONYMS.items() if target in known})
    close = close_names(key.lower(), list(candidates), n=1, cutoff=0.6)
    return candidates[close[0]] if close else None


def flag_name(field: str) -> str:
    """A field's flag spelling, for errors about values that came from the command line."""
    return "--" + field.replace("_", "-")


def _nested_model(model: type[BaseModel], loc: tuple[Any, ...]) -> type[BaseModel]:
    """The model whose keys are valid at ``loc`` inside ``model`` (``model`` itself where the path leads to none)."""
    import typing

    current = model
    for part in loc:
        field = current.model_fields.get(part) if isinstance(part, str) else None
        if field is None:
            return model
        candidates = [field.annotation, *typing.get_args(field.annotation)]
        nested = next((c for c in candidates if isinstance(c, type) and issubclass(c, BaseModel)), None)
        if nested is None:
            return model
        current = nested
    return current


def _one_line_validation_error(
    error: ValidationError,
    model: type[BaseModel],
    *,
    source: str | None,
    from_flags: set[str],
    prefix: str = "",
    missing_in_file: bool = False,
) -> QuotacalcError:
    """The first of ``error``'s problems as one line; a key no flag gave is named as the file's (``source``'s). A
    missing key is named as the flag, unless there is a file (or ``missing_in_file``) to give it in."""
    errors = error.errors()
    # A misspelt key is reported as unknown (with its likely spelling), not as the required key it was meant for.
    first = next((entry for entry in errors if entry["type"] == "extra_forbidden"), errors[0])
    field = ".".join(str(part) for part in first["loc"]) or "?"
    if first["type"] == "extra_forbidden":
        # A key inside a section (kv_pool_measured_with.foo) is judged against that section's keys.
        section = _nested_model(model, tuple(first["loc"][:-1]))
        key = str(first["loc"][-1]) if section is not model else field
        close = suggest_key(key, list(section.model_fields))
        known = f"did you mean '{close}'?" if close else f"known keys: {', '.join(section.model_fields)}"
        return QuotacalcError(f"unknown key '{field}'", source=source, field=prefix + field, fix=known)
    if first["type"] == "missing":
        return UsageError(
            "is required",
            source=source,
            field=prefix + field if source or missing_in_file else flag_name(field),
            fix="give it in the file or as a flag",
        )
    message, fix = _problem(first)
    where = flag_name(field) if field in from_flags else prefix + field
    # An unknown name, or an empty one, is a usage error (exit 2), as an unknown GPU or model is.
    kind = UsageError if message.startswith("unknown ") or message == "must not be empty" else QuotacalcError
    return kind(message, source=None if field in from_flags else source, field=where, fix=fix)


#: pydantic's error types for a value of the wrong type, and what the value must be.
_WANTED = {
    "int_type": "an integer",
    "int_from_float": "an integer",
    "int_parsing": "an integer",
    "float_type": "a number",
    "float_parsing": "a number",
    "finite_number": "a finite number",
    "bool_type": "true or false",
    "bool_parsing": "true or false",
    "string_type": "a string",
}


def worded_message(error: Any) -> str:
    """One pydantic error entry in the house's words: 'must be a mapping', 'must be at most 1, got 1.5', never
    'Input should be ...' or a class name."""
    message = error["msg"].removeprefix("Value error, ")
    if error["type"] in ("tuple_type", "list_type"):
        return "must be a list"
    if error["type"] == "too_short":
        return f"must list at least {error.get('ctx', {}).get('min_length', 1)}"
    if error["type"] in ("model_type", "dict_type", "model_attributes_type"):
        return "must be a mapping"
    if message.startswith("Input should be"):
        value = error.get("input")
        shown = f", got {value!r}" if isinstance(value, (int, float, str, bool)) or value is None else ""
        return "must be" + message.removeprefix("Input should be") + shown
    return message


def _problem(error: Any) -> tuple[str, str | None]:
    """A validation error as 'must be ..., got ...' and a fix, for one line."""
    wanted = _WANTED.get(error["type"])
    if wanted is None:
        return worded_message(error), None
    value = error.get("input")
    if isinstance(value, int) and not isinstance(value, bool) and value > 10**20:
        # A whole number beyond a float's range (YAML's 1e400): its size is the problem, not its type.
        return f"must be a finite number, got a {digit_count(value)}-digit number", "give a realistic value"
    shown = repr(value) if len(repr(value)) <= 60 else f"a {type(value).__name__}"
    fix = None
    if isinstance(value, bool) and wanted != "true or false":
        fix = "YAML reads yes/no/on/off as true/false; write the number"
    elif isinstance(value, str) and wanted != "a string":
        fix = "write the number without quotes"
    elif isinstance(value, float) and wanted == "an integer":
        fix = "a count is a whole number"
    return f"must be {wanted}, got {shown}", fix
