"""A pricing warning as data: the deployment key it is about, the problem, and a fix whose keys are left for the
reader to name as the user set them (``--batch`` on the command line, ``pools.chat.deployment.batch`` in a plan).

A fix is a template: ``{batch}`` names a key, ``{kv_dtype=fp8}`` a key and the value to give it."""

from collections.abc import Callable
from string import Formatter

from pydantic import BaseModel, ConfigDict

from quotacalc.errors import QuotacalcError

#: (deployment key, the value the fix gives it or None, whether the fix removes it) -> how a message names it.
KeyNamer = Callable[[str, str | None, bool], str]


def flag_words(key: str, value: str | None, removal: bool) -> str:
    """A key as the flag that sets it: ``--kv-dtype fp8``."""
    flag = "--" + key.replace("_", "-")
    return f"{flag} {value}" if value is not None else flag


def key_words(prefix: str) -> KeyNamer:
    """A key as a plan file writes it under ``prefix``: ``pools.chat.deployment.kv_dtype: fp8``."""

    def name(key: str, value: str | None, removal: bool) -> str:
        return f"{prefix}{key}: {value}" if value is not None else prefix + key

    return name


class PricingWarning(BaseModel):
    """What ``price`` warns of, for a reader that knows where each value came from."""

    model_config = ConfigDict(frozen=True)

    #: The deployment key the warning is about (``batch``).
    field: str
    #: What is wrong, and what the figures assume instead.
    problem: str
    #: How to fix it, a template over deployment keys (``lower {batch}, or raise {max_num_seqs}``); "" for none.
    fix: str = ""

    def keys(self) -> tuple[str, ...]:
        """The deployment keys the fix names, in its order."""
        return tuple(_key(spec)[0] for _, spec, _, _ in Formatter().parse(self.fix) if spec is not None)

    def worded_fix(self, name: KeyNamer) -> str:
        """The fix with each key named by ``name``."""
        parts = []
        for literal, spec, _, _ in Formatter().parse(self.fix):
            parts.append(literal)
            if spec is not None:
                key, value = _key(spec)
                parts.append(name(key, value, "".join(parts).endswith("remove ")))
        return "".join(parts)

    def worded(self, name: KeyNamer = flag_words) -> str:
        """The warning as one line, ``problem (fix)``; by default its keys named as flags, as ``price`` says it."""
        return f"{self.problem} ({self.worded_fix(name)})" if self.fix else self.problem


def _key(spec: str) -> tuple[str, str | None]:
    key, _, value = spec.partition("=")
    return key, value or None


class PricingError(QuotacalcError):
    """A deployment ``price`` refuses, with a fix over keys (a ``PricingWarning``'s template): its text names flags,
    as ``price`` says it; ``worded_fix`` names them as a plan sets them."""

    def __init__(
        self, message: str, *, source: str | None = None, field: str | None = None, fix: str | None = None
    ) -> None:
        self.fix_template = fix or ""
        worded = PricingWarning(field=field or "", problem=message, fix=self.fix_template).worded_fix(flag_words)
        super().__init__(message, source=source, field=field, fix=worded or None)

    def worded_fix(self, name: KeyNamer) -> str:
        """The fix with each key named by ``name``."""
        return PricingWarning(field=self.field or "", problem=self.problem, fix=self.fix_template).worded_fix(name)
