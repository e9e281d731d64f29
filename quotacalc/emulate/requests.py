"""The request bodies the emulator accepts, validated as vLLM's OpenAI server validates them.

Only the fields that matter to timing, memory and caching are read; the other OpenAI fields (temperature,
top_p, stop, ...) are accepted and ignored, as their effect on an engine without weights is nil. A field of
the wrong type is a 400 naming it, never a 500.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, StrictStr, field_validator, model_validator


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="allow")

    # vLLM's defaults: stream_options given at all asks for the usage unless it says include_usage false.
    include_usage: StrictBool | None = True
    continuous_usage_stats: StrictBool | None = False


class _Common(BaseModel):
    model_config = ConfigDict(extra="allow")

    model: StrictStr | None = None
    stream: StrictBool | None = False
    stream_options: StreamOptions | None = None
    # Whole numbers as vLLM's request models read them (pydantic's lax mode): "1" is 1, "1.5" and "ten" are refused.
    # A gateway that can only add strings to a body (Kong's request-transformer: "priority": "1") relies on it.
    max_tokens: int | None = Field(None, ge=1)
    min_tokens: int = Field(0, ge=0)
    ignore_eos: StrictBool = False
    priority: int = 0
    cache_salt: str | None = None
    n: int | None = 1

    @model_validator(mode="before")
    @classmethod
    def _vllm_rules(cls, data: Any) -> Any:
        # vLLM's protocol.py (check_cache_salt_support, validate_stream_options), in its words.
        if isinstance(data, dict):
            salt = data.get("cache_salt")
            if salt is not None and (not isinstance(salt, str) or not salt):
                raise ValueError("Parameter 'cache_salt' must be a non-empty string if provided.")
            if data.get("stream_options") is not None and not data.get("stream"):
                raise ValueError("Stream options can only be defined when `stream=True`.")
        return data

    @field_validator("n")
    @classmethod
    def _one_choice(cls, value: int | None) -> int | None:
        if value not in (None, 1):
            raise ValueError("the emulator serves one choice a request (n = 1)")
        return value


class _ContentPart(BaseModel):
    model_config = ConfigDict(extra="allow")

    type: StrictStr
    text: StrictStr | None = None


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="allow")

    role: StrictStr
    content: StrictStr | list[_ContentPart] | None = None


class ChatRequest(_Common):
    messages: list[ChatMessage] = Field(min_length=1)
    max_completion_tokens: int | None = Field(None, ge=1)

    def output_limit(self) -> int | None:
        return self.max_completion_tokens if self.max_completion_tokens is not None else self.max_tokens

    def prompt_text(self) -> str:
        """The messages as one text, each under its role: the emulator's chat template."""
        parts = []
        for message in self.messages:
            content = message.content
            if isinstance(content, list):
                content = "".join(part.text or "" for part in content)
            parts.append(f"<|{message.role}|>\n{content or ''}\n")
        parts.append("<|assistant|>\n")
        return "".join(parts)


class CompletionRequest(_Common):
    prompt: StrictStr | list[StrictInt] | list[StrictStr] | list[list[StrictInt]]

    def output_limit(self) -> int | None:
        return self.max_tokens

    @field_validator("prompt")
    @classmethod
    def _one_prompt(cls, value: Any) -> Any:
        if isinstance(value, list) and value and isinstance(value[0], (str, list)):
            if len(value) != 1:
                raise ValueError("the emulator serves one prompt a request; send the prompts one by one")
            return value[0]
        if isinstance(value, list) and any(not 0 <= token < 2**32 for token in value):
            raise ValueError("token ids must be from 0 to 4294967295")
        return value
