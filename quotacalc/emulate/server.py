"""The HTTP driver: an aiohttp server speaking the OpenAI API as vLLM serves it, around one engine core a replica.

Each replica is an asyncio task that plans a step on the engine clock (wall seconds since start × speed),
sleeps until the step's end and hands out the tokens the step produced. Step deadlines chain from one to
the next while the replica is busy, so a late wake-up shortens the next sleep instead of drifting; a replica
more than ``MAX_LAG_WALL_S`` behind gives up catching up (the benchmark says when that happens).

A request waits the replica model's fixed request overhead (API server, tokenizer) before it joins the
queue, as ``price`` counts it in the time to first token. A client that disconnects is aborted at once
and its KV freed (aiohttp cancels the handler; ``handler_cancellation``).
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import random
import time
import uuid
from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from aiohttp import web
from pydantic import BaseModel, ValidationError

from quotacalc.emulate.engine import FINISHED, EngineCore, Histogram, Sequence
from quotacalc.emulate.metrics import render
from quotacalc.emulate.requests import ChatRequest, CompletionRequest
from quotacalc.emulate.tokens import ids_token_bytes, text_token_bytes, token_count

if TYPE_CHECKING:
    from quotacalc.emulate.pool import PoolServing

#: Requests GET /admin/received keeps (the newest).
RECEIVED_KEPT = 1000
#: How far (wall seconds) a replica may run behind its step deadlines and still catch up: a process descheduled
#: for a few time slices on a busy machine catches up rather than losing the time for good.
MAX_LAG_WALL_S = 0.5
#: Buckets of how late (wall seconds) a step's tokens go out after the step's deadline.
LAG_BUCKETS_S = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0)
#: The words filler output cycles through: token text carries no meaning here, counts and timings do.
FILLER = (" the", " pool", " serves", " at", " the", " priced", " speed", ".")


@dataclass(frozen=True)
class ServerOptions:
    speed: float = 1.0
    seed: int = 0
    fail_rate: float = 0.0


class ApiError(Exception):
    """An OpenAI-shaped error response, as vLLM's ErrorResponse: ``{"error": {message, type, param, code}}``, the
    HTTP status as the code (vllm/entrypoints/openai/protocol.py ErrorInfo)."""

    def __init__(self, message: str, *, status: int = 400, kind: str = "BadRequestError", param: str | None = None):
        super().__init__(message)
        self.message, self.status, self.kind, self.param = message, status, kind, param

    @classmethod
    def validation(cls, message: str, *, parameter: str, value: Any) -> ApiError:
        """A check of the request against the engine (vLLM's _validate_input raises a VLLMValidationError): its
        message ends with the parameter and value, as VLLMValidationError.__str__ writes them
        (vllm/exceptions.py), and the parameter is the error's param."""
        return cls(f"{message} (parameter={parameter}, value={value})", param=parameter)

    def body(self) -> dict[str, Any]:
        return {"message": self.message, "type": self.kind, "param": self.param, "code": self.status}

    def response(self) -> web.Response:
        return web.json_response({"error": self.body()}, status=self.status)


class Replica:
    """One engine core and the task that steps it on the wall clock."""

    def __init__(self, emulator: Emulator, index: int) -> None:
        self.emulator = emulator
        self.index = index
        self.core = EngineCore(emulator.serving.engine)
        self.wake = asyncio.Event()
        self.events: dict[int, asyncio.Event] = {}
        self.lagged_steps = 0
        self.lag_s = Histogram(LAG_BUCKETS_S)
        #: Requests routed here still in their request overhead, not yet in the engine's queue.
        self.arriving = 0

    def load(self) -> int:
        return len(self.core.running) + self.core.n_waiting + self.arriving

    def add(self, sequence: Sequence, event: asyncio.Event) -> None:
        self.arriving -= 1
        self.events[sequence.id] = event
        self.core.add(sequence)
        self.wake.set()

    def abort(self, sequence: Sequence) -> None:
        self.events.pop(sequence.id, None)
        if sequence.state != FINISHED:
            self.core.abort(sequence)
            self.wake.set()

    async def run(self) -> None:
        emulator = self.emulator
        speed = emulator.options.speed
        core = self.core
        deadline: float | None = None
        while True:
            if not core.has_work():
                deadline = None
                self.wake.clear()
                await self.wake.wait()
                continue
            now = emulator.clock()
            if deadline is None or now - deadline > MAX_LAG_WALL_S * speed:
                if deadline is not None:
                    self.lagged_steps += 1
                start = now
            else:
                start = deadline
            step = core.schedule(start)
            if step is None:
                deadline = None
                self.wake.clear()
                await self.wake.wait()
                continue
            deadline = start + step.duration_s
            wait_s = (deadline - emulator.clock()) / speed
            if wait_s > 0:
                await asyncio.sleep(wait_s)
            self.lag_s.observe(max(0.0, (emulator.clock() - deadline) / speed))
            for sequence in core.complete(step):
                event = self.events.get(sequence.id)
                if event is not None:
                    event.set()

    def fail(self) -> int:
        failed = self.core.fail_all()
        for sequence in failed:
            event = self.events.get(sequence.id)
            if event is not None:
                event.set()
        self.wake.set()
        return len(failed)


class Emulator:
    """One pool's server state: its replicas, the clock, the seeded draws."""

    def __init__(self, serving: PoolServing, options: ServerOptions) -> None:
        self.serving = serving
        self.options = options
        self.random = random.Random(options.seed)
        self.next_id = 0
        self.started = time.monotonic()
        self.created = int(time.time())
        self.replicas: list[Replica] = []
        self.tasks: list[asyncio.Task] = []
        #: The fields a gateway sets of the last requests, newest last, for GET /admin/received (loopback only).
        self.received: deque[dict[str, Any]] = deque(maxlen=RECEIVED_KEPT)

    def clock(self) -> float:
        """Engine seconds since start: the wall clock × speed."""
        return (time.monotonic() - self.started) * self.options.speed

    async def start(self) -> None:
        self.replicas = [Replica(self, index) for index in range(self.serving.replicas)]
        self.tasks = [asyncio.get_running_loop().create_task(replica.run()) for replica in self.replicas]

    async def stop(self) -> None:
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)

    # -- requests ---------------------------------------------------------------------------------

    def _lora(self, model: str | None) -> str | None:
        serving = self.serving
        if model is None or model == serving.served_model_name:
            return None
        if model in serving.lora_adapters:
            return model
        raise ApiError(f"The model `{model}` does not exist.", status=404, kind="NotFoundError", param="model")

    def output_target(self, request: Any, prompt_tokens: int) -> tuple[int, bool]:
        """(tokens to generate, whether that is the request's limit): the seeded draw between min and max."""
        engine = self.serving.engine
        room = engine.max_model_len - prompt_tokens
        limit = request.output_limit()
        if limit is None:
            limit = room
        elif prompt_tokens + limit > engine.max_model_len:
            raise ApiError.validation(
                f"'max_tokens' or 'max_completion_tokens' is too large: {limit}. This model's maximum context "
                f"length is {engine.max_model_len} tokens and your request has {prompt_tokens} input tokens "
                f"({limit} > {engine.max_model_len} - {prompt_tokens}).",
                parameter="max_tokens",
                value=limit,
            )
        if request.min_tokens > limit:
            raise ApiError(
                f"min_tokens must be less than or equal to max_tokens={limit}, got {request.min_tokens}.",
                param="min_tokens",
            )
        if request.ignore_eos:
            return limit, True
        drawn = max(1, round(self.random.expovariate(1.0 / self.serving.mean_output_tokens)))
        return max(request.min_tokens, min(drawn, limit)), drawn >= limit

    def admit(self, request: Any, data: bytes) -> tuple[Sequence, Replica]:
        """Validate the request against the engine and make its sequence on the least loaded replica."""
        engine = self.serving.engine
        lora = self._lora(request.model)
        prompt_tokens = token_count(data)
        if prompt_tokens == 0:
            raise ApiError(
                "Either prompt or prompt_embeds must be provided and non-empty.",
                param="messages" if isinstance(request, ChatRequest) else "prompt",
            )
        if prompt_tokens >= engine.max_model_len:
            raise ApiError.validation(
                f"This model's maximum context length is {engine.max_model_len} tokens. However, your request has "
                f"{prompt_tokens} input tokens. Please reduce the length of the input messages.",
                parameter="input_tokens",
                value=prompt_tokens,
            )
        if request.priority != 0 and not engine.priority_policy:
            raise ApiError(f"Got priority {request.priority} but Priority scheduling is not enabled.", param="priority")
        self.received.append(
            {
                "model": request.model,
                "priority": request.priority,
                "cache_salt": request.cache_salt,
                "max_tokens": request.output_limit(),
                "stream": bool(request.stream),
                "prompt_tokens": prompt_tokens,
            }
        )
        target, by_length = self.output_target(request, prompt_tokens)
        fail_at = None
        if self.options.fail_rate and self.random.random() < self.options.fail_rate:
            fail_at = self.random.randint(1, target)
        replica = min(self.replicas, key=Replica.load)
        replica.arriving += 1
        sequence = Sequence(
            self.next_id,
            data=data,
            block_tokens=engine.block_tokens,
            arrival_s=self.clock(),
            target_tokens=target,
            priority=request.priority,
            salt=request.cache_salt,
            lora=lora,
            fail_at_token=fail_at,
            ends_by_length=by_length,
        )
        self.next_id += 1
        return sequence, replica

    def fail(self, replica: int | None) -> int:
        targets = self.replicas if replica is None else [self.replicas[replica]]
        return sum(r.fail() for r in targets)


