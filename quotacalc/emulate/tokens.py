"""Prompt tokens without a tokenizer: a documented, deterministic rule, and vLLM's chained block hashes.

There are no weights and no vocabulary, so a prompt's tokens are its UTF-8 bytes cut into chunks of
``BYTES_PER_TOKEN`` (the last one may be shorter): about the four characters a token that English
text averages. A prompt given as token ids (``/v1/completions`` accepts a list of integers, as
vLLM does) is one token per id, each id packed into the same four bytes. Either way equal prefixes give
equal tokens, which is all the prefix cache needs.

Block hashes follow vLLM v1 (``vllm/v1/core/kv_cache_utils.py``, ``hash_block_tokens``): each full
block's hash is the hash of its parent's hash, its tokens and its extra keys; the LoRA adapter's name
is an extra key of every block and ``cache_salt`` of the first block only, so a salt changes every
hash downstream of it. vLLM hashes with SHA-256 by default (``--prefix-caching-hash-algo``).
"""

from __future__ import annotations

import hashlib
import struct

#: UTF-8 bytes per prompt token: the rule of thumb of about four characters a token for English text.
BYTES_PER_TOKEN = 4
#: The largest token id a prompt of ids may hold (packed into four bytes).
MAX_TOKEN_ID = 2**32 - 1


def text_token_bytes(text: str) -> bytes:
    """A text prompt as the byte string its tokens are cut from."""
    return text.encode("utf-8", "surrogatepass")


def ids_token_bytes(ids: list[int]) -> bytes:
    """A prompt of token ids as four bytes a token."""
    return struct.pack(f"<{len(ids)}I", *ids)


def token_count(data: bytes) -> int:
    """Tokens in a prompt's bytes: one per BYTES_PER_TOKEN bytes, the last one possibly shorter."""
    return -(-len(data) // BYTES_PER_TOKEN)


def block_hashes(data: bytes, block_tokens: int, *, salt: str | None, lora: str | None) -> list[bytes]:
    """The chained hash of every full block of the prompt, as vLLM's prefix cache keys it."""
    block_bytes = block_tokens * BYTES_PER_TOKEN
    full = len(data) // block_bytes
    lora_key = b"" if lora is None else b"lora:" + lora.encode("utf-8")
    salt_key = b"" if salt is None else b"salt:" + salt.encode("utf-8", "surrogatepass")
    hashes: list[bytes] = []
    parent = b"\x00" * 32  # vLLM's NONE_HASH seeds the chain (random unless PYTHONHASHSEED is set; fixed here)
    for index in range(full):
        digest = hashlib.sha256(parent)
        digest.update(data[index * block_bytes : (index + 1) * block_bytes])
        digest.update(lora_key)
        if index == 0:
            digest.update(salt_key)
        parent = digest.digest()
        hashes.append(parent)
    return hashes
