"""What a price depends on, resolved and validated: the input of ``core.price`` and of the replica model, kept
apart so that each imports it without importing the other."""

from pydantic import BaseModel, ConfigDict, Field

from quotacalc.catalog.dtypes import Dtype
from quotacalc.catalog.gpus import GpuSpec
from quotacalc.core.arch import ModelArch
from quotacalc.core.deployment import Deployment
from quotacalc.core.weights import WeightLayout


class PricingInputs(BaseModel):
    """Everything a price depends on, resolved and validated."""

    model_config = ConfigDict(defer_build=True, frozen=True)

    deployment: Deployment
    arch: ModelArch
    gpu: GpuSpec
    weights: WeightLayout
    kv_dtype: Dtype
    state_dtype: Dtype
    #: The GPU catalog's matmul efficiency at the compute dtype over the MFU reference's (catalog/gpus.yaml):
    #: what the stated MFU is multiplied by on this GPU and dtype. 1 on the reference, or where unknown.
    mfu_scale: float = Field(1.0, gt=0)
    #: The checkpoint's own quantization method (its config's quantization_config.quant_method), None if it has none:
    #: an engine loads such weights as they are, and quantizes a plain checkpoint only when told to.
    checkpoint_quantization: str | None = None
    #: The Hugging Face id an engine loads where the deployment names a shipped config by its folder name
    #: (Llama-3.1-8B-Instruct -> meta-llama/Llama-3.1-8B-Instruct); None: the deployment's model as given.
    hub_id: str | None = None
    #: Whether the config was read from a local path (neither shipped nor a hub id): what an engine file loads then
    #: is that path, which may not be where the engine's host keeps the weights.
    local_model: bool = False
