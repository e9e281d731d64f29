"""Which tokenizer LiteLLM counts with inside the proxy, chosen so that the proxy never downloads one while it serves
(docs/enforce.md, "The tokenizer").

LiteLLM counts tokens itself in two places: the plugin's admission (``prompt_tokens: litellm``) and a stream that ended
without the engine's usage (an engine failure, a client disconnect, a quota stop), which its stream chunk builder
counts. For a model it knows a Hugging Face tokenizer of (``Xenova/llama-3-tokenizer`` for a Llama 3 name), it fetches
that tokenizer through ``huggingface_hub`` on first use, inside the proxy's event loop: offline, ``huggingface_hub``
retries for about 23 s on every such call, and every request in flight stalls with it.

- ``local`` (the default): ``HF_HUB_OFFLINE`` semantics. A tokenizer in the host's Hugging Face cache is used (the
  engine's own, so counts are exact); one that is not fails at once and LiteLLM counts with tiktoken.
- ``tiktoken``: LiteLLM's ``disable_hf_tokenizer_download``: tiktoken always, the same counts on every host.
"""

from __future__ import annotations

import os
import sys
from typing import Any

LOCAL = "local"
TIKTOKEN = "tiktoken"
TOKENIZERS = (LOCAL, TIKTOKEN)
#: huggingface_hub's switch: read only the local cache, never the network.
HF_OFFLINE_ENV = "HF_HUB_OFFLINE"


def keep_offline(tokenizer: str) -> None:
    """Make this process's LiteLLM count without ever downloading a tokenizer, as ``tokenizer`` says."""
    import litellm

    if tokenizer == TIKTOKEN:
        litellm.disable_hf_tokenizer_download = True
        return
    os.environ[HF_OFFLINE_ENV] = "1"
    # huggingface_hub reads the variable once, at its import: a copy imported before the plugin is told here.
    constants = sys.modules.get("huggingface_hub.constants")
    if constants is not None:
        constants.HF_HUB_OFFLINE = True  # type: ignore[attr-defined]


def engine_tokenizer(model: str) -> dict[str, Any] | None:
    """The Hugging Face tokenizer LiteLLM selects for a deployment's model, loaded now (once, at the proxy's start,
    from wherever ``keep_offline`` lets it: the local cache); None where LiteLLM counts that model with tiktoken."""
    from litellm.utils import select_tokenizer

    selected = select_tokenizer(model)
    return dict(selected) if selected["type"] == "huggingface_tokenizer" else None