# -- HTTP -------------------------------------------------------------------------------------------


async def _body(request: web.Request, model: type[BaseModel]) -> Any:
    raw = await request.read()
    try:
        document = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as error:
        raise ApiError(f"the request body is not JSON: {error}") from None
    if not isinstance(document, dict):
        raise ApiError("the request body must be a JSON object")
    try:
        return model.model_validate(document)
    except ValidationError as error:
        first = error.errors()[0]
        param = ".".join(str(part) for part in first["loc"]) or None
        if first["type"] == "value_error":  # vLLM's own rules, in its words
            message = first["msg"].removeprefix("Value error, ")
            if "cache_salt" in message:
                param = "cache_salt"
        else:
            message = f"{param}: {first['msg']}" if param else first["msg"]
        raise ApiError(message, param=param) from None


def _usage(sequence: Sequence) -> dict[str, Any]:
    return {
        "prompt_tokens": sequence.prompt_tokens,
        "total_tokens": sequence.prompt_tokens + sequence.output_tokens,
        "completion_tokens": sequence.output_tokens,
        "prompt_tokens_details": {"cached_tokens": sequence.cached_tokens},
    }


def _filler(start: int, count: int) -> str:
    return "".join(FILLER[(start + i) % len(FILLER)] for i in range(count))


