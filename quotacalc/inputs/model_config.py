"""Resolve a ``--model`` reference to its Hugging Face config, read through transformers' AutoConfig.

AutoConfig fills the fields a config.json leaves out with the config class's defaults. Importing
transformers costs about a second, so shipped models come pre-resolved (``inputs.shipped_specs``)
and every other resolved config is cached on disk, keyed by the config's bytes and the installed
transformers; only the first call on a config that is not shipped imports it.
"""

import json
import math
import os
import re
import stat
import warnings
from importlib.util import find_spec
from pathlib import Path
from typing import Any, NamedTuple, cast

from pydantic import BaseModel, ConfigDict

from quotacalc.cache import cache_key, read_entry, write_entry
from quotacalc.catalog.models import find_shipped, shipped_models
from quotacalc.errors import QuotacalcError, UsageError, close_names
from quotacalc.inputs.json_strict import DuplicateKey, loads_unique

#: Bump when the cached document's layout changes.
CACHE_FORMAT = 4


class ModelSource(BaseModel):
    """Where a model's config came from."""

    model_config = ConfigDict(defer_build=True, frozen=True)

    reference: str
    name: str
    config_path: str
    shipped: bool = False
    hf_id: str | None = None


class ResolvedConfig(BaseModel):
    """A model config as transformers sees it (class defaults filled in), with its source."""

    model_config = ConfigDict(defer_build=True, frozen=True)

    source: ModelSource
    config_class: str
    transformers_version: str
    config: dict[str, Any]
    #: Keys the config.json itself states (dotted for sub-configs, canonical and alias names), as
    #: opposed to class defaults: sizes a file leaves out must not be guessed.
    given_keys: frozenset[str] = frozenset()


def looks_like_path(reference: str) -> bool:
    """A reference the user meant as a file or folder: never a hub id (``org/name``) or a shipped name."""
    return (
        reference.startswith(("/", "./", "../", "~", ".\\"))
        or reference in (".", "..")
        or "\\" in reference
        or reference.count("/") > 1
        or reference.lower().endswith((".json", ".yaml", ".yml", ".safetensors", ".bin", ".gguf"))
    )


def _kind_of(path: Path) -> str:
    """'dir', 'file', 'other' (a FIFO, a device, a socket) or 'missing', without following into the file."""
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        return "missing"
    except NotADirectoryError:
        return "missing"
    except OSError as error:  # a name too long, a loop of links, no permission
        raise UsageError(f"cannot use this path: {error.strerror}", source=_shown(path), field="model") from None
    if stat.S_ISDIR(mode):
        return "dir"
    return "file" if stat.S_ISREG(mode) else "other"


def _shown(path: Path | str) -> str:
    text = str(path)
    return text if len(text) <= 200 else text[:100] + "..." + text[-40:]


def _not_regular(path: Path) -> UsageError:
    return UsageError(
        "is not a regular file (a FIFO, device or socket cannot be read as a config)",
        source=_shown(path),
        field="model",
        fix="point --model at a config.json or a model folder",
    )


def locate_model(reference: str) -> ModelSource:
    """Turn what the user typed into a config.json on disk (or a hub id), without reading it."""
    if not reference or "\x00" in reference:
        raise UsageError("is not a model name, a path or a hub id", field="model")
    path = Path(reference).expanduser()
    kind = _kind_of(path)
    if kind == "dir":
        config_path = path / "config.json"
        inner = _kind_of(config_path)
        if inner == "other":
            raise _not_regular(config_path)
        if inner != "file":
            raise UsageError(
                "no config.json in this directory",
                source=_shown(path),
                field="model",
                fix="point --model at a model folder",
            )
        return ModelSource(reference=reference, name=path.resolve().name, config_path=str(config_path))
    if kind == "file":
        return ModelSource(reference=reference, name=path.resolve().parent.name, config_path=str(path))
    if kind == "other":
        raise _not_regular(path)
    if shipped := find_shipped(reference):
        return ModelSource(
            reference=reference,
            name=shipped.name,
            config_path=str(shipped.config_path),
            shipped=True,
            hf_id=shipped.hf_ids[0] if shipped.hf_ids else None,
        )
    if looks_like_path(reference):
        raise UsageError(
            "no such file or directory",
            source=_shown(reference),
            field="model",
            fix="check the path, or give a shipped model name or a hub id (org/name)",
        )
    if reference.count("/") == 1 and _HUB_ID.fullmatch(reference):
        return ModelSource(reference=reference, name=reference.split("/")[1], config_path="", hf_id=reference)
    names = [model.name for model in shipped_models()]
    close = close_names(reference, names, n=3, cutoff=0.4) or close_names(
        reference.lower(), [name.lower() for name in names], n=3, cutoff=0.4
    )
    fix = f"did you mean {', '.join(close)}?" if close else "run 'quotacalc models', or give a path or a hub id"
    raise UsageError(
        f"unknown model '{_shown(reference)}': not a shipped model, a path, or a hub id", field="model", fix=fix
    )


