"""Synchronous gate code over an asynchronous bucket store, without blocking the event loop.

The gate (``quotacalc.enforce.gate``) and the admission core's ledger call their ``BucketStore`` as plain functions,
one path for every store. A store whose operations are network round trips (Redis) must not run them on LiteLLM's
event loop thread as blocking calls: one slow reply would stall every request of the proxy. So the plugin runs each
gate call inside a greenlet (``run``); a store operation there hands its coroutine to the caller's coroutine
(``await_only``), which awaits it on the loop while other requests go on, and resumes the gate with its result or
its exception. An in-memory store never hands anything over, so its calls run straight through.

This is the pattern of SQLAlchemy's asyncio extension (``greenlet_spawn`` / ``await_only``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import greenlet

T = TypeVar("T")


class _Bridged(greenlet.greenlet):  # type: ignore[misc]
    """A greenlet whose store operations are awaited by the coroutine that started it."""


def in_bridge() -> bool:
    """Whether the caller runs inside ``run`` (so ``await_only`` may hand a coroutine over)."""
    return isinstance(greenlet.getcurrent(), _Bridged)


def await_only(awaitable: Awaitable[T]) -> T:
    """The result of ``awaitable``, awaited by the coroutine that runs this code through ``run``."""
    current = greenlet.getcurrent()
    if not isinstance(current, _Bridged):
        raise RuntimeError("a store coroutine was called outside quotacalc.enforce.bridge.run")
    return current.parent.switch(awaitable)  # type: ignore[no-any-return]


async def run(function: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """``function(*args, **kwargs)``, awaiting on this event loop each awaitable it hands over with ``await_only``."""
    child = _Bridged(function, greenlet.getcurrent())
    handed = child.switch(*args, **kwargs)
    while not child.dead:
        try:
            value = await handed
        except BaseException as error:  # the gate sees the store's exception (or a cancellation)
            handed = child.throw(error)
        else:
            handed = child.switch(value)
    return handed  # type: ignore[no-any-return]
