"""The LiteLLM proxy plugin: quotacalc's policy enforced in front of the engines (docs/enforce.md).

LiteLLM loads it from ``litellm_settings.callbacks`` (the generated ``quotacalc_enforce.py`` next to the config
makes one ``QuotacalcEnforcer`` from ``enforce.json``). It is a thin driver of ``quotacalc.enforce.gate.Gate``:
``async_pre_call_hook`` names the tenant, admits or refuses, waits for the fair queue and rewrites the body;
``async_post_call_streaming_iterator_hook`` counts tokens, renews leases and stops a stream at the quota;
the success and failure hooks and the stream's end settle. A sweeper settles leases that expire.

Every gate call that may reach the bucket store runs through ``quotacalc.enforce.bridge.run``: with Redis, its
scripts are awaited on the event loop (``redis.asyncio``), so a slow store never stalls the proxy's other requests.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import datetime as dt
import json
import logging
import os
import time
import uuid
from collections.abc import AsyncGenerator
from pathlib import Path
from typing import Any

from fastapi import HTTPException
from litellm.integrations.custom_logger import CustomLogger

from quotacalc.admission.bucket import Bucket
from quotacalc.admission.state import MemoryBuckets
from quotacalc.enforce import bridge
from quotacalc.enforce.gate import (
    COMPLETED,
    DISCONNECT,
    ENGINE_ERROR,
    LEASE_EXPIRED,
    QUEUED,
    QUOTA_STOP,
    SENT,
    SHUTDOWN,
    STORE_DOWN,
    UNMETERED,
    Gate,
    GateSettings,
    Refusal,
    Ticket,
    refusal_record,
)
from quotacalc.enforce.journal import (
    GATEWAY_LOST,
    PROGRESS_EVERY_S,
    Journal,
    JournaledRequest,
    open_journal,
    recorded,
)
from quotacalc.enforce.metrics import Histogram
from quotacalc.enforce.settings import SETTINGS_ENV, EnforceSettings, check_replicas, read_policy, read_settings
from quotacalc.enforce.tokenizer import engine_tokenizer, keep_offline

log = logging.getLogger("quotacalc.enforce")

#: The key of ``data`` (LiteLLM's request dict) that carries the request's ticket id between hooks.
TICKET_KEY = "quotacalc_request_id"
#: The field of a stream's last chunk that says the quota stopped it.
QUOTA_STOP_FIELD = "quotacalc_stop"
#: How often a proxy sharing its store publishes its in-flight counts and reads the others' (and pumps its queues):
#: while requests wait in them (a place freed by another proxy is seen within a few engine steps), and otherwise.
TICK_BUSY_S = 0.025
TICK_IDLE_S = 0.25
_CALL_TYPES = {"completion", "acompletion", "text_completion", "atext_completion"}


def _rfc3339(epoch_s: float | None) -> str | None:
    if epoch_s is None:
        return None
    return dt.datetime.fromtimestamp(epoch_s, tz=dt.timezone.utc).isoformat(timespec="milliseconds")


def prompt_tokens_bytes4(data: dict[str, Any]) -> int:
    """quotacalc emulate's rule: UTF-8 bytes / 4 (rounded up) over its chat template, or of the prompt."""
    if "messages" in data:
        parts = []
        for message in data.get("messages") or []:
            content = message.get("content") if isinstance(message, dict) else None
            if isinstance(content, list):
                content = "".join(part.get("text") or "" for part in content if isinstance(part, dict))
            parts.append(f"<|{message.get('role', '')}|>\n{content or ''}\n")
        parts.append("<|assistant|>\n")
        text = "".join(parts)
    else:
        prompt = data.get("prompt")
        if isinstance(prompt, list):
            return len(prompt) if prompt and isinstance(prompt[0], int) else len(json.dumps(prompt)) // 4
        text = prompt or ""
    return -(-len(text.encode("utf-8", "surrogatepass")) // 4)


class QuotacalcEnforcer(CustomLogger):
    """quotacalc's admission, fair queueing, streaming leases and settlement inside a LiteLLM proxy."""

    def __init__(self, settings_path: str | os.PathLike[str] | None = None, *, store: Any = None) -> None:
        super().__init__()
        path = Path(settings_path or os.environ.get(SETTINGS_ENV) or "enforce.json").resolve()
        settings = read_settings(path)
        self.settings: EnforceSettings = settings
        policy, salts = read_policy(settings, path.parent)
        check_replicas(settings, policy, path)
        self.policy = policy
        keep_offline(settings.tokenizer)
        # Each pool's engine tokenizer, loaded once here rather than on a request: admission counts with it.
        self.prompt_tokenizers = (
            {pool.name: engine_tokenizer(pool.engine.served_model_name) for pool in policy.pools}
            if settings.prompt_tokens == "litellm"
            else {}
        )
        now = time.time()
        if store is None:
            if settings.state == "redis":
                from quotacalc.enforce.redis_store import RedisBuckets

                url = os.environ.get(settings.redis_url_env, "redis://127.0.0.1:6379/0")
                store = RedisBuckets.from_url(
                    url, policy, lease_ttl_s=settings.lease_ttl_s, timeout_s=settings.redis_timeout_s
                )
            else:
                store = MemoryBuckets(
                    [Bucket(t.bucket_rate_units_per_s, t.bucket_depth_units, now=now) for t in policy.tenants]
                )
        self.store = store
        #: Whether the store's calls are awaited on the event loop (through quotacalc.enforce.bridge).
        self._bridged = getattr(store, "async_client", None) is not None
        #: Bridged gate calls under way (a task holds a reference to each until it ends).
        self._in_flight: set[asyncio.Future[Any]] = set()
        #: The gate call under way on each request (at most one: its hooks run one after the other).
        self._ticket_calls: dict[str, asyncio.Future[Any]] = {}
        self.gate = Gate(
            policy,
            salts,
            settings.admission(),
            store,
            GateSettings(settings.inflight_per_replica, settings.queue_wait_max_s, settings.lease_ttl_s),
        )
        self.waiters: dict[str, asyncio.Future[None]] = {}
        #: This proxy's name among those sharing the store (its published in-flight counts).
        self.gateway_id = uuid.uuid4().hex
        #: Pools a dispatch runs on now, and those asked to dispatch again when it ends.
        self._pumping: set[str] = set()
        self._pump_again: set[str] = set()
        self._ticker: asyncio.Task[None] | None = None
        self.records_path = (path.parent / settings.records) if settings.records else None
        self.store_failures = 0
        #: The write-ahead journal beside the records (quotacalc.enforce.journal), None without records or when off.
        self.journal: Journal | None = None
        #: A streaming request's progress line at least every this many output tokens (a lease's), and at most this
        #: long after tokens it has not noted.
        self.journal_tokens = settings.lease_tokens
        self.journal_every_s = PROGRESS_EVERY_S
        #: Requests a killed proxy left open in its journal, adopted at the start and not yet recorded.
        self._adopted: dict[str, JournaledRequest] = {}
        #: Of those, the ones whose record was written before the kill (their settlement is sent again, not written).
        self._adopted_recorded: set[str] = set()
        self._recovery: asyncio.Task[None] | None = None
        if settings.journal and self.records_path is not None:
            self._open_journal(self.records_path, settings)
        #: The plugin's own wall time per hook, and per request (``request``) at its settlement.
        #: ``request_cpu``: the CPU time of this thread in a request's hooks; where the hooks do not wait (state
        #: memory) it is the plugin's own work, and the wall time above it is the machine's (other processes ran).
        self.plugin_seconds = {hook: Histogram() for hook in ("pre_call", "stream", "settle", "request", "request_cpu")}
        #: Wall and CPU seconds spent in the hooks so far, per live request.
        self._spent_s: dict[str, list[float]] = {}
        #: Requests whose settlement is under way (it may wait on the store): a second one returns at once.
        self._settling: set[str] = set()
        self._sweeper: asyncio.Task[None] | None = None
        self._mounted = False
        # A proxy that stops settles what it holds (in Redis, its holds come back now rather than at expiry).
        atexit.register(self.shutdown)
        if self._adopted:
            self._start_recovery()

    # -- who is asking ---------------------------------------------------------------------------

    def tenant_name(self, user_api_key_dict: Any, data: dict[str, Any]) -> str | None:
        if self.settings.tenant_from == "header":
            headers = (data.get("proxy_server_request") or {}).get("headers") or {}
            wanted = self.policy.tenant_header.lower()
            for name, value in headers.items():
                if name.lower() == wanted:
                    return value
            return None
        metadata = getattr(user_api_key_dict, "metadata", None) or {}
        team_metadata = getattr(user_api_key_dict, "team_metadata", None) or {}
        candidates = [
            candidate
            for candidate in (
                metadata.get("tenant"),
                team_metadata.get("tenant"),
                getattr(user_api_key_dict, "team_alias", None),
                getattr(user_api_key_dict, "team_id", None),
            )
            if candidate
        ]
        for candidate in candidates:
            if self.gate.tenant_index(candidate) is not None:
                return candidate
        # A key that names only tenants the policy lacks is refused by that name (403), not as a key of none (401).
        return candidates[0] if candidates else None

    # -- records and errors ------------------------------------------------------------------------

    def write_record(self, record: dict[str, Any] | None) -> None:
        if record is None or self.records_path is None:
            return
        line = dict(record)
        for key in ("start", "dispatched", "first_token", "end"):
            line[key] = _rfc3339(line[key])
        text = json.dumps(line, separators=(",", ":"), allow_nan=False) + "\n"
        # One write of one line to a file opened for appending: lines of concurrent requests never interleave.
        fd = os.open(self.records_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o640)
        try:
            os.write(fd, text.encode())
        finally:
            os.close(fd)

    def _write_settled(self, ticket: Ticket, record: dict[str, Any] | None) -> None:
        """An admitted request's record, then its journal entry closed."""
        self.write_record(record)
        if self.journal is not None and record is not None:
            self.journal.finish(ticket.lease_key, time.time())

    # -- the journal (quotacalc.enforce.journal) -------------------------------------------------------------------

    def _open_journal(self, records_path: Path, settings: EnforceSettings) -> None:
        try:
            self.journal, adopted = open_journal(records_path)
        except OSError as error:
            log.error(
                "quotacalc: %s: cannot open the journal beside the records (%s): a proxy killed loses its requests' "
                "records; make the records' folder writable",
                records_path,
                error.strerror or error,
            )
            return
        self._adopted = {request.lease_key: request for request in adopted}
        self._adopted_recorded = recorded(records_path, adopted)
        self.gate.on_settling = self._journal_settling

    def _journal_admitted(self, ticket: Ticket, now: float) -> None:
        if self.journal is None:
            return
        fields = {
            "lease_key": ticket.lease_key,
            "request_id": ticket.request_id,
            "tenant": ticket.tenant_name,
            "pool": ticket.pool,
            "model": ticket.model,
            "start": ticket.start_s,
            "prompt_tokens": ticket.prompt_tokens,
            "max_tokens": ticket.limit_tokens,
            "units_reserved": ticket.reserved_units,
            "prompt_units": ticket.prompt_units,
            "output_weight": ticket.output_weight,
            "streaming": ticket.streaming,
        }
        if ticket.state == UNMETERED:
            fields["unmetered"] = True
            fields["dispatched"] = ticket.sent_s
        self.journal.admitted(fields, now)

    def _journal_progress(self, ticket: Ticket, now: float) -> None:
        if self.journal is not None:
            update = {
                "dispatched": ticket.sent_s,
                "first_token": ticket.first_token_s,
                "output_tokens": ticket.output_tokens,
                "units_reserved": ticket.reserved_units,
                "streamed_units": ticket.streamed_units,
            }
            self.journal.progress(ticket.lease_key, now, update)

    def _journal_settling(
        self,
        ticket: Ticket,
        outcome: str,
        now: float,
        billed: float,
        streamed: float,
        retry_after_s: int | None,
        status: int | None,
    ) -> None:
        """The gate's ``on_settling``: the record but the settlement's figures, before the store is asked."""
        if self.journal is None:
            return
        fields = {
            "lease_key": ticket.lease_key,
            **self.gate.record_fields(ticket, now, unmetered=ticket.state == UNMETERED),
            "streaming": ticket.streaming,
            "unmetered": True if ticket.state == UNMETERED else None,
            "outcome": outcome,
            "billed": billed,
            "streamed": streamed,
            "retry_after_s": retry_after_s,
            "status": status,
        }
        self.journal.settling(fields, now)

    def _start_recovery(self) -> None:
        """Settle and record the adopted requests now: on the proxy's event loop where one runs (the plugin is made
        while LiteLLM loads its config), else here, on the store's blocking client."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            self._recover_now()
            return
        self._recovery = loop.create_task(self._recover())

    def _recover_now(self) -> None:
        for request in list(self._adopted.values()):
            try:
                self._replay(request)
            except Exception as error:  # the store is down: the sweeper (or the next start) sends it again
                self._count_store_failure(error)

    async def _recover(self) -> None:
        for request in list(self._adopted.values()):
            try:
                await self._gate_call(self._replay, request)
            except Exception as error:  # the store is down: the sweeper sends it again
                self._count_store_failure(error)
        if self._adopted and (self._sweeper is None or self._sweeper.done()):
            self._sweeper = asyncio.get_running_loop().create_task(self._sweep())

    def _replay(self, request: JournaledRequest) -> None:
        """Settle an adopted request and write its record (once): a settlement it was sending is sent again, and the
        store returns the figures of the one that landed, or applies it now; a request cut off by the kill
        (``gateway_lost``) is billed what its journal proves its client received: its prompt and W x the output tokens
        of its last progress line where any streamed, else nothing (a response not streamed had not reached it)."""
        journal = self.journal
        if journal is None or request.lease_key not in self._adopted:
            return
        if request.outcome is None:
            output = request.output_tokens if request.streaming else 0
            billed = 0.0
            if output > 0 and not request.unmetered:
                billed = request.prompt_units + request.output_weight * output
            request = request.model_copy(
                update={
                    "outcome": GATEWAY_LOST,
                    "end": request.at,
                    "at": time.time(),
                    "output_tokens": output,
                    "billed": billed,
                    "streamed": request.streamed_units,
                }
            )
            self._adopted[request.lease_key] = request
            journal.settling(request.model_dump(exclude_none=True, exclude={"at"}), time.time())
        if request.lease_key in self._adopted_recorded:
            # Its record was written before the kill (its done line was not): its settlement had landed.
            del self._adopted[request.lease_key]
            journal.finish(request.lease_key, time.time())
            return
        billed = request.billed or 0.0
        streamed = request.streamed or 0.0
        tenant = self.gate.tenant_index(request.tenant)
        in_store = tenant is not None and hasattr(self.store, "settle_lease")
        # The store keeps a settlement's figures a day (settled_keep_s): one journaled longer ago may have landed and
        # been forgotten there, and sent again it would be applied twice. Its record is written as the journal has it.
        stale = in_store and not request.unmetered and time.time() - request.at > 0.9 * self.store.settled_keep_s
        store_failed = stale or (tenant is None and hasattr(self.store, "settle_lease"))
        if request.unmetered:
            taken = debited = released = charged = forgiven = 0.0
        elif in_store and not stale:
            done = self.store.settle_lease(
                tenant, request.lease_key, billed, streamed, carry_debt=self.gate.admission.carries_debt
            )
            taken, debited = done.held + done.streamed, done.billed
            released, charged, forgiven = done.released, done.charged, done.forgiven
        else:
            # In memory the bucket died with its proxy: the figures are what the settlement would have been. A tenant
            # the policy no longer has cannot be settled in the store (its lease expires there).
            taken, debited = request.units_reserved + streamed, billed
            released, charged, forgiven = max(0.0, taken - billed), max(0.0, billed - taken), 0.0
        record = request.record(taken=taken, debited=debited, released=released, charged=charged, forgiven=forgiven)
        if store_failed:
            record["store_failed"] = True
        self.write_record(record)
        del self._adopted[request.lease_key]
        journal.finish(request.lease_key, time.time())

    @staticmethod
    def http_error(refusal: Refusal) -> HTTPException:
        headers = {"x-quotacalc-reason": refusal.reason}
        if refusal.retry_after_s is not None:
            headers["retry-after"] = str(refusal.retry_after_s)
        detail = {"error": {"message": refusal.message, "type": refusal.kind, "param": None, "code": refusal.code}}
        return HTTPException(status_code=refusal.status, detail=detail, headers=headers)

    # -- background ----------------------------------------------------------------------------------

    def _start_background(self) -> None:
        if self._sweeper is None or self._sweeper.done():
            self._sweeper = asyncio.get_running_loop().create_task(self._sweep())
        if self.gate.shared is not None and (self._ticker is None or self._ticker.done()):
            self._ticker = asyncio.get_running_loop().create_task(self._tick())
        if not self._mounted:
            self._mounted = True
            self._mount_metrics()

    async def _sweep(self) -> None:
        """Settle leases that expired (a request whose hooks never ran to its end) and refuse overdue waits."""
        while True:
            await asyncio.sleep(1.0)
            try:
                for ticket in self.gate.expired(time.time()):
                    await self._settle(ticket, LEASE_EXPIRED)
                for ticket in list(self.gate.unconfirmed.values()):
                    await self._gate_call(self._confirm_and_write, ticket)
                recovery = self._recovery
                # The start-up's recovery settles them first (a task left on another loop, one LiteLLM closed after
                # loading the config, never runs: the sweeper takes them over).
                if recovery is None or recovery.done() or recovery.get_loop() is not asyncio.get_running_loop():
                    for request in list(self._adopted.values()):
                        await self._gate_call(self._replay, request)
            except Exception:  # the sweeper must outlive a store's outage
                log.exception("quotacalc: settling expired leases failed")

    async def _tick(self) -> None:
        """With a shared store: publish this proxy's sequences in flight on each pool, read the other proxies', and
        send what their ends let go (no event here says a place was freed elsewhere)."""
        gate = self.gate
        shared = gate.shared
        assert shared is not None
        while True:
            waiting = any(any(queue.queues) for queue in gate.queues.values())
            await asyncio.sleep(TICK_BUSY_S if waiting else TICK_IDLE_S)
            for pool, queue in gate.queues.items():
                try:
                    others = await self._gate_call(shared.publish_inflight, pool, self.gateway_id, queue.inflight)
                except Exception as error:  # the store is down: the requests' own calls count it and fail as set
                    log.debug("quotacalc: publishing the in-flight count failed: %s", error)
                    continue
                gate.others_inflight(pool, others)
                if any(queue.queues):
                    await self._pump(pool)

    def _mount_metrics(self) -> None:
        """GET /quotacalc/metrics on the proxy's own app: Prometheus text, per tenant."""
        try:
            from fastapi.responses import PlainTextResponse
            from litellm.proxy.proxy_server import app
        except Exception:  # not inside a proxy (a library use): no endpoint
            return

        async def metrics() -> PlainTextResponse:
            return PlainTextResponse(self.metrics_text(), media_type="text/plain; version=0.0.4")

        app.add_api_route("/quotacalc/metrics", metrics, methods=["GET"], include_in_schema=False)

    def metrics_text(self) -> str:
        from quotacalc.enforce.metrics import render

        return render(self.gate, self.store_failures, self.plugin_seconds)

    async def _pump(self, pool: str) -> None:
        """Send what the fair queue lets go now, waking each one's pre-call hook. One dispatch runs on a pool at a time:
        with a shared store a dispatch awaits its claims, and a second one run meanwhile would pick the same head
        ticket and send the one behind it on that claim. A pump asked for while one runs makes it dispatch again."""
        if pool in self._pumping:
            self._pump_again.add(pool)
            return
        if not any(self.gate.queues[pool].queues):
            return  # nothing waits: no dispatch to run (on Redis, a task and a greenlet saved on every settlement)
        self._pumping.add(pool)
        try:
            while True:
                self._pump_again.discard(pool)
                await self._dispatch(pool)
                if pool not in self._pump_again:
                    break
        finally:
            self._pumping.discard(pool)

    async def _dispatch(self, pool: str) -> None:
        started = time.time()
        try:
            tickets = await self._gate_call(self.gate.dispatch, pool, started)
            # Sent now: a dispatch that waited on the store for a claim sends its tickets once the claims landed, and
            # a record's dispatch time is never before its place under the caps was taken.
            now = time.time()
            for ticket in tickets:
                ticket.sent_s = now
            sent = [ticket.request_id for ticket in tickets]
        except Exception as error:  # the store failed: what was dispatched before it still goes
            self._count_store_failure(error)
            if self.settings.redis_failure == "open":
                # Failing open, the caps are counted by this proxy alone until the store answers again.
                with contextlib.suppress(Exception):
                    await self._gate_call(self.gate.dispatch, pool, time.time(), local_only=True)
            sent = [rid for rid in self.waiters if getattr(self.gate.live.get(rid), "state", QUEUED) != QUEUED]
            now = time.time()
            for request_id in sent:
                ticket = self.gate.live.get(request_id)
                if ticket is not None and ticket.sent_s == started:
                    ticket.sent_s = now
        for request_id in sent:
            waiter = self.waiters.pop(request_id, None)
            if waiter is not None and not waiter.done():
                waiter.set_result(None)

    async def _gate_call(self, function: Any, *args: Any, **kwargs: Any) -> Any:
        """A gate call that may reach the store: through the bridge where the store awaits (Redis), else direct.

        A bridged call runs as a task of its own, shielded: a client that goes away cancels its request's coroutine,
        and a cancellation thrown into the gate between two scripts (a settlement that ended the lease but did not yet
        return its units) would lose units. The call runs to its end; the cancelled request just stops waiting."""
        if not self._bridged:
            return function(*args, **kwargs)
        task = asyncio.ensure_future(bridge.run(function, *args, **kwargs))
        self._in_flight.add(task)
        task.add_done_callback(self._gate_call_done)
        return await asyncio.shield(task)

    async def _ticket_call(self, ticket: Ticket, function: Any, *args: Any) -> Any:
        """A gate call on one request (its tokens, its output lease): its settlement waits for it to end, so a call
        that goes on after its request was cancelled never changes a ticket being settled."""
        if not self._bridged:
            return function(ticket, *args)
        call = asyncio.ensure_future(self._gate_call(function, ticket, *args))
        self._ticket_calls[ticket.request_id] = call
        try:
            return await asyncio.shield(call)
        finally:
            if call.done() and self._ticket_calls.get(ticket.request_id) is call:
                del self._ticket_calls[ticket.request_id]

    def _gate_call_done(self, task: asyncio.Future[Any]) -> None:
        self._in_flight.discard(task)
        # Retrieved here too, so that a failure whose request had gone away is logged once, not "never retrieved".
        if not task.cancelled() and task.exception() is not None:
            log.debug("quotacalc: a gate call failed: %s", task.exception())

    def _spend(self, request_id: str, hook: str, seconds: float, cpu_s: float) -> None:
        self.plugin_seconds[hook].observe(seconds)
        spent = self._spent_s.setdefault(request_id, [0.0, 0.0])
        spent[0] += seconds
        spent[1] += cpu_s

    async def _settle(self, ticket: Ticket, outcome: str, **usage: Any) -> None:
        """Settle once (a second call while the first waits on the store returns at once), write the record and
        dispatch what the freed slots let go. On Redis it runs to its end even if the request is cancelled."""
        if ticket.request_id in self._settling:
            return
        self._settling.add(ticket.request_id)
        if not self._bridged:
            await self._settle_now(ticket, outcome, usage)
            return
        task = asyncio.ensure_future(self._settle_now(ticket, outcome, usage))
        self._in_flight.add(task)
        task.add_done_callback(self._gate_call_done)
        await asyncio.shield(task)

    async def _settle_now(self, ticket: Ticket, outcome: str, usage: dict[str, Any]) -> None:
        started = time.perf_counter()
        started_cpu = time.thread_time()
        record = None
        try:
            pending = self._ticket_calls.pop(ticket.request_id, None)
            if pending is not None:
                await asyncio.wait([pending])
            record = await self._gate_call(self._settle_and_write, ticket, outcome, time.time(), usage)
            await self._pump(ticket.pool)
        finally:
            self._settling.discard(ticket.request_id)
            if record is not None:
                spent = time.perf_counter() - started
                self.plugin_seconds["settle"].observe(spent)
                before = self._spent_s.pop(ticket.request_id, (0.0, 0.0))
                self.plugin_seconds["request"].observe(before[0] + spent)
                self.plugin_seconds["request_cpu"].observe(before[1] + time.thread_time() - started_cpu)

    def _settle_and_write(self, ticket: Ticket, outcome: str, now: float, usage: dict[str, Any]) -> Any:
        """Settle and write the record in one gate call, with no wait between them: a proxy that stops while a
        settlement is under way either has its record or settles it again at shutdown. A settlement the store did
        not confirm is written once the sweeper (or the shutdown) has it confirmed, with the figures that landed."""
        record = self.gate.settle(ticket, outcome, now, **usage)
        if record is not None and ticket.request_id in self.gate.unconfirmed:
            self._count_store_failure(None)
        else:
            self._write_settled(ticket, record)
        return record

    def _confirm_and_write(self, ticket: Ticket) -> None:
        self._write_settled(ticket, self.gate.confirm(ticket))

    async def async_pre_call_hook(self, user_api_key_dict: Any, cache: Any, data: dict, call_type: Any) -> dict:
        if str(call_type) not in _CALL_TYPES and getattr(call_type, "value", None) not in _CALL_TYPES:
            return data
        self._start_background()
        request_id = str(data.get("litellm_call_id") or uuid.uuid4())
        started = time.perf_counter()
        started_cpu = time.thread_time()
        waited = [0.0, 0.0]
        admitted = False
        try:
            admitted_data = await self._pre_call(user_api_key_dict, data, request_id, waited)
            admitted = True
            return admitted_data
        finally:
            seconds = time.perf_counter() - started - waited[0]
            if admitted:
                self._spend(request_id, "pre_call", seconds, time.thread_time() - started_cpu - waited[1])
            else:
                # Refused or cancelled: its time is the hook's, never added to a request's total, which a refused
                # duplicate's call id (409) would add to the request in flight under that id.
                self.plugin_seconds["pre_call"].observe(seconds)
            if request_id not in self.gate.live:  # refused or settled: nothing more will be spent on it
                self._spent_s.pop(request_id, None)

    async def _pre_call(self, user_api_key_dict: Any, data: dict, request_id: str, waited: list[float]) -> dict:
        gate = self.gate
        now = time.time()
        name = self.tenant_name(user_api_key_dict, data)
        tenant = gate.tenant_index(name)
        if tenant is None:
            refusal = gate.refuse_unknown(name)
            self.write_record(refusal_record(refusal, name, request_id, now, 0))
            raise self.http_error(refusal)
        if self.settings.prompt_tokens == "bytes4":
            prompt_tokens = prompt_tokens_bytes4(data)
        else:
            import litellm

            prompt_tokens = litellm.token_counter(
                model=str(data.get("model") or ""),
                custom_tokenizer=self.prompt_tokenizers.get(self.policy.tenants[tenant].pool),
                messages=data.get("messages"),
                text=data.get("prompt"),
            )
        client_max = data.get("max_completion_tokens") or data.get("max_tokens")
        client_max = client_max if isinstance(client_max, int) and client_max > 0 else None
        in_use = gate.refuse_call_id_in_use(
            tenant, request_id, elsewhere=request_id in self.waiters or request_id in self._settling
        )
        if in_use is not None:
            self.write_record(refusal_record(in_use, name, request_id, now, prompt_tokens))
            raise self.http_error(in_use)
        try:
            # The store keys the request by an id of its own: LiteLLM takes its call id from the client's
            # x-litellm-call-id header, and a settlement kept under a reused id would be taken for a retry of it.
            lease_key = f"{request_id}/{uuid.uuid4().hex}"
            outcome = await self._gate_call(gate.arrive, tenant, prompt_tokens, client_max, now, request_id, lease_key)
        except asyncio.CancelledError:
            # The client went away while Redis admitted it: settle what the admission holds once it lands, rather
            # than let a ticket nobody sends hold a place in the fair queue until its lease expires.
            self._settle_later(request_id)
            raise
        except Exception as error:
            return self._store_down(error, tenant, name, request_id, now, prompt_tokens, data)
        if isinstance(outcome, Refusal):
            self.write_record(refusal_record(outcome, name, request_id, now, prompt_tokens))
            raise self.http_error(outcome)
        try:
            return await self._admitted(outcome, data, request_id, now, prompt_tokens, waited)
        except asyncio.CancelledError:
            await self._settle(outcome, DISCONNECT)
            raise

    def _settle_later(self, request_id: str) -> None:
        """Settle a request as disconnected once the gate calls under way (its admission) have ended."""

        under_way = list(self._in_flight)  # taken now: a later one never waits on itself or on a later one

        async def later() -> None:
            await asyncio.gather(*under_way, return_exceptions=True)
            ticket = self.gate.live.get(request_id)
            if ticket is not None:
                await self._settle(ticket, DISCONNECT)

        task = asyncio.ensure_future(later())
        self._in_flight.add(task)
        task.add_done_callback(self._gate_call_done)

    async def _admitted(
        self, ticket: Ticket, data: dict, request_id: str, now: float, prompt_tokens: int, waited: list[float]
    ) -> dict:
        """An admitted request: wait for the fair queue, lease its output where it does not stream, rewrite it."""
        gate = self.gate
        ticket.streaming = bool(data.get("stream"))
        # Journaled in the same step as its admission landed: a proxy killed from here on leaves its record to the next.
        self._journal_admitted(ticket, now)
        waiter = asyncio.get_running_loop().create_future()
        self.waiters[request_id] = waiter
        await self._pump(ticket.pool)
        waiting_since = time.perf_counter()
        waiting_since_cpu = time.thread_time()
        try:
            if not waiter.done():
                await asyncio.wait_for(asyncio.shield(waiter), timeout=self.settings.queue_wait_max_s)
        except asyncio.TimeoutError:
            self.waiters.pop(request_id, None)
            if ticket.state == QUEUED:
                refusal = gate.queue_refusal(ticket)
                # Settled through the store's bridge (it may reach Redis), recorded as a refusal: its status and
                # Retry-After, as refusal_record gives those refused before the queue.
                await self._settle(ticket, refusal.reason, retry_after_s=refusal.retry_after_s, status=refusal.status)
                raise self.http_error(refusal) from None
        except asyncio.CancelledError:
            self.waiters.pop(request_id, None)
            raise
        finally:
            waited[0] = time.perf_counter() - waiting_since
            waited[1] = time.thread_time() - waiting_since_cpu
        if ticket.state != SENT:
            # Settled while it waited (the proxy is stopping): it never reaches the engine unmetered.
            refusal = gate.queue_refusal(ticket)
            raise self.http_error(refusal)
        max_tokens = None
        if not data.get("stream"):
            try:
                max_tokens = await self._ticket_call(ticket, gate.lease_all, time.time())
            except Exception as error:  # the store failed leasing the output: refused or unmetered, as configured
                self._count_store_failure(error)
                await self._settle(ticket, STORE_DOWN)
                if self.settings.redis_failure == "closed":
                    raise self.http_error(self._store_refusal(ticket.tenant)) from None
            self._journal_progress(ticket, time.time())
        return self._engine_body(ticket, data, request_id, max_tokens)

    def _engine_body(self, ticket: Ticket, data: dict, request_id: str, max_tokens: int | None) -> dict:
        """``data`` rewritten for the engine (``Gate.rewrite``), pinned to the replica it was placed on, and carrying
        the ticket's id between hooks."""
        rewritten = self.gate.rewrite(ticket, data, max_tokens=max_tokens)
        replicas = self.settings.replica_deployments.get(ticket.pool)
        if replicas and ticket.replica is not None:
            # A deployment's id as the model pins LiteLLM's router to it (Router.get_available_deployment): the
            # request reaches the replica its resident-KV cap was counted on.
            rewritten["model"] = replicas[ticket.replica]
        # priority and cache_salt travel in extra_body, which LiteLLM merges into the engine's body: a top-level
        # integer priority would instead queue the request in LiteLLM's own scheduler (Router.schedule_acompletion).
        extra = {key: rewritten.pop(key) for key in ("priority", "cache_salt") if key in rewritten}
        if extra:
            rewritten["extra_body"] = extra
        rewritten[TICKET_KEY] = request_id
        metadata = dict(rewritten.get("metadata") or {})
        metadata[TICKET_KEY] = request_id
        rewritten["metadata"] = metadata
        data.clear()
        data.update(rewritten)
        return data

    def _store_down(
        self,
        error: Exception,
        tenant: int,
        name: str | None,
        request_id: str,
        now: float,
        prompt_tokens: int,
        data: dict,
    ) -> dict:
        """The bucket store failed: refuse (fail closed) or let the request through unmetered (fail open: nothing held
        nor billed, but its tokens are counted and recorded at its end, as a metered request's)."""
        self._count_store_failure(error)
        if self.settings.redis_failure == "closed":
            refusal = self._store_refusal(tenant)
            self.write_record(refusal_record(refusal, name, request_id, now, prompt_tokens))
            raise self.http_error(refusal) from None
        client_max = data.get("max_completion_tokens") or data.get("max_tokens")
        client_max = client_max if isinstance(client_max, int) and client_max > 0 else None
        ticket = self.gate.admit_unmetered(tenant, prompt_tokens, now, request_id, client_max)
        ticket.streaming = bool(data.get("stream"))
        self._journal_admitted(ticket, now)
        # Unmetered, not unpoliced: the tier's priority, the tenant's own cache namespace and output cap still hold.
        return self._engine_body(ticket, data, request_id, None)

    def _store_refusal(self, tenant: int) -> Refusal:
        return self.gate.refuse(
            tenant,
            Refusal(
                503,
                STORE_DOWN,
                "quotacalc: the quota store is unavailable; retry after 5 s",
                retry_after_s=5,
                kind="service_unavailable",
                code=STORE_DOWN,
            ),
        )

    # -- streaming -----------------------------------------------------------------------------------

    def _ticket(self, data: dict | None) -> Ticket | None:
        if not data:
            return None
        request_id = data.get(TICKET_KEY) or (data.get("metadata") or {}).get(TICKET_KEY)
        litellm_params = data.get("litellm_params") or {}
        request_id = request_id or (litellm_params.get("metadata") or {}).get(TICKET_KEY)
        return self.gate.live.get(request_id) if request_id else None

    async def async_post_call_streaming_iterator_hook(
        self, user_api_key_dict: Any, response: Any, request_data: dict
    ) -> AsyncGenerator[Any, None]:
        ticket = self._ticket(request_data)
        if ticket is None:
            async for item in response:
                yield item
            return
        outcome = DISCONNECT
        usage = None
        spent_s = spent_cpu_s = 0.0
        #: The tokens at which the next progress line is due, and the lease, tokens and time of the last one.
        journaled = None if self.journal is None else [1, ticket.granted, 0, 0.0]
        try:
            async for chunk in response:
                chunk_usage = getattr(chunk, "usage", None)
                if chunk_usage is not None:
                    usage = chunk_usage
                choices = getattr(chunk, "choices", None) or []
                tokens = _chunk_tokens(choices)
                if tokens:
                    started = time.perf_counter()
                    started_cpu = time.thread_time()
                    covered, stop = await self._renew(ticket, tokens)
                    if journaled is not None:
                        # A progress line where due (see quotacalc.enforce.journal.Journal.progress), checked in a few
                        # comparisons: a chunk's path must stay cheap.
                        now = time.time()
                        output = ticket.output_tokens
                        if (
                            output >= journaled[0]
                            or ticket.granted != journaled[1]
                            or (output != journaled[2] and now - journaled[3] >= self.journal_every_s)
                        ):
                            self._journal_progress(ticket, now)
                            journaled = [output + self.journal_tokens, ticket.granted, output, now]
                    spent_s += time.perf_counter() - started
                    spent_cpu_s += time.thread_time() - started_cpu
                    if covered < tokens:
                        outcome = stop
                        _mark_stopped(chunk, choices, stop)
                        yield chunk
                        break
                yield chunk
            else:
                outcome = COMPLETED
        except (GeneratorExit, asyncio.CancelledError):
            outcome = DISCONNECT
            raise
        except Exception:
            outcome = ENGINE_ERROR
            raise
        finally:
            if outcome in (QUOTA_STOP, STORE_DOWN):
                # Closing the engine's stream ends its request, so the engine frees the sequence's KV.
                with contextlib.suppress(Exception):
                    await response.aclose()
            self._spend(ticket.request_id, "stream", spent_s, spent_cpu_s)
            await self._settle_with_usage(ticket, outcome, usage)

    async def _renew(self, ticket: Ticket, tokens: int) -> tuple[int, str]:
        """How many of a chunk's tokens the lease covers, and how the stream stops if not all: at the quota, or
        (the store failed renewing it) where a closed failure policy stops it; an open one lets them through."""
        if ticket.request_id in self._settling:
            # Another path (the failure hook, the lease's expiry) is settling it on Redis: its bill is being made
            # from the tokens counted so far, so these are not added to it (as after a settlement in memory).
            return tokens, QUOTA_STOP
        try:
            return await self._ticket_call(ticket, self.gate.on_tokens, tokens, time.time()), QUOTA_STOP
        except Exception as error:  # the store failed renewing the lease
            self._count_store_failure(error)
            if self.settings.redis_failure == "closed":
                return 0, STORE_DOWN
            ticket.output_tokens += tokens
            return tokens, QUOTA_STOP

    async def _settle_with_usage(self, ticket: Ticket, outcome: str, usage: Any) -> None:
        prompt = cached = output = None
        if usage is not None:
            prompt = getattr(usage, "prompt_tokens", None)
            output = getattr(usage, "completion_tokens", None)
            details = getattr(usage, "prompt_tokens_details", None)
            cached = getattr(details, "cached_tokens", None) if details is not None else None
        await self._settle(ticket, outcome, prompt_tokens=prompt, cached_tokens=cached, output_tokens=output)

    def _count_store_failure(self, error: Exception | None) -> None:
        self.store_failures += 1
        log.error("quotacalc: the bucket store failed (%s): failing %s", error, self.settings.redis_failure)

    # -- settlement of responses not streamed --------------------------------------------------------

    async def async_post_call_success_hook(self, data: dict, user_api_key_dict: Any, response: Any) -> Any:
        ticket = self._ticket(data)
        if ticket is not None and not data.get("stream"):
            usage = getattr(response, "usage", None)
            if usage is not None and getattr(usage, "completion_tokens", 0):
                ticket.first_token_s = ticket.first_token_s or time.time()
            await self._settle_with_usage(ticket, COMPLETED, usage)
        return response

    async def async_post_call_failure_hook(
        self, request_data: dict, original_exception: Exception, user_api_key_dict: Any, traceback_str: Any = None
    ) -> Any:
        ticket = self._ticket(request_data)
        if ticket is not None:
            await self._settle_with_usage(ticket, ENGINE_ERROR, None)
        return None

    def shutdown(self) -> None:
        """Settle every live request (the proxy is stopping) and write their records. A settlement cut off mid-way
        is sent again: the store applies each request's settlement once, so this one returns what landed, if any.
        One the store still does not confirm is written as it stands (``store_failed``)."""
        now = time.time()
        for ticket in list(self.gate.live.values()):
            with contextlib.suppress(Exception):
                self._settle_and_write(ticket, SHUTDOWN, now, {})
        for ticket in list(self.gate.unconfirmed.values()):
            try:
                self._confirm_and_write(ticket)
            except Exception:
                self._write_settled(ticket, ticket.record)
        if self.journal is not None:
            # Requests adopted from a killed proxy's journal that the store would not settle stay in this journal
            # (kept, not removed), for the next proxy to start here.
            with contextlib.suppress(Exception):
                self._recover_now()
            self.journal.close()
            self.journal = None


def _chunk_tokens(choices: list[Any]) -> int:
    """Output tokens in a streamed chunk: one per choice that carries text (the engine streams a token a chunk)."""
    tokens = 0
    for choice in choices:
        delta = getattr(choice, "delta", None)
        text = getattr(delta, "content", None) if delta is not None else getattr(choice, "text", None)
        if text:
            tokens += 1
    return tokens


def _mark_stopped(chunk: Any, choices: list[Any], stop: str) -> None:
    """The chunk a lease could not cover becomes the stream's last: finish_reason length, no text, and a field
    that says the quota (or the store) stopped it."""
    for choice in choices:
        choice.finish_reason = "length"
        if getattr(choice, "delta", None) is not None:
            choice.delta.content = None
    said = {QUOTA_STOP_FIELD: "quota" if stop == QUOTA_STOP else STORE_DOWN}
    with contextlib.suppress(Exception):
        chunk.provider_specific_fields = said
    for choice in choices:
        with contextlib.suppress(Exception):
            choice.provider_specific_fields = said