#: A Hugging Face repo id: ``org/name``, letters, digits, '-', '_', '.', at most 96 characters per part.
_HUB_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,95}/[A-Za-z0-9][A-Za-z0-9._-]{0,95}")


def _hub_reachable(endpoint: str, timeout_s: float = 3.0) -> bool:
    """One quick TCP connect, so an offline machine fails at once instead of after the hub client's retries."""
    import socket
    from urllib.parse import urlparse

    url = urlparse(endpoint)
    port = url.port or (443 if url.scheme == "https" else 80)
    try:
        with socket.create_connection((url.hostname or "", port), timeout=timeout_s):
            return True
    except OSError:
        return False


def _download_from_hub(source: ModelSource) -> Path:
    """config.json of a hub model: from the local Hugging Face cache when offline, else downloaded."""
    from huggingface_hub import constants, hf_hub_download

    online = not constants.HF_HUB_OFFLINE and _hub_reachable(constants.ENDPOINT)
    try:
        hub_id = cast(str, source.hf_id)  # only a hub model is downloaded
        return Path(hf_hub_download(hub_id, "config.json", local_files_only=not online, etag_timeout=5))
    except Exception as error:
        reason = "offline, and not in the local Hugging Face cache" if not online else type(error).__name__
        raise QuotacalcError(
            f"cannot fetch config.json of '{source.hf_id}' from the Hugging Face hub ({reason})",
            field="model",
            fix="use a shipped model (quotacalc models) or a local directory with config.json",
        ) from None


def _transformers_stamp() -> str:
    """Identifies the installed transformers cheaply (no import), so an upgrade invalidates the cache."""
    spec = find_spec("transformers")
    if spec is None or spec.origin is None:
        raise QuotacalcError("transformers is not installed", field="model", fix="pip install transformers")
    return str(os.stat(spec.origin).st_mtime_ns)


#: Keys that hold a nested object in every config that has them.
_SUB_CONFIGS = (
    "quantization_config",
    "text_config",
    "vision_config",
    "audio_config",
    "rope_scaling",
    "rope_parameters",
)


def autoconfig_document(raw: dict[str, Any], source_name: str) -> dict[str, Any]:
    """A parsed config.json resolved through AutoConfig: the document the cache and shipped specs keep."""
    config, config_class, version, given = _autoconfig_to_dict(raw, source_name)
    return {"config_class": config_class, "transformers_version": version, "config": config, "given_keys": given}


class _Resolved(NamedTuple):
    """A config as transformers resolves it: its values, the config class, transformers' version, and the keys the
    file gave."""

    config: dict[str, Any]
    config_class: str
    transformers_version: str
    given_keys: list[str]