def from_loopback(remote: str | None) -> bool:
    """Whether a peer address is the loopback: the TCP peer, never a forwarding header a client can write. An
    IPv4 peer on a dual-stack socket arrives mapped (``::ffff:127.0.0.1``); a Unix socket's peer has no address."""
    try:
        address = ipaddress.ip_address((remote or "").split("%")[0])
    except ValueError:
        return False
    mapped = getattr(address, "ipv4_mapped", None)
    return (mapped or address).is_loopback


class Handlers:
    def __init__(self, emulator: Emulator) -> None:
        self.emulator = emulator

    async def health(self, request: web.Request) -> web.Response:
        return web.Response(status=200)

    async def models(self, request: web.Request) -> web.Response:
        serving = self.emulator.serving
        created = self.emulator.created
        card = {
            "id": serving.served_model_name,
            "object": "model",
            "created": created,
            "owned_by": "vllm",
            "root": serving.served_model_name,
            "parent": None,
            "max_model_len": serving.engine.max_model_len,
            "permission": [],
        }
        adapters = [
            {**card, "id": name, "root": name, "parent": serving.served_model_name} for name in serving.lora_adapters
        ]
        return web.json_response({"object": "list", "data": [card, *adapters]})

    async def metrics(self, request: web.Request) -> web.Response:
        emulator = self.emulator
        replicas = emulator.replicas
        text = render(
            emulator.serving.served_model_name,
            [r.core for r in replicas],
            [r.lagged_steps for r in replicas],
            [r.lag_s for r in replicas],
        )
        return web.Response(body=text.encode(), headers={"Content-Type": "text/plain; version=0.0.4; charset=utf-8"})

    async def received(self, request: web.Request) -> web.Response:
        """What the last requests asked the engine for (model, priority, cache_salt, max_tokens): how a test sees
        what a gateway in front set. Loopback only, as it shows salts."""
        if not from_loopback(request.remote):
            return ApiError(
                "the admin endpoint answers the loopback only", status=403, kind="ForbiddenError"
            ).response()
        return web.json_response({"received": list(self.emulator.received)})

    async def fail(self, request: web.Request) -> web.Response:
        if not from_loopback(request.remote):
            return ApiError(
                "the admin endpoint answers the loopback only", status=403, kind="ForbiddenError"
            ).response()
        replica = None
        raw = await request.read()
        if raw.strip():
            try:
                document = json.loads(raw)
            except ValueError:
                return ApiError("the request body is not JSON").response()
            replica = document.get("replica") if isinstance(document, dict) else None
            count = len(self.emulator.replicas)
            if replica is not None and (type(replica) is not int or not 0 <= replica < count):
                return ApiError(f"replica must be a whole number from 0 to {count - 1}", param="replica").response()
        return web.json_response({"failed": self.emulator.fail(replica)})

    async def chat(self, request: web.Request) -> web.StreamResponse:
        return await self._generate(request, chat=True)

    async def completions(self, request: web.Request) -> web.StreamResponse:
        return await self._generate(request, chat=False)

    async def _generate(self, request: web.Request, *, chat: bool) -> web.StreamResponse:
        emulator = self.emulator
        try:
            body = await _body(request, ChatRequest if chat else CompletionRequest)
            if chat:
                data = text_token_bytes(body.prompt_text())
            else:
                prompt = body.prompt
                data = text_token_bytes(prompt) if isinstance(prompt, str) else ids_token_bytes(prompt)
            sequence, replica = emulator.admit(body, data)
        except ApiError as error:
            return error.response()
        event = asyncio.Event()
        queued = False
        try:
            overhead_s = emulator.serving.request_overhead_s / emulator.options.speed
            if overhead_s > 0:
                await asyncio.sleep(overhead_s)
            replica.add(sequence, event)
            queued = True
            if body.stream:
                return await self._stream(request, body, sequence, event, chat=chat)
            while sequence.state != FINISHED:
                await event.wait()
                event.clear()
            if sequence.finish_reason == "error":
                return ApiError(
                    "the replica failed the request (emulated fault)", status=500, kind="InternalServerError"
                ).response()
            return web.json_response(self._whole(body, sequence, chat=chat))
        finally:
            if queued:
                replica.abort(sequence)  # a client gone mid-request: freed at once; a finished one: nothing to do
            else:
                replica.arriving -= 1

    def _whole(self, body: Any, sequence: Sequence, *, chat: bool) -> dict[str, Any]:
        text = _filler(0, sequence.output_tokens)
        common = {"created": int(time.time()), "model": body.model or self.emulator.serving.served_model_name}
        finish = sequence.finish_reason
        if chat:
            choice = {
                "index": 0,
                "message": {"role": "assistant", "content": text, "tool_calls": []},
                "logprobs": None,
                "finish_reason": finish,
                "stop_reason": None,
            }
            return {"id": f"chatcmpl-{uuid.uuid4().hex}", "object": "chat.completion", **common,
                    "choices": [choice], "usage": _usage(sequence)}  # fmt: skip
        choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": finish, "stop_reason": None}
        return {"id": f"cmpl-{uuid.uuid4().hex}", "object": "text_completion", **common,
                "choices": [choice], "usage": _usage(sequence)}  # fmt: skip

    async def _stream(
        self, request: web.Request, body: Any, sequence: Sequence, event: asyncio.Event, *, chat: bool
    ) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await response.prepare(request)
        model = body.model or self.emulator.serving.served_model_name
        created = int(time.time())
        ident = f"chatcmpl-{uuid.uuid4().hex}" if chat else f"cmpl-{uuid.uuid4().hex}"
        kind = "chat.completion.chunk" if chat else "text_completion"
        include_usage = bool(body.stream_options and body.stream_options.include_usage)
        # vLLM gives every chunk the usage so far only where the last chunk has it too.
        continuous = include_usage and bool(body.stream_options.continuous_usage_stats)
        prompt_tokens = sequence.prompt_tokens

        def running(completion_tokens: int) -> dict[str, Any] | None:
            if not continuous:
                return None
            return {"prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens + completion_tokens,
                    "completion_tokens": completion_tokens}  # fmt: skip

        def chunk(choice: dict[str, Any] | None, usage: dict[str, Any] | None = None) -> bytes:
            document: dict[str, Any] = {"id": ident, "object": kind, "created": created, "model": model,
                                        "choices": [choice] if choice is not None else []}  # fmt: skip
            if usage is not None:
                document["usage"] = usage
            return b"data: " + json.dumps(document, separators=(",", ":")).encode() + b"\n\n"

        # Each filler token's chunk serialised once: the per-token cost is most of the server's work under load.
        tokens = [chunk(_token_choice(text, chat=chat)) for text in FILLER]
        if chat:
            first = {"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": None, "finish_reason": None}
            await response.write(chunk(first, running(0)))
        sent = 0
        while True:
            await event.wait()
            event.clear()
            produced = sequence.output_tokens
            if sequence.finish_reason == "error":
                error = ApiError(
                    "the replica failed the request (emulated fault)", status=500, kind="InternalServerError"
                )
                await response.write(b"data: " + json.dumps({"error": error.body()}).encode() + b"\n\n")
                break
            out = []
            while sent < produced:
                last = sent + 1 == produced and sequence.state == FINISHED
                if last or continuous:
                    finish = sequence.finish_reason if last else None
                    choice = _token_choice(FILLER[sent % len(FILLER)], chat=chat, finish_reason=finish)
                    out.append(chunk(choice, running(sent + 1)))
                else:
                    out.append(tokens[sent % len(FILLER)])
                sent += 1
            if out:
                await response.write(b"".join(out))
            if sequence.state == FINISHED and sent >= produced:
                break
        if include_usage and sequence.finish_reason != "error":
            await response.write(chunk(None, _usage(sequence)))
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        return response


