"""How a model's weights are stored: bytes per parameter for each parameter group."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from quotacalc.core.arch import ParamGroup


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

    def describe(self, params_by_group: dict[ParamGroup, int]) -> str:
        """Short label: the one dtype, or the main dtype with its share of parameters and the rest."""
        params_by_dtype: dict[str, int] = {}
        for group, count in params_by_group.items():
            if count:
                dtype = self.groups[group].dtype
                params_by_dtype[dtype] = params_by_dtype.get(dtype, 0) + count
        ranked = sorted(params_by_dtype.items(), key=lambda item: -item[1])
        if len(ranked) == 1:
            return ranked[0][0]
        main, main_count = ranked[0]
        share = main_count / sum(params_by_dtype.values())
        return f"{main} ({share:.1%} of params), {'/'.join(dtype for dtype, _ in ranked[1:])} rest"


def uniform_layout(dtype: str, bytes_per_param: float, compute_dtype: str, source: str) -> WeightLayout:
    """Every parameter in one dtype (the method's simplification for an explicit ``--weight-dtype``)."""
    storage = GroupStorage(dtype=dtype, bytes_per_param=bytes_per_param)
    return WeightLayout(groups={group: storage for group in ParamGroup}, compute_dtype=compute_dtype, source=source)