def _autoconfig_to_dict(raw: dict[str, Any], source_name: str) -> _Resolved:
    os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    import transformers
    from transformers import AutoConfig

    model_type = raw.get("model_type")
    if not isinstance(model_type, str) or not model_type:
        raise QuotacalcError(
            "no model_type" if model_type is None else f"must be a non-empty string, got {model_type!r}",
            source=source_name,
            field="model_type",
            fix="a Hugging Face config.json names its model_type",
        )
    for key in _SUB_CONFIGS:
        if raw.get(key) is not None and not isinstance(raw[key], dict):
            raise QuotacalcError(f"must be an object, got {type(raw[key]).__name__}", source=source_name, field=key)
    fields = {key: value for key, value in raw.items() if key != "model_type"}
    try:
        with warnings.catch_warnings():
            # transformers' deprecation notices (Kimi Linear's `rope_scaling: null` sets a deprecated
            # property) are about its own API, not the user's config: the CLI prints one line or none.
            warnings.simplefilter("ignore", FutureWarning)
            config = _for_model(AutoConfig, model_type, fields)
            resolved = _resolved_dict(config)
    except ValueError as error:
        if "Unrecognized" in str(error) or "model_type" in str(error):
            if isinstance(raw.get("auto_map"), dict):
                # ChatGLM, InternLM2, Baichuan...: the config class lives in the model's own repository
                # (trust_remote_code), so no transformers release reads it and quotacalc has no reader for it.
                raise QuotacalcError(
                    f"model_type '{model_type}' is a custom-code model (auto_map), which transformers does not define "
                    "and quotacalc does not price",
                    source=source_name,
                    field="model_type",
                    fix="price a transformers-native build of the model if one exists, or a model of the same shape",
                ) from None
            raise QuotacalcError(
                f"model_type '{model_type}' is unknown to transformers {transformers.__version__}",
                source=source_name,
                field="model_type",
                fix="upgrade transformers, or check the config",
            ) from None
        raise _rejected_by_transformers(error, source_name, raw) from None
    except (KeyboardInterrupt, MemoryError):
        raise
    except Exception as error:  # its strict dataclasses, and any check of a config class, reject this input
        raise _rejected_by_transformers(error, source_name, raw) from None
    check_family(raw, type(config).__name__, source_name)
    return _Resolved(resolved, type(config).__name__, transformers.__version__, sorted(_given_keys(config, raw)))


#: transformers' strict check of a float field given a whole number: "Field 'x' expected float, got int".
_FLOAT_GOT_INT = re.compile(r"[Ff]ield '(\w+)' expected float, got int")


def _for_model(auto_config: Any, model_type: str, fields: dict[str, Any]) -> Any:
    """AutoConfig.for_model, reading a whole number given for a float field as that float.

    JSON has one number type (1 and 1.0 are the same value) and published configs write either, but transformers
    5's strict config classes refuse an int for a float field (DBRX's published ``ffn_config``:
    ``"moe_normalize_expert_weights": 1``). Each field such a refusal names is retried as a float, once.
    """
    retried: set[str] = set()
    while True:
        try:
            return auto_config.for_model(model_type, **fields)
        except Exception as error:
            names = set(_FLOAT_GOT_INT.findall(str(error))) - retried
            if not names:
                raise
            retried |= names
            fields = _ints_as_floats(fields, names)


def _ints_as_floats(document: Any, names: set[str]) -> Any:
    """``document`` with every whole-number value of a key in ``names`` (at any depth) written as a float."""
    if isinstance(document, dict):
        return {
            key: float(value)
            if key in names and isinstance(value, int) and not isinstance(value, bool)
            else _ints_as_floats(value, names)
            for key, value in document.items()
        }
    if isinstance(document, list):
        return [_ints_as_floats(item, names) for item in document]
    return document


def _rejected_by_transformers(error: Exception, source: str, raw: dict[str, Any]) -> QuotacalcError:
    """transformers' validation message as one line naming the field it names: quoted, mentioned, or (when the
    message names none, as a TypeError or a ZeroDivisionError does) the key without which it accepts the config."""
    text = str(error)
    field = re.search(r"field '([^']+)'", text)
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    # A class validator's message is a header ending in ':' with the cause on the last line.
    headed = len(lines) > 1 and (field or lines[0].endswith(":"))
    problem = lines[-1] if headed else (lines[0] if lines else type(error).__name__)
    problem = re.sub(r"^\w+Error: ", "", problem)
    named = field.group(1) if field else None
    if named is None and (quoted := re.search(r"`(\w+)`", problem)):
        named = quoted.group(1)
    if named is None:
        named = _mentioned_key(problem, raw)
    if named is None and (culprits := _culprits(raw)):
        # The message names no field: the keys without which transformers accepts the config are the culprits.
        named = culprits[0]
        problem = f"{problem} (caused by {', '.join(culprits[:4])})"
    elif named is None and (empty := _zero_or_null(raw)):
        # No single key: a size the class divides or multiplies by, set to 0 or null, is the likely one.
        named = empty[0]
        problem = f"{problem} (check {', '.join(empty[:4])})"
    return QuotacalcError(
        f"transformers rejects the config: {_plain_types(problem, text)}",
        source=source,
        field=named,
        fix="correct that key in the config.json",
    )


