"""What every exporter returns: the files it renders and what its target cannot express.

An exporter is a pure function ``export(policy, salts, options) -> Export``: no I/O, no clock, stable key
order, so the same policy and salts give byte-identical files. Writing them (atomically, with a
manifest, or as a ``--check`` diff) is ``quotacalc.exporters.writer``'s job.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict, Field, model_validator

from quotacalc.core.policy import QuotaPolicy


class GeneratedFile(BaseModel):
    """One file to write, relative to the output directory."""

    model_config = ConfigDict(frozen=True)

    path: str = Field(description="relative path, '/'-separated, under the output directory")
    text: str
    secret: bool = Field(False, description="holds salts: written owner-only (0600)")


class Export(BaseModel):
    """A target's files, and what of this plan its declared capabilities (``registry.PARTS``) do not say: each note
    explains one part, named by its key (``("routing", "prompts above ... from acme ...")``). LIMITS.md renders the
    target's capability table with each part's notes under it (``exporters/limits.py``)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    target: str
    files: tuple[GeneratedFile, ...]
    notes: tuple[tuple[str, str], ...] = Field((), description="(part, one line about this plan), in order")

    @property
    def limits(self) -> tuple[str, ...]:
        """The notes' lines, without their parts."""
        return tuple(text for _part, text in self.notes)


class ExportOptions(BaseModel):
    """Choices a user makes per run: the options the targets declare (``registry.TARGETS``), by name.

    An option not given reads as its declared default (``ExportOptions().gie_objectives`` is False); a name no
    target declares, or a value outside its choices, is refused."""

    model_config = ConfigDict(frozen=True, extra="allow")

    @model_validator(mode="after")
    def _declared(self) -> ExportOptions:
        from quotacalc.exporters.registry import option_problem

        for name, value in (self.__pydantic_extra__ or {}).items():
            if (problem := option_problem(name, value)) is not None:
                raise ValueError(problem)
        return self

    def __getattr__(self, name: str) -> Any:
        try:
            return super().__getattr__(name)  # type: ignore[misc]
        except AttributeError:
            if name.startswith("_"):
                raise
            from quotacalc.exporters.registry import option_default

            return option_default(name)


class Exporter(Protocol):
    """The interface of a target module: each defines ``export`` with this signature."""

    def __call__(self, policy: QuotaPolicy, salts: Mapping[str, str], options: ExportOptions) -> Export: ...


#: The port every engine file serves on and every gateway file sends to (vLLM's default; SGLang's own is 30000,
#: so its files say this one).
ENGINE_PORT = 8000
