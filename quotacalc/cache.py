"""An on-disk cache of parsed inputs, so warm CLI calls skip slow parsers (transformers, PyYAML).

Entries are JSON, keyed by a hash of the input bytes, written atomically; a cache that cannot be
read or written only costs speed.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from pathlib import Path
from typing import Any

from quotacalc.fileio import write_text_atomic


def cache_dir() -> Path:
    """``$QUOTACALC_CACHE_DIR``, else ``$XDG_CACHE_HOME/quotacalc``, else ``~/.cache/quotacalc``."""
    if explicit := os.environ.get("QUOTACALC_CACHE_DIR"):
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "quotacalc"


def cache_key(data: bytes, *salts: str) -> str:
    return hashlib.sha256(data + "|".join(("", *salts)).encode()).hexdigest()


def read_entry(kind: str, key: str) -> Any | None:
    try:
        return json.loads((cache_dir() / kind / f"{key}.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def write_entry(kind: str, key: str, document: Any) -> None:
    with contextlib.suppress(OSError):  # a cache that cannot be written only costs speed
        write_text_atomic(cache_dir() / kind / f"{key}.json", json.dumps(document))


def yaml_cache_key(data: bytes) -> str:
    return cache_key(data, "yaml-1")


def load_yaml_file_cached(path: Path, preparsed: Path | None = None) -> Any:
    """A trusted YAML data file (a shipped catalog), parsed once per content.

    ``preparsed``: a JSON twin shipped with the package (``{"key": ..., "document": ...}``), used
    when its key matches these bytes, so even the first call on a fresh machine skips PyYAML.
    Shipped files only: they are parsed by PyYAML's safe loader here, so the cache stays a leaf;
    user files go through ``inputs.yaml_strict`` (duplicate keys, one-line errors), and a test
    holds the shipped files to that same strict loader.
    """
    data = path.read_bytes()
    key = yaml_cache_key(data)
    if preparsed is not None:
        with contextlib.suppress(OSError, ValueError):
            twin = json.loads(preparsed.read_text(encoding="utf-8"))
            if isinstance(twin, dict) and twin.get("key") == key:
                return twin["document"]
    cached = read_entry("yaml", key)
    if cached is not None:
        return cached
    import yaml

    document = yaml.load(data.decode("utf-8"), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    write_entry("yaml", key, document)
    return document