#: Python's names of JSON's types, as a config's author knows them.
_JSON_TYPES = {
    "int": "a whole number",
    "float": "a number",
    "str": "a string",
    "bool": "true or false",
    "NoneType": "null",
    "list": "a list",
    "dict": "an object",
    "tuple": "a list",
}


def _json_type(name: str) -> str:
    return _JSON_TYPES.get(name, name)


def _json_value(shown: str) -> str:
    return {"None": "null", "True": "true", "False": "false"}.get(shown, shown)


def _plain_types(problem: str, text: str) -> str:
    """transformers' type complaints in JSON's words: 'must be a whole number or null, got 'x'', not
    "doesn't match any type in (<class 'int'>, <class 'NoneType'>)"."""
    union = re.search(r"with value (.+?) doesn't match any type in \(([^)]*)\)", text)
    if union:
        # "<class 'int'>, <class 'NoneType'>", or generics: "list[int], tuple[int, ...]".
        names = re.findall(r"<class '(\w+)'>|(?:^|, )(\w+)(?=\[|$|, )", union.group(2))
        kinds = [_json_type(plain or generic) for plain, generic in names]
        if kinds:
            return f"must be {' or '.join(dict.fromkeys(kinds))}, got {_json_value(union.group(1))}"
    single = re.search(r"expected (\w+), got (\w+) \(value: (.+?)\)", text)
    if single:
        return f"must be {_json_type(single.group(1))}, got {_json_value(single.group(3))}"
    return re.sub(r"<class '(\w+)'>", lambda match: _json_type(match.group(1)), problem).replace("NoneType", "null")


#: Suffixes of the model classes an ``architectures`` entry names, leaving the family (LlamaForCausalLM -> Llama).
_CLASS_SUFFIXES = re.compile(r"(ForCausalLM|ForConditionalGeneration|LMHeadModel|Model|ForSequenceClassification)$")
#: Fields only a mixture-of-experts family reads: in a dense family they would be silently ignored.
_EXPERT_KEYS = ("num_local_experts", "n_routed_experts", "num_experts")
#: Where each mixture-of-experts family counts its experts.
_EXPERTS_KEY = {
    "mixtral": "num_local_experts",
    "gpt_oss": "num_local_experts",
    "qwen2_moe": "num_experts",
    "qwen3_moe": "num_experts",
    "deepseek_v2": "n_routed_experts",
    "deepseek_v3": "n_routed_experts",
    "granitemoe": "num_local_experts",
    "phimoe": "num_local_experts",
    "glm4_moe": "n_routed_experts",
    "glm4_moe_lite": "n_routed_experts",
    "minimax_m2": "num_local_experts",
    "llama4_text": "num_local_experts",
    "dots1": "n_routed_experts",
    "ernie4_5_moe": "moe_num_experts",
    "hunyuan_v1_moe": "num_experts",
    "deepseek_v32": "n_routed_experts",
    "glm_moe_dsa": "n_routed_experts",
    "olmoe": "num_experts",
    "flex_olmo": "num_experts",
    "afmoe": "num_experts",
    "longcat_flash": "n_routed_experts",
    "lfm2_moe": "num_experts",
    "mimo_v2_flash": "n_routed_experts",
    "deepseek_v4": "n_routed_experts",
}
_DENSE_TYPES = frozenset(
    {"llama", "mistral", "granite", "qwen2", "qwen3", "phi3", "gemma2", "gemma3_text", "gemma3"}
    | {"olmo2", "olmo3", "smollm3", "seed_oss", "exaone4", "ernie4_5", "cohere2", "ministral3"}
    | {"gemma", "helium", "glm4", "cohere", "starcoder2", "olmo", "arcee", "glm", "hunyuan_v1_dense", "phi", "nemotron"}
    | {"qwen2_vl", "qwen2_5_vl", "qwen3_vl"}
    | {"lfm2", "apertus"}
)


