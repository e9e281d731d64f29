"""A resolved config -> its ``ModelArch``, by the reader registered for its ``model_type``.

The readers live in ``hf_arch`` (transformer decoders, MLA, Jamba), ``hf_hybrid`` (Mamba-2
hybrids), ``hf_deltanet`` (Gated DeltaNet hybrids), ``hf_gemma4``, ``hf_mistral3``, ``hf_moe`` (more
mixture-of-experts families), ``hf_dsa`` (DeepSeek Sparse Attention), ``hf_dsv4`` (DeepSeek V4), ``hf_qwen_vl`` and ``hf_llava``
(vision-language wrappers), ``hf_moe_more`` (OLMoE, FlexOlmo, DBRX, AFMoE, LongCat-Flash), ``hf_shortconv``
(LFM2, LFM2-MoE) and ``hf_dense_more`` (Apertus); those build on ``hf_arch``'s pieces, and this module imports
them all, so no reader module imports another one that imports it back.
"""

from __future__ import annotations

from typing import Any

from quotacalc.core.arch import ModelArch
from quotacalc.errors import UnsupportedArchitecture
from quotacalc.inputs import (
    hf_arch,
    hf_deltanet,
    hf_dense_more,
    hf_dsa,
    hf_dsv4,
    hf_gemma4,
    hf_hybrid,
    hf_llava,
    hf_mistral3,
    hf_moe,
    hf_moe_more,
    hf_qwen_vl,
    hf_refused,
    hf_shortconv,
    hf_vlmoe,
)

#: Modules whose import registers readers (named so the import is visibly used).
READER_MODULES = (hf_arch, hf_hybrid, hf_deltanet, hf_gemma4, hf_mistral3, hf_moe, hf_dsa, hf_qwen_vl, hf_llava)
#: DeepSeek V4's compressed attention.
DSV4_READER_MODULES = (hf_dsv4,)
#: More MoE families, LFM2's short-convolution hybrids and Apertus.
MORE_READER_MODULES = (hf_moe_more, hf_shortconv, hf_dense_more)
#: Mixture-of-experts models with a vision tower.
VLMOE_READER_MODULES = (hf_vlmoe,)


def supported_model_types() -> list[str]:
    return sorted(hf_arch.READERS)


def read_arch(config: dict[str, Any], *, name: str, source: str, given_keys: frozenset[str] | None = None) -> ModelArch:
    """Build the architecture of a resolved config, or fail clearly if it cannot be priced.

    ``given_keys`` names the fields the file itself states; layer counts, widths and heads must be
    among them.
    """
    view = hf_arch.ConfigView(config, source, given_keys=given_keys)
    model_type = view.get("model_type")
    reader = hf_arch.READERS.get(model_type)
    if reader is None:
        if model_type in hf_refused.NOT_PRICED:
            raise UnsupportedArchitecture(
                f"model_type '{model_type}' is not priced: {hf_refused.NOT_PRICED[model_type]}",
                source=source,
                field="model_type",
                fix="price another model; docs/families.md, 'Refused families', says why this family is refused",
            )
        raise UnsupportedArchitecture(
            f"model_type '{model_type}' is not priced yet",
            source=source,
            field="model_type",
            fix=f"supported: {', '.join(supported_model_types())}",
        )
    return reader(view, name)
