"""Human renderings of SI figures (the JSON keeps raw SI values)."""

from __future__ import annotations

import math
from typing import Any


def seconds(value: float) -> str:
    if value >= 1:
        return f"{value:.3g} s"
    if value >= 1e-3:
        return f"{value * 1e3:.3g} ms"
    if value >= 1e-6:
        return f"{value * 1e6:.3g} µs"
    return f"{value * 1e9:.3g} ns"


def data_bytes(value: float) -> str:
    """Decimal GB/MB/kB for capacities, as the method quotes them; exact below 1 MB."""
    if value >= 1e9:
        return f"{value / 1e9:,.1f} GB"
    if value >= 1e6:
        return f"{value / 1e6:,.1f} MB"
    return f"{value:,.0f} B"


def binary_bytes(value: float) -> str:
    """GiB/MiB/KiB (powers of 1,024, as engines report memory), in the largest unit the figure reaches, so a small
    request reads 3.5 MiB, not 0.0 GiB (and 1,023.99 MiB reads 1.0 GiB, not 1,024.0 MiB); exact below 1 KiB."""
    for unit, size in (("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if value >= 0.95 * size:  # what rounds to 1.0 of this unit or more
            return f"{value / size:,.1f} {unit}"
    return f"{value:,.0f} B"


def count(value: float) -> str:
    if value >= 1e9:
        return f"{value / 1e9:,.2f} B"
    if value >= 1e6:
        return f"{value / 1e6:,.1f} M"
    return f"{value:,.0f}"


def number(value: float, digits: int = 3) -> str:
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    return f"{value:.{digits}g}"


def usd(value: float, digits: int = 3) -> str:
    """Dollars to ``digits`` significant figures, trailing zeros kept: $0.0247, $0.150, $24.7; whole dollars from
    $1,000 on ($7,076, not $7,080: a monthly figure a contract quotes to the dollar)."""
    if value == 0 or not math.isfinite(value):
        return f"${value:g}"
    if abs(value) >= 999.5:
        return f"{'-' if value < 0 else ''}${abs(value):,.0f}"
    rounded = float(f"{value:.{digits}g}")
    decimals = max(0, digits - 1 - math.floor(math.log10(abs(rounded))))
    sign = "-" if rounded < 0 else ""
    return f"{sign}${abs(rounded):,.{decimals}f}"


def render(value: float, unit: str) -> str:
    """Render a ``Step`` value by its unit."""
    if unit == "s":
        return seconds(value)
    if unit == "B":
        return data_bytes(value)
    if unit == "B/s":
        return f"{value / 1e12:.3g} TB/s"
    if unit == "USD":
        return usd(value)
    if unit == "params":
        return f"{int(value):,}"
    if unit == "FLOP":
        return f"{value / 1e9:.3g} GFLOP"
    return f"{number(value)} {unit}".strip()


def engine_note(engine: str) -> str:
    """', engine X' where a deployment is priced with an engine profile other than the generic one."""
    from quotacalc.core.deployment import GENERIC_ENGINE

    return "" if engine == GENERIC_ENGINE else f", engine {engine}"


def setting(value: Any) -> str:
    """An input's value as help and listings show it: switches on/off, floats compact."""
    from enum import Enum

    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, Enum):  # PricingBasis.ROOFLINE is typed as 'roofline'
        return str(value.value)
    return f"{value:g}" if isinstance(value, float) else str(value)