#: A config has tens of keys: past this many, finding which one transformers rejects costs more than it tells.
MAX_KEYS_TRIED = 300


def _sections(raw: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    text = raw.get("text_config")
    return [("", raw), ("text_config.", text if isinstance(text, dict) else {})]


def _culprits(raw: dict[str, Any]) -> list[str]:
    """The keys (of the config, then of its text_config) without which AutoConfig accepts it: each is left out
    in turn, its class default taken instead. Only on the error path."""
    from transformers import AutoConfig

    model_type = cast(str, raw.get("model_type"))  # a non-empty string: checked before AutoConfig ran
    fields = {key: value for key, value in raw.items() if key != "model_type"}
    found: list[str] = []
    tried = 0
    for prefix, section in _sections(raw):
        for key in section:
            if key == "model_type" or tried >= MAX_KEYS_TRIED:
                continue
            tried += 1
            if prefix:
                trial = {**fields, "text_config": {k: v for k, v in section.items() if k != key}}
            else:
                trial = {k: v for k, v in fields.items() if k != key}
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    AutoConfig.for_model(model_type, **trial)
            except Exception:  # still rejected without this key: not the culprit
                continue
            found.append(prefix + key)
    return found


def _zero_or_null(raw: dict[str, Any]) -> list[str]:
    """Keys (of the config, then of its text_config) set to 0 or null."""
    return [
        prefix + key
        for prefix, section in _sections(raw)
        for key, value in section.items()
        if value is None or (value == 0 and type(value) is int)
    ]


def _mentioned_key(message: str, raw: dict[str, Any]) -> str | None:
    """The first key of the config (then of its text_config) that the message names, as a word or in prose."""
    words, spaced = set(re.findall(r"\w+", message)), message.lower()
    for prefix, section in _sections(raw):
        for key in section:
            # hidden_size as transformers writes it in prose: "The hidden size (3) is not a multiple of ..."
            if key in words or ("_" in key and key.replace("_", " ") in spaced):
                return prefix + key
    return None


def check_family(raw: dict[str, Any], config_class: str, source: str) -> None:
    """Refuse a config relabelled as another family: its ``architectures`` name another model class, or a
    dense family's config carries experts it would ignore."""
    model_type = cast(str, raw.get("model_type"))  # a non-empty string: checked before AutoConfig ran
    # Compared without underscores: Kimi_K25Config builds KimiK25ForConditionalGeneration.
    family = config_class.removesuffix("Config").lower().replace("_", "")
    architectures = raw.get("architectures")
    if isinstance(architectures, list) and architectures and all(isinstance(a, str) for a in architectures):
        named = {_CLASS_SUFFIXES.sub("", name).lower().replace("_", "") for name in architectures} - {""}
        if named and not any(family.startswith(n) or n.startswith(family) for n in named):
            raise QuotacalcError(
                f"model_type '{model_type}' ({config_class}) does not match architectures {', '.join(architectures)}",
                source=source,
                field="model_type",
                fix="a relabelled config would be priced with another family's layout; correct model_type",
            )
    if (needed := _EXPERTS_KEY.get(model_type)) and needed not in raw:
        raise QuotacalcError(
            "missing from the config",
            source=source,
            field=needed,
            fix=f"a {model_type} config states its experts; the class default would price another model",
        )
    if model_type in _DENSE_TYPES:
        for key in _EXPERT_KEYS:
            value = raw.get(key)
            if isinstance(value, int) and not isinstance(value, bool) and value > 1:
                raise QuotacalcError(
                    f"{value} experts, but model_type '{model_type}' has no experts and would ignore them",
                    source=source,
                    field=key,
                    fix="correct model_type to the mixture-of-experts family the config belongs to",
                )


def _given_keys(config: Any, raw: dict[str, Any], prefix: str = "") -> set[str]:
    """Keys present in the raw file, under both their own and their canonical (attribute_map) names."""
    aliases = type(config).attribute_map
    given = set()
    for key, value in raw.items():
        given.update({prefix + key, prefix + aliases.get(key, key)})
        # Only an object can be a sub-config; reading every attribute would trip heterogeneous configs (Gemma 4),
        # whose per-layer attributes refuse a global read.
        nested = getattr(config, key, None) if isinstance(value, dict) else None
        if isinstance(value, dict) and hasattr(type(nested), "attribute_map"):
            given |= _given_keys(nested, value, f"{prefix}{key}.")
    return given


def _resolved_dict(config: Any) -> dict[str, Any]:
    """``to_dict()`` plus the alias names of ``attribute_map`` (``num_experts`` beside ``num_local_experts``)."""
    document = config.to_dict()
    for alias in type(config).attribute_map:
        if alias not in document:
            try:
                document[alias] = getattr(config, alias)
            except AttributeError:
                continue
    for key in list(document):
        nested = getattr(config, key, None) if isinstance(document[key], dict) else None
        if hasattr(nested, "to_dict") and hasattr(type(nested), "attribute_map"):
            document[key] = _resolved_dict(nested)
    return document


#: Limits on a config.json: real ones are a few kB with a handful of nesting levels and at most a few
#: hundred layers; past these, reading it would exhaust memory or time before any figure came out.
MAX_CONFIG_BYTES = 4 * 2**20
MAX_CONFIG_DEPTH = 32
MAX_LAYERS = 10_000
#: Integers beyond 2**53 lose precision as floats, and far beyond that overflow them.
MAX_CONFIG_INT = 2**53
#: Keys that count layers (transformers' names across families), and per-layer lists and patterns.
_LAYER_COUNT_KEYS = frozenset({"num_hidden_layers", "num_layers", "n_layer", "n_layers", "num_decoder_layers"})
#: Sizes every family reads as positive integers (when stated at all).
_POSITIVE_KEYS = frozenset(
    {"num_attention_heads", "num_key_value_heads", "hidden_size", "vocab_size", *_LAYER_COUNT_KEYS}
)
_PER_LAYER_KEYS = frozenset({"layer_types", "layers_block_type", "hybrid_override_pattern", "attn_layer_indices"})


def read_config_bytes(path: Path) -> bytes:
    """A config.json's bytes, with a one-line error when it cannot be read (or is too big to be one)."""
    try:
        # O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer forever.
        descriptor = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
        if not stat.S_ISREG(os.fstat(descriptor).st_mode):
            os.close(descriptor)
            raise _not_regular(path)
        with os.fdopen(descriptor, "rb") as handle:
            data = handle.read(MAX_CONFIG_BYTES + 1)
    except OSError as error:
        raise QuotacalcError(f"cannot read config: {error.strerror}", source=_shown(path), field="model") from None
    if len(data) > MAX_CONFIG_BYTES:
        raise QuotacalcError(
            f"config file is larger than {MAX_CONFIG_BYTES // 2**20} MiB; a model config is a few kB",
            source=_shown(path),
            fix="point --model at the model's config.json",
        )
    return data


def parse_config_json(data: bytes, path: Path) -> dict[str, Any]:
    """A config.json's object, with a one-line error when it is malformed, out of range or nested too deep."""
    try:
        raw = loads_unique(data)
    except DuplicateKey as error:
        raise QuotacalcError(
            f"duplicate key '{error.args[0]}': JSON keeps the last, transformers would read that one",
            source=_shown(path),
            fix="keep one",
        ) from None
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        where = f" at line {error.lineno}, column {error.colno}" if isinstance(error, json.JSONDecodeError) else ""
        raise QuotacalcError(
            f"malformed config JSON{where}", source=_shown(path), fix="fix or replace the config.json"
        ) from None
    except RecursionError:
        raise QuotacalcError(
            f"config JSON is nested more than {MAX_CONFIG_DEPTH} levels deep", source=_shown(path)
        ) from None
    except ValueError:  # an integer of more digits than Python converts (4,300)
        raise QuotacalcError(
            "config JSON holds a whole number of more than 4,300 digits, far out of any field's range",
            source=_shown(path),
            fix="fix or replace the config.json",
        ) from None
    if not isinstance(raw, dict):
        raise QuotacalcError("config is not a JSON object", source=_shown(path))
    check_config_values(raw, _shown(path))
    return raw


def check_config_values(raw: dict[str, Any], source: str) -> None:
    """Refuse what no real config holds before transformers sees it: NaN or infinite sizes, integers
    past 2**53, nesting past ``MAX_CONFIG_DEPTH``, and more than ``MAX_LAYERS`` layers."""
    stack: list[tuple[str, Any, int]] = [(key, value, 1) for key, value in raw.items()]
    while stack:
        field, value, depth = stack.pop()
        if depth > MAX_CONFIG_DEPTH:
            raise QuotacalcError(f"nested more than {MAX_CONFIG_DEPTH} levels deep", source=source, field=field)
        key = field.rpartition(".")[2]
        if key in _POSITIVE_KEYS and isinstance(value, (bool, str)):
            raise QuotacalcError(f"must be a positive integer, got {value!r}", source=source, field=field)
        if isinstance(value, bool) or value is None or isinstance(value, str):
            if key in _PER_LAYER_KEYS and isinstance(value, str) and len(value) > MAX_LAYERS:
                raise _too_many_layers(source, field, len(value))
            continue
        if isinstance(value, float) and not math.isfinite(value):
            if key in _POSITIVE_KEYS:
                raise QuotacalcError(f"must be a finite number, got {value}", source=source, field=field)
            # transformers writes a float default of inf as Infinity (Mamba-2's time_step_limit): a real config
            # holds it. The readers refuse one in any field they size or time the model with (ConfigView.get).
            continue
        if key in _POSITIVE_KEYS and (not isinstance(value, int) or value <= 0):
            # transformers would divide by it (heads) or build lists of it (layers) before any check of ours.
            raise QuotacalcError(f"must be a positive integer, got {value!r}", source=source, field=field)
        if isinstance(value, int):
            if abs(value) > MAX_CONFIG_INT:
                raise QuotacalcError(
                    f"{value} is out of range (at most 2**53 in magnitude)", source=source, field=field
                )
            if key in _LAYER_COUNT_KEYS and value > MAX_LAYERS:
                raise _too_many_layers(source, field, value)
        elif isinstance(value, dict):
            stack.extend((f"{field}.{child}", item, depth + 1) for child, item in value.items())
        elif isinstance(value, list):
            if key in _PER_LAYER_KEYS and len(value) > MAX_LAYERS:
                raise _too_many_layers(source, field, len(value))
            stack.extend((f"{field}[{index}]", item, depth + 1) for index, item in enumerate(value))


def _too_many_layers(source: str, field: str, count: int) -> QuotacalcError:
    return QuotacalcError(
        f"{count:,} layers is more than quotacalc prices ({MAX_LAYERS:,})",
        source=source,
        field=field,
        fix="check the config: the largest models have a few hundred layers",
    )


def load_model_config(reference: str) -> ResolvedConfig:
    """Resolve ``reference`` and read its config through AutoConfig (cached on disk)."""
    source = locate_model(reference)
    if not source.config_path:
        source = source.model_copy(update={"config_path": str(_download_from_hub(source))})
    path = Path(source.config_path)
    data = read_config_bytes(path)
    key = cache_key(data, f"config-{CACHE_FORMAT}", _transformers_stamp())
    cached = read_entry("configs", key)
    if isinstance(cached, dict):
        try:
            return ResolvedConfig(source=source, **cached)
        except (TypeError, ValueError):  # an entry of another shape: recompute it
            pass
    document = autoconfig_document(parse_config_json(data, path), str(path))
    write_entry("configs", key, document)
    return ResolvedConfig(source=source, **document)