def _token_choice(text: str, *, chat: bool, finish_reason: str | None = None) -> dict[str, Any]:
    """One streamed token's choice, as vLLM writes it: a chat delta names its stop reason only when it finishes."""
    if chat:
        choice: dict[str, Any] = {
            "index": 0,
            "delta": {"content": text},
            "logprobs": None,
            "finish_reason": finish_reason,
        }
        if finish_reason is not None:
            choice["stop_reason"] = None
        return choice
    return {"index": 0, "text": text, "logprobs": None, "finish_reason": finish_reason, "stop_reason": None}


@web.middleware
async def _errors(request: web.Request, handler) -> web.StreamResponse:
    """Every error an OpenAI-shaped body: unknown paths and methods too, and never a traceback."""
    try:
        return await handler(request)
    except web.HTTPException as error:
        if error.status < 400:
            raise
        kind = "NotFoundError" if error.status == 404 else "BadRequestError"
        return ApiError(error.reason, status=error.status, kind=kind).response()
    except (ConnectionError, asyncio.CancelledError):
        raise  # the client is gone: nothing to answer
    except Exception as error:  # a fault of the emulator itself: said in the API's shape, the server stays up
        message = f"the emulator failed: {type(error).__name__}: {error}"
        return ApiError(message, status=500, kind="InternalServerError").response()


