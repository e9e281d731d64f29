r"""Reference parameter counts for the shipped model configs, from transformers.

Regenerate (from the repo root, in a virtualenv OUTSIDE the project's .venv
with torch==2.13.0 and transformers pinned to the project's version, 5.24.0):

    python3 -m venv /work/torchvenv
    /work/torchvenv/bin/pip install torch==2.13.0 transformers==5.24.0
    /work/torchvenv/bin/python tests/data/make_reference_params.py models > tests/data/reference_params.json
    /work/torchvenv/bin/python tests/data/make_reference_params.py tests/data/configs \
        > tests/data/reference_params_hybrid.json

The first covers the shipped models; the second the Mamba-2 hybrid test configs (Nemotron-H,
Bamba, Falcon-H1, Granite 4.0-H). The other families' files (``reference_params_dense_families.json``,
``reference_params_deltanet_hybrids.json``, ``reference_params_moe_families.json``) were made the same way,
on a folder holding only their configs (each file's ``generated_by`` says how); ``tests/test_reference_counts.py``
checks every test config against them.

For each folder under the given directory that holds a ``config.json``:

* load it with ``AutoConfig.from_pretrained(folder)``;
* drop ``quantization_config`` (logical, unquantized counts: packed quantized
  tensors would change numel);
* Jamba: ``use_mamba_kernels=False`` so no kernel import is needed
  (transformers 5.24.0 says the flag is deprecated and picks the pure-PyTorch
  path by itself when mamba-ssm is absent; parameters are the same either way);
* instantiate on the meta device (no memory, no weights) the class transformers
  builds: ``AutoModelForImageTextToText`` when the config has a
  ``vision_config`` (vision tower and projector included), otherwise
  ``AutoModelForCausalLM``; default dtype;
* record ``total_params`` = sum of numel over ``model.parameters()`` (tied
  weights counted once), whether lm_head is tied to the input embedding as
  built, and a ``by_module`` breakdown: parameter names with numeric indices
  (layers, experts) replaced by ``*`` -> {"shape", "count", "numel"}.
  Buffers are not parameters and are excluded.

A model that fails to instantiate gets {"error": "..."} and the run goes on.
Output: JSON on stdout, sorted keys, indent 1; progress on stderr.

Note for readers of ``by_module``: transformers 5 fuses MoE experts into 3-D
parameters (``mlp.experts.gate_up_proj`` etc.), so names and layouts differ
from the per-expert tensors in the checkpoints; the numel is what counts.
DeepSeek-V3's MTP layer (num_nextn_predict_layers) is not built, so it is not
counted. Qwen3-Omni-MoE (``qwen3_omni_moe``): the thinker alone is built, as vLLM serves it.
"""

import json
import os
import re
import sys
import traceback

import torch
import transformers
from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForImageTextToText

# Run from the repo root, in a venv with torch==2.13.0 and transformers==5.24.0.
#: Where each known input directory's output goes (recorded in the JSON as ``generated_by``).
OUTPUTS = {
    "models": "tests/data/reference_params.json",
    "tests/data/configs": "tests/data/reference_params_hybrid.json",
}

_INDEX = re.compile(r"(?<=\.)\d+(?=\.|$)")


def _drop_quantization(cfg):
    """Remove quantization_config from the config and any sub-config."""
    seen = set()
    stack = [cfg]
    while stack:
        c = stack.pop()
        if id(c) in seen:
            continue
        seen.add(id(c))
        if "quantization_config" in getattr(c, "__dict__", {}):
            delattr(c, "quantization_config")
        for v in list(getattr(c, "__dict__", {}).values()):
            if isinstance(v, transformers.PretrainedConfig):
                stack.append(v)


def _tied(model):
    out = model.get_output_embeddings()
    inp = model.get_input_embeddings()
    if out is None or inp is None:
        return None
    return out.weight is inp.weight


def count(folder):
    cfg = AutoConfig.from_pretrained(folder)
    _drop_quantization(cfg)
    if getattr(cfg, "model_type", None) == "jamba":
        cfg.use_mamba_kernels = False
    multimodal = getattr(cfg, "vision_config", None) is not None
    auto = AutoModelForImageTextToText if multimodal else AutoModelForCausalLM
    build = auto.from_config
    if getattr(cfg, "model_type", None) == "qwen3_omni_moe":
        # vLLM serves the thinker alone (qwen3_omni_moe_thinker.py skips the talker. and code2wav. weights).
        cfg, auto = cfg.thinker_config, transformers.Qwen3OmniMoeThinkerForConditionalGeneration
        build = auto._from_config
    with torch.device("meta"):
        model = build(cfg)

    by_module = {}
    total = 0
    for name, p in model.named_parameters():  # de-duplicates tied weights
        n = p.numel()
        total += n
        key = _INDEX.sub("*", name)
        shape = list(p.shape)
        e = by_module.get(key)
        if e is None:
            by_module[key] = {"shape": shape, "count": 1, "numel": n}
        else:
            e["count"] += 1
            e["numel"] += n
            if e.get("shape") != shape:
                # shapes differ across occurrences: keep every distinct one
                shapes = e.pop("shapes", None) or [e.pop("shape")]
                if shape not in shapes:
                    shapes.append(shape)
                e["shapes"] = shapes
    assert total == sum(p.numel() for p in model.parameters())
    return {
        "architecture": type(model).__name__,
        "config_architectures": getattr(cfg, "architectures", None),
        "model_type": cfg.model_type,
        "auto_class": auto.__name__,
        "total_params": total,
        "tie_word_embeddings": _tied(model),
        "by_module": by_module,
    }


def main(argv):
    if len(argv) != 2:
        sys.exit(f"usage: {argv[0]} MODELS_DIR > reference_params.json")
    root = argv[1].rstrip("/")
    models = {}
    for name in sorted(os.listdir(root)):
        folder = os.path.join(root, name)
        if not os.path.isfile(os.path.join(folder, "config.json")):
            continue
        print(f"[{name}]", file=sys.stderr, flush=True)
        try:
            models[name] = count(folder)
            print(f"  {models[name]['architecture']} {models[name]['total_params']:,}", file=sys.stderr, flush=True)
        except Exception as exc:  # record and go on
            traceback.print_exc(file=sys.stderr)
            models[name] = {"error": f"{type(exc).__name__}: {exc}"}
    out = {
        "generated_by": f"python tests/data/make_reference_params.py {root} > {OUTPUTS.get(root, 'OUT.json')}",
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "models": models,
    }
    json.dump(out, sys.stdout, sort_keys=True, indent=1)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main(sys.argv)
