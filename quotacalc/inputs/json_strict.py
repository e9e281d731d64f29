"""JSON read as strictly as the project's YAML: a key given twice in one object is an error, not the last value.

Python's ``json`` keeps the last of duplicate keys without a word, so a hand-edited benchmark result or usage file
could be fitted or replayed on a figure its author did not mean.
"""

from __future__ import annotations

import json
from typing import Any


class DuplicateKey(ValueError):
    """A JSON object named ``key`` twice (``args[0]``)."""


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    document = dict(pairs)
    if len(document) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise DuplicateKey(key)
            seen.add(key)
    return document


def loads_unique(text: str | bytes) -> Any:
    """``json.loads`` that raises :class:`DuplicateKey` for an object with a key twice (its other errors as json's)."""
    return json.loads(text, object_pairs_hook=_unique_keys)
