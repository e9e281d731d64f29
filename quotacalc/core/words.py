"""Counted nouns in messages: '1 replica', '2 replicas'."""

from __future__ import annotations


def plural(count: float, noun: str, many: str | None = None) -> str:
    """``count`` and ``noun``, the noun in the plural (``many``, else noun + 's') unless the count is exactly 1."""
    shown = f"{count:,}" if isinstance(count, int) else f"{count:,g}"
    return f"{shown} {noun if count == 1 else (many or noun + 's')}"
