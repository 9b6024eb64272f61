"""Environment code run with a deadline: an ``async def`` method on the running event loop (it is
cancelled at the deadline; it must not block the loop), any other in a daemon thread of its own
(abandoned at the deadline, left to finish by itself), so a hung environment holds up neither the
other episodes nor the process's exit.
"""

from __future__ import annotations

import asyncio
import inspect
import threading
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


def is_async(method: Any) -> bool:
    """Whether ``method`` is ``async def`` (runs on the loop) rather than plain (runs in a thread)."""
    return inspect.iscoroutinefunction(method)


async def with_deadline(call: Callable[[], Coroutine[Any, Any, T]], on_loop: bool, timeout: float | None) -> T:
    """``await call()`` within ``timeout`` seconds (None: no limit), on this loop or, when not
    ``on_loop``, in a daemon thread with an event loop of its own; ``TimeoutError`` past it."""
    return await asyncio.wait_for(call() if on_loop else in_daemon_thread(lambda: asyncio.run(call())), timeout)


def in_daemon_thread(fn: Callable[[], T]) -> asyncio.Future[T]:
    """``fn()`` in a daemon thread, as a future of the running loop. Abandoning the future leaves
    the thread to finish on its own; a daemon thread never holds up the process's exit."""
    loop = asyncio.get_running_loop()
    fut: asyncio.Future[T] = loop.create_future()

    def settle(ok: bool, value: Any) -> None:
        if not fut.done():
            fut.set_result(value) if ok else fut.set_exception(value)

    def work() -> None:
        try:
            ok, value = True, fn()
        except BaseException as x:  # noqa: BLE001 - handed to whoever awaits the future
            ok, value = False, x
        try:
            loop.call_soon_threadsafe(settle, ok, value)
        except RuntimeError:
            pass  # the loop is gone: nobody waits for this call any more

    threading.Thread(target=work, name="grm-env", daemon=True).start()
    return fut
