"""An on-disk cache of parsed inputs, so warm CLI calls skip slow parsers (transformers, PyYAML).

Entries are JSON, keyed by a hash of the input bytes, written atomically, each after a digest of its
text; a cache that cannot be read or written, or an entry that is corrupted, only costs speed.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import stat
from pathlib import Path
from typing import Any

from quotacalc.fileio import write_text_atomic


def cache_dir() -> Path:
    """``$QUOTACALC_CACHE_DIR``, else ``$XDG_CACHE_HOME/quotacalc``, else ``~/.cache/quotacalc``.

    With no absolute home directory to be found (``HOME`` empty, no password entry), a path that
    cannot be created, so the cache is simply off."""
    if explicit := os.environ.get("QUOTACALC_CACHE_DIR"):
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME")
    if not base or not Path(base).is_absolute():  # the XDG spec ignores a relative path
        try:
            base = Path.home() / ".cache"
        except (RuntimeError, KeyError):
            base = None
    if base is None or not Path(base).is_absolute():  # HOME="": never a .cache in the working directory
        return Path("/dev/null/quotacalc")
    return Path(base) / "quotacalc"


def cache_key(data: bytes, *salts: str) -> str:
    return hashlib.sha256(data + "|".join(("", *salts)).encode()).hexdigest()


#: An entry larger than this is not one quotacalc wrote (a resolved config is tens of kB).
MAX_ENTRY_BYTES = 16 * 2**20


def read_entry(kind: str, key: str) -> Any | None:
    """A cached document, or None when it is missing, unreadable or corrupted (its digest does not match)."""
    path = cache_dir() / kind / f"{key}.json"
    try:
        info = path.stat()
        if not stat.S_ISREG(info.st_mode) or info.st_size > MAX_ENTRY_BYTES:
            return None  # a FIFO would block the read; a huge file is no entry of ours
        digest, _, body = path.read_bytes().partition(b"\n")
        if hashlib.sha256(body).hexdigest().encode() != digest:
            return None
        return json.loads(body)
    except (OSError, ValueError, RecursionError):
        return None


def write_entry(kind: str, key: str, document: Any) -> None:
    """Cache ``document`` under its key, with a digest of its text so a corrupted entry is recomputed."""
    with contextlib.suppress(OSError, ValueError, TypeError):  # a cache that cannot be written only costs speed
        body = json.dumps(document, allow_nan=False)
        text = f"{hashlib.sha256(body.encode()).hexdigest()}\n{body}"
        write_text_atomic(cache_dir() / kind / f"{key}.json", text)


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
