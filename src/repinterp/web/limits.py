"""What the viewer's clients can hold of it, beyond a connection (see `.server` for those):
the queue of requests that compute, and the memory that decoding uploads may take.

`ComputeQueue` runs the costly requests (comparisons, CAM heat maps, exports) one at a
time, in async code: a waiting request holds no thread, the queue is bounded and its wait has a
deadline (HTTP 503 past either), a request whose client has gone leaves the queue unrun, and
one whose client goes while it computes stops at the model's next forward pass.
`ByteBudget` bounds the bytes of uploads being decoded at once, across threads.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

import anyio
from starlette.concurrency import run_in_threadpool
from starlette.requests import ClientDisconnect
from starlette.types import Receive
from torch import nn

__all__ = ["QUEUE_LENGTH", "QUEUE_TIMEOUT", "Busy", "ByteBudget", "Cancelled", "ComputeQueue"]

QUEUE_LENGTH = 16
QUEUE_TIMEOUT = 60.0

T = TypeVar("T")


class Busy(RuntimeError):
    """The viewer has too much to do to take this request now; try again later (HTTP 503)."""


class Cancelled(ClientDisconnect):
    """The client of a costly request went away while it computed, so the work stopped."""


async def _disconnected(receive: Receive) -> None:
    """Return when the client has gone (a request's body, if any, is read and dropped)."""
    while (await receive())["type"] != "http.disconnect":
        pass


class ComputeQueue:
    """Costly requests, computed one at a time in a worker thread, in the order they came.

    Args:
        length: requests that may wait while one computes; more are refused at once.
        timeout: seconds a request may wait for its turn before it is refused.
        model: the model the work runs (a Score-CAM pass runs it once per batch of channels):
            while a request computes, a forward pre-hook on it raises `Cancelled` in the
            request's thread once its client has gone; other threads' passes go on. None:
            work runs to its end.
    """

    def __init__(
        self,
        length: int = QUEUE_LENGTH,
        timeout: float = QUEUE_TIMEOUT,
        model: nn.Module | None = None,
    ) -> None:
        self.length = length
        self.timeout = timeout
        self.model = model
        self.waiting = 0
        self._turn = anyio.Lock()
        self._job = threading.local()

    async def run(self, receive: Receive, work: Callable[[], T]) -> T:
        """``work()`` in a worker thread once it is this request's turn.

        Args:
            receive: the request's ASGI ``receive``, watched for the client going away.
            work: what to compute.

        Raises:
            Busy: ``length`` requests are already waiting, or the turn did not come within
                ``timeout`` seconds.
            ClientDisconnect: the client went away before its turn (``work`` never ran).
            Cancelled: the client went away while ``work`` ran, and ``model`` ran after that.
        """
        try:
            self._turn.acquire_nowait()
        except anyio.WouldBlock:
            await self._wait_for_turn(receive)
        try:
            return await self._compute(receive, work)
        finally:
            self._turn.release()

    async def _compute(self, receive: Receive, work: Callable[[], T]) -> T:
        """``work()`` in a worker thread, told by `_stop_if_gone` when the client goes."""
        gone = threading.Event()

        def job() -> T:
            self._job.gone = gone
            hook = self.model.register_forward_pre_hook(self._stop_if_gone) if self.model else None
            try:
                return work()
            finally:
                self._job.gone = None
                if hook is not None:
                    hook.remove()

        error: Exception | None = None
        async with anyio.create_task_group() as group:

            async def watch() -> None:
                await _disconnected(receive)
                gone.set()

            group.start_soon(watch)
            try:
                result = await run_in_threadpool(job)
            except Exception as exc:  # raised below: a task group would wrap it in a group
                error = exc
            group.cancel_scope.cancel()
        if error is not None:
            raise error
        return result

    def _stop_if_gone(self, module: nn.Module, args: Any) -> None:
        gone = getattr(self._job, "gone", None)
        if gone is not None and gone.is_set():
            raise Cancelled()

    async def _wait_for_turn(self, receive: Receive) -> None:
        """Take the turn, waiting as one of at most ``length``, for at most ``timeout`` s, and
        only while the client stays (see `run`)."""
        if self.waiting >= self.length:
            raise Busy(f"{self.waiting} costly requests are already waiting: try again later")
        self.waiting += 1
        turn = gone = False
        try:
            async with anyio.create_task_group() as group:

                async def watch() -> None:
                    nonlocal gone
                    await _disconnected(receive)
                    gone = True
                    group.cancel_scope.cancel()

                group.start_soon(watch)
                with anyio.move_on_after(self.timeout):
                    await self._turn.acquire()
                    turn = True
                group.cancel_scope.cancel()
        finally:
            self.waiting -= 1
        if not turn:
            if gone:
                raise ClientDisconnect()
            raise Busy(f"the viewer was busy for {self.timeout:g} s: try again later")


class ByteBudget:
    """At most ``total`` bytes held at once by the threads that ask; the others wait.

    Args:
        total: bytes that may be held at once.
        timeout: seconds a thread may wait for its bytes before it is refused.
    """

    def __init__(self, total: int, timeout: float = QUEUE_TIMEOUT) -> None:
        self.total = total
        self.timeout = timeout
        self.held = 0
        self._changed = threading.Condition()

    @contextmanager
    def hold(self, size: int) -> Iterator[None]:
        """Hold ``size`` bytes (at most ``total``) for the ``with`` block.

        Raises:
            ValueError: ``size`` is more than ``total``.
            Busy: the bytes were not free within ``timeout`` seconds.
        """
        if size > self.total:
            raise ValueError(f"{size} bytes asked of a budget of {self.total}")
        with self._changed:
            if not self._changed.wait_for(lambda: self.held + size <= self.total, self.timeout):
                raise Busy(f"the viewer was busy for {self.timeout:g} s: try again later")
            self.held += size
        try:
            yield
        finally:
            with self._changed:
                self.held -= size
                self._changed.notify_all()
