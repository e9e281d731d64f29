"""How a model's weights are stored: bytes per parameter for each parameter group."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from quotacalc.core.arch import ModelArch, ParamGroup


class GroupStorage(BaseModel):
    """Storage of one parameter group: its dtype, and bytes per parameter including any scales."""

    model_config = ConfigDict(defer_build=True, frozen=True)

    dtype: str
    bytes_per_param: float


class WeightLayout(BaseModel):
    """Per-group storage of a checkpoint (or a uniform ``--weight-dtype``), and the dtype its matmuls run in."""

    model_config = ConfigDict(defer_build=True, frozen=True)

    groups: dict[ParamGroup, GroupStorage]
    #: Dtype of the tensor-core math for the bulk of the parameters (before any GPU fallback).
    compute_dtype: str
    #: Where the layout came from, for --explain.
    source: str

    def storage(self, group: ParamGroup) -> GroupStorage:
        return self.groups[group]

    def weight_bytes(self, params_by_group: dict[ParamGroup, int]) -> float:
        """Bytes of a set of parameters, group by group."""
        return sum(count * self.groups[group].bytes_per_param for group, count in params_by_group.items())

    def describe(self) -> str:
        by_dtype: dict[str, list[str]] = {}
        for group, storage in self.groups.items():
            by_dtype.setdefault(storage.dtype, []).append(group.value)
        if len(by_dtype) == 1:
            return next(iter(by_dtype))
        return "; ".join(f"{dtype}: {', '.join(groups)}" for dtype, groups in by_dtype.items())


def uniform_layout(dtype: str, bytes_per_param: float, compute_dtype: str, source: str) -> WeightLayout:
    """Every parameter in one dtype (the method's simplification for an explicit ``--weight-dtype``)."""
    storage = GroupStorage(dtype=dtype, bytes_per_param=bytes_per_param)
    return WeightLayout(groups={group: storage for group in ParamGroup}, compute_dtype=compute_dtype, source=source)


def weight_bytes_total(arch: ModelArch, layout: WeightLayout) -> float:
    return layout.weight_bytes(arch.params_by_group())
