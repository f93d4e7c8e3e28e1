"""The request body on its way up: teed for the record as it streams in (`TeedBody`), and as
one send reads it (`Upload`), the bytes a first send took going first on a second.

Iterators rather than async generators (see docs/architecture.md, mypyc).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Protocol

from ollama_tap.relay.failures import UpstreamGone
from ollama_tap.relay.incoming import BodySource


class Tee(Protocol):
    """What a teed body tells its exchange (`tapped.Tapped`)."""

    def tee_piece(self, data: bytes) -> None: ...

    def body_ended(self) -> None: ...

    def tee_full(self) -> bool: ...


class Unwinding:
    """A read under way that someone may have to wait out: a body source takes one reader
    at a time, and a read cancelled on one loop turn unwinds on the next ones."""

    def __init__(self) -> None:
        self.reading = False
        self._left: asyncio.Future[None] | None = None

    def left(self) -> None:
        """The read is over (returned, raised or was cancelled)."""
        self.reading = False
        if self._left is not None and not self._left.done():
            self._left.set_result(None)

    async def wait(self) -> None:
        """Until no read is under way."""
        if self.reading:
            self._left = asyncio.get_running_loop().create_future()
            await self._left


class TeedBody:
    """A request body as it streams in, teed on its way; the exchange hears of its end."""

    def __init__(self, tee: Tee, content: BodySource) -> None:
        self.tee = tee
        self.pieces = content.iter_any().__aiter__()
        self.done = False
        self.read = Unwinding()

    def __aiter__(self) -> TeedBody:
        return self

    async def __anext__(self) -> bytes:
        self.read.reading = True
        try:
            data = await self.pieces.__anext__()
        except StopAsyncIteration:
            self.done = True
            self.tee.body_ended()
            raise
        finally:
            self.read.left()
        self.tee.tee_piece(data)
        return data

    async def rest(self) -> None:
        """Read (and tee) what is left, once the upload that read it has stopped; until the
        end or the tee limit."""
        await self.read.wait()
        async for _ in self:
            if self.tee.tee_full():
                return


class Upload:
    """A streamed request body as one send reads it: on a second send, the bytes the first
    one took go first, then the rest as it streams in.

    A send that failed may still be inside a read of the body: `settled` waits for it to
    leave, so that the piece it takes is teed before the second send is built, and it reads
    nothing from then on.
    """

    def __init__(self, body: AsyncIterator[bytes], first: bytes = b"") -> None:
        self.body = body
        self.first = first
        self.retired = False
        self.read = Unwinding()

    def __aiter__(self) -> Upload:
        return self

    async def __anext__(self) -> bytes:
        if self.retired:
            raise UpstreamGone("the request is being sent again on another connection")
        if self.first:
            first, self.first = self.first, b""
            return first
        self.read.reading = True
        try:
            return await self.body.__anext__()
        finally:
            self.read.left()

    async def settled(self) -> None:
        """Retire this view of the body, once no read of it is under way."""
        self.retired = True
        await self.read.wait()


async def held_for_resend(
    upload: Upload | None, sent_so_far: Callable[[], bytes | None]
) -> bytes | None:
    """What a second send writes before the rest of a streamed body: nothing for a body read
    whole (resent from memory), the upload's bytes so far once the failed send has left it
    (`Upload.settled`), or None when they are not all at hand and no second send is made."""
    if upload is None:
        return b""
    await upload.settled()
    return sent_so_far()
