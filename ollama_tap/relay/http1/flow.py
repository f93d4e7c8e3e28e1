"""Flow control shared by the HTTP/1 transport's connections: pause and resume reading,
wait for a full send buffer to drain, and the one-future waiter they are built on."""

from __future__ import annotations

import asyncio
from typing import cast


class Waiter:
    """One awaited future at a time, woken from a callback (a no-op when nobody waits)."""

    def __init__(self) -> None:
        self._future: asyncio.Future[None] | None = None

    async def wait(self) -> None:
        future = self._future = asyncio.get_running_loop().create_future()
        await future

    def wake(self, error: BaseException | None = None) -> None:
        future, self._future = self._future, None
        if future is not None and not future.done():
            if error is None:
                future.set_result(None)
            else:
                future.set_exception(error)


class FlowControl:
    """Back-pressure on one socket: reading paused while what it brings cannot be taken,
    writers waiting while its send buffer is above the high-water mark."""

    def __init__(self) -> None:
        self.transport = cast(asyncio.Transport, None)
        """Set by the connection once it is made (`connection_made`), before any other call."""
        self.reading_paused = False
        self.writing_paused = False
        self._drained = Waiter()

    def pause_reading(self) -> None:
        if not self.reading_paused and not self.transport.is_closing():
            self.reading_paused = True
            self.transport.pause_reading()

    def resume_reading(self) -> None:
        if self.reading_paused:
            self.reading_paused = False
            if not self.transport.is_closing():
                self.transport.resume_reading()

    def pause_writing(self) -> None:
        self.writing_paused = True

    def resume_writing(self) -> None:
        self.writing_paused = False
        self._drained.wake()

    async def drain(self) -> None:
        """Wait while the send buffer is above its high-water mark."""
        if self.writing_paused and not self.transport.is_closing():
            await self._drained.wait()

    def lost(self, error: BaseException | None) -> None:
        """The connection closed: a writer waiting is woken (with `error`, if given)."""
        self.writing_paused = False
        self._drained.wake(error)