def make_app(emulator: Emulator) -> web.Application:
    handlers = Handlers(emulator)
    app = web.Application(middlewares=[_errors], client_max_size=64 * 1024**2)
    app.router.add_get("/health", handlers.health)
    app.router.add_get("/v1/models", handlers.models)
    app.router.add_get("/metrics", handlers.metrics)
    app.router.add_post("/v1/chat/completions", handlers.chat)
    app.router.add_post("/v1/completions", handlers.completions)
    app.router.add_post("/admin/fail", handlers.fail)
    app.router.add_get("/admin/received", handlers.received)
    return app


async def serve(
    serving: PoolServing, options: ServerOptions, host: str, port: int, *, ready=None, stop: asyncio.Event | None = None
) -> None:
    """Run the pool's server until cancelled (Ctrl-C) or ``stop`` is set; ``ready(port)`` once it listens."""
    emulator = Emulator(serving, options)
    await emulator.start()
    runner = web.AppRunner(make_app(emulator), handler_cancellation=True, shutdown_timeout=0.5, access_log=None)
    await runner.setup()
    try:
        site = web.TCPSite(runner, host, port, reuse_address=True)
        await site.start()
        if ready is not None:
            bound = runner.addresses[0][1] if runner.addresses else port
            ready(bound)
        await (stop.wait() if stop is not None else asyncio.Event().wait())
    finally:
        await emulator.stop()
        await asyncio.wait_for(runner.cleanup(), timeout=1.0)
