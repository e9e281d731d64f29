"""Derivations: every figure quotacalc reports is recorded with its formula and substituted inputs."""

from pydantic import BaseModel, ConfigDict


class Step(BaseModel):
    """One figure: its name, the formula, the formula with numbers substituted, and the value."""

    model_config = ConfigDict(defer_build=True, frozen=True)

    name: str
    formula: str
    substituted: str
    value: float
    unit: str
    note: str | None = None


def fmt(number: float) -> str:
    """A compact, exact-enough rendering of a number inside a substituted formula."""
    if isinstance(number, bool):
        return str(number)
    if isinstance(number, int) or (isinstance(number, float) and number.is_integer() and abs(number) < 1e15):
        return f"{int(number):,}"
    if number != 0 and (abs(number) >= 1e6 or abs(number) < 1e-3):
        return f"{number:.4g}"
    if abs(number) < 1:
        # Four significant digits, so that redoing the substituted arithmetic lands within 0.1%.
        return f"{number:.4g}"
    return f"{number:.4f}".rstrip("0").rstrip(".")


class Ledger:
    """Collects steps while a core function computes; the function returns them with its result."""

    def __init__(self) -> None:
        self.steps: list[Step] = []

    def record(self, name: str, value: float, *, formula: str, substituted: str, unit: str, note: str | None = None):
        self.steps.append(Step(name=name, formula=formula, substituted=substituted, value=value, unit=unit, note=note))
        return value
