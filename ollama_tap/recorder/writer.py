"""The write path: a bounded queue drained by one thread that commits in batches.

The event loop side is a ``deque.append`` (no I/O; a lock only to wake the thread, when the
queue was empty); a full queue drops the record and counts it, so client traffic is never
slowed. The thread sleeps until there is work: a record queued (it then waits FLUSH_EVERY
seconds for more and writes everything queued in transactions of up to BATCH rows), the
store's measurement falling due (at most every MEASURE_EVERY seconds after writes), a prune
(every PRUNE_EVERY seconds), or stop, when it drains the queue before closing. An idle
proxy's writer wakes only to prune: each wake takes the GIL from the event loop.

The store (`Sink`: a SQLite file or PostgreSQL) is written only from this thread. A store
that cannot be reached keeps the batch in hand, tried again every RETRY_EVERY seconds,
while new records queue up to the bound and are then dropped and counted; the insert is
idempotent on the record id, so a batch whose commit was cut off is never stored twice.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from typing import Any, Final

import structlog

from ollama_tap.config import RecordMode
from ollama_tap.exchange import Exchange
from ollama_tap.metrics.registered import RecorderMetrics
from ollama_tap.recorder.backend import RowsRefused, Sink, StoreError, StoreUnavailable
from ollama_tap.recorder.record import Origin, to_row
from ollama_tap.recorder.retention import Retention
from ollama_tap.recorder.scope import Capture

QUEUE_BYTES: Final = 256 * 1024 * 1024
"""What the queued exchanges may hold in bodies and parsed replies (vision requests and
embedding replies are megabytes each); beyond it records are dropped and counted, as when
the queue is full, so a stalled disk never turns into an out-of-memory kill."""
FLUSH_EVERY: Final = 0.05
BATCH: Final = 100
"""Rows per transaction: enough to amortize the commit, few enough that a burst of ends
(2,000 streams finishing together) does not hold hundreds of rows and exchanges at once."""
PRUNE_EVERY: Final = 300.0
MEASURE_EVERY: Final = 1.0
"""Least seconds between two measurements of the file after writes: at one request at a
time every round writes one row, and the two `stat` calls of a measurement would be a
large share of each round's CPU."""
RETRY_EVERY: Final = 1.0
"""Seconds between tries of a store that could not be reached."""

log = structlog.get_logger("ollama_tap.recorder")


class Writer:
    """Owns the store's write side; everything but `submit` runs off the event loop."""

    def __init__(
        self,
        sink: Sink,
        mode: RecordMode,
        capacity: int,
        retention: Retention,
        metrics: RecorderMetrics,
        origin: Origin,
    ) -> None:
        self.sink = sink
        self.mode = mode
        self.origin = origin
        self.capacity = capacity
        self.retention = retention
        self.metrics = metrics
        self._queue: deque[tuple[Exchange, Capture, int]] = deque()
        # Bytes queued = added − taken. Each counter has one writer (the event loop, the
        # writer thread): a single shared `+=`/`-=` would lose updates between threads.
        self._added = 0
        self._taken = 0
        self._stop = threading.Event()
        self._wake = threading.Event()
        """Set when the queue gets its first record, and on stop."""
        self._thread: threading.Thread | None = None
        self._pending: list[dict[str, Any]] = []
        """The batch in hand: built, not yet committed (kept while the store is away)."""
        self._down_since: float | None = None
        """When the store was found unreachable (monotonic), None while it is reachable."""
        self._retry_at = 0.0
        self._next_measure = 0.0
        self._next_prune = time.monotonic() + PRUNE_EVERY
        self._unmeasured = False
        self._writing = 0
        """Records taken from the queue and not yet written (the writer thread's count)."""
        self._busy_since: float | None = None
        """When the write in progress began (monotonic; the writer thread sets it)."""
        self._said_stuck = False
        """Whether `check_stuck` said so for the write in progress (the loop's flag)."""
        metrics.queue_depth.set_function(lambda: len(self._queue))

    def submit(self, ex: Exchange, cap: Capture) -> None:
        """Queue a finished exchange, or drop and count it when the queue is full (by count
        or by bytes) or the writer thread is gone."""
        weight = _weight(ex, cap)
        full = len(self._queue) >= self.capacity or self.queued_bytes + weight > QUEUE_BYTES
        if full or (self._thread is not None and not self._thread.is_alive()):
            self.metrics.dropped.inc()
            return
        self._added += weight
        self._queue.append((ex, cap, weight))
        if len(self._queue) == 1:
            # Only the first record of a batch wakes the thread: the rest find it awake.
            # Counted after the append: a check before it could see a record the thread
            # was about to take, and the thread would sleep with this one queued.
            self._wake.set()

    @property
    def queued_bytes(self) -> int:
        """The estimated size of the records queued and not yet taken: what QUEUE_BYTES bounds."""
        return self._added - self._taken

    def _take(self, n: int) -> list[tuple[Exchange, Capture]]:
        self._writing = n  # until written: `stop` counts them as unwritten until then
        items = [self._queue.popleft() for _ in range(n)]
        self._taken += sum(weight for _, _, weight in items)
        return [(ex, cap) for ex, cap, _ in items]

    def open(self) -> None:
        """Open and migrate the store, and prune once (blocking: call it in a thread). A
        database that cannot be reached yet does not stop the proxy: the thread connects
        when it can, and records queue meanwhile."""
        try:
            self.sink.open()
        except StoreUnavailable as exc:
            self._unavailable(exc)
        else:
            self._prune()
        self._next_prune = time.monotonic() + PRUNE_EVERY

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="ollama-tap-recorder", daemon=True)
        self._thread.start()

    def stop(self, timeout: float) -> None:
        """Drain the queue and close (blocking, bounded by `timeout`)."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout)
            if self._thread.is_alive():
                # Queued, and the batch being written (a stuck disk or database holds it
                # too): lost with the process, and counted as such.
                unwritten = len(self._queue) + self._writing
                self.metrics.dropped.inc(unwritten)
                log.warning("recorder_stop_timeout", unwritten=unwritten)

    def check_stuck(self, timeout: float) -> None:
        """Log `recorder_store_unavailable` once when a write has run past `timeout`
        seconds (called from the event loop; reads one float the writer thread sets)."""
        since = self._busy_since
        if since is None:
            self._said_stuck = False
        elif not self._said_stuck and time.monotonic() - since > timeout:
            self._said_stuck = True
            log.error(
                "recorder_store_unavailable",
                error=f"a write has not finished in {timeout:g} s (--db-timeout); the "
                "database accepts connections but does not answer",
                waiting=self._writing,
            )

    def _run(self) -> None:
        while True:
            self._wake.wait(self._until_due())
            # Cleared before the queue is read: a record queued from here on wakes it again.
            self._wake.clear()
            stopping = self._stop.is_set()
            if self._queue and not stopping:
                stopping = self._stop.wait(FLUSH_EVERY)  # a batch gathers meanwhile
            try:
                self._round()
            except Exception:
                # The thread must outlive any one failure: a dead writer would let the
                # queue fill silently. Count it, pause (a failure that repeats must not
                # spin), and carry on.
                self.metrics.write_errors.inc()
                log.exception("recorder_round_failed")
                stopping = self._stop.wait(FLUSH_EVERY) or stopping
            if stopping and self._down_since is not None:
                # Stopping with the store away: what is left is lost, and counted as such.
                unwritten = len(self._queue) + len(self._pending)
                self.metrics.dropped.inc(unwritten)
                log.warning("recorder_stop_store_unavailable", unwritten=unwritten)
                break
            if stopping and not self._queue:
                break
        self.sink.close()

    def _until_due(self) -> float:
        """Seconds until the next prune, or the measurement a throttled write left due; none
        while records wait (a failed round can leave some, and no new one would wake it)."""
        if self._queue or self._pending:
            return max(0.0, self._retry_at - time.monotonic())
        due = self._next_prune
        if self._unmeasured:
            due = min(due, self._next_measure)
        return max(0.0, due - time.monotonic())

    def _round(self) -> None:
        """Write everything queued, then prune or measure."""
        wrote = False
        while self._pending or self._queue:
            if not self._pending:
                self._pending = self._rows(self._take(min(BATCH, len(self._queue))))
            if not self._deliver():
                return  # kept; the queue fills to its bound meanwhile
            wrote = True
        if time.monotonic() >= self._next_prune:
            # Set first: a prune that fails is tried again at the next one, not each round.
            self._next_prune = time.monotonic() + PRUNE_EVERY
            self._prune()
            return
        # A write the throttle skipped is measured at the next due round, written or not,
        # so the gauge never stays behind the file for more than MEASURE_EVERY.
        self._unmeasured = self._unmeasured or wrote
        if self._unmeasured and time.monotonic() >= self._next_measure:
            self._next_measure = time.monotonic() + MEASURE_EVERY
            self._unmeasured = False
            self._measure()

    def _rows(self, batch: list[tuple[Exchange, Capture]]) -> list[dict[str, Any]]:
        rows = []
        for ex, cap in batch:
            try:
                rows.append(to_row(ex, cap, self.mode, self.origin))
            except Exception:
                self.metrics.write_errors.inc()
                log.exception("record_build_failed", id=ex.id)
        return rows

    def _deliver(self) -> bool:
        """Commit the batch in hand; False (and kept) when the store cannot be reached."""
        if self._down_since is not None:
            try:
                self.sink.open()  # connects again, and migrates a database met for once
            except StoreUnavailable as exc:
                return self._unavailable(exc)
        try:
            self._insert(self._pending)
        except StoreUnavailable as exc:
            return self._unavailable(exc)
        if self._down_since is not None:
            log.info("recorder_store_back", away=round(time.monotonic() - self._down_since, 1))
            self._down_since = None
        self._pending = []
        self._writing = 0
        return True

    def _unavailable(self, exc: StoreUnavailable) -> bool:
        """Count a failed try; say so once per outage, not once per try."""
        self.metrics.write_errors.inc()
        if self._down_since is None:
            self._down_since = time.monotonic()
            log.error("recorder_store_unavailable", error=str(exc))
        self._retry_at = time.monotonic() + RETRY_EVERY
        return False

    def _insert(self, rows: list[dict[str, Any]]) -> None:
        if not rows:
            return
        self._busy_since = time.monotonic()
        try:
            self.sink.insert(rows)
        except RowsRefused as exc:
            if len(rows) > 1:
                # One by one, so one bad record does not cost the whole batch.
                for row in rows:
                    self._insert([row])
            else:
                self._lost(rows, exc)
        except StoreUnavailable:
            raise
        except StoreError as exc:
            self._lost(rows, exc)
        finally:
            self._busy_since = None

    def _lost(self, rows: list[dict[str, Any]], exc: Exception) -> None:
        self.metrics.write_errors.inc(len(rows))
        log.error(
            "record_write_failed",
            ids=[row["id"] for row in rows[:10]],
            records=len(rows),
            error=str(exc),
        )

    def _prune(self) -> None:
        try:
            deleted = self.sink.prune(self.retention, time.time())
        except StoreError as exc:
            log.error("retention_failed", error=str(exc))
        else:
            if deleted:
                log.info("records_pruned", deleted=deleted)
        self._measure()

    def _measure(self) -> None:
        size = self.sink.size()
        if size is not None:
            self.metrics.db_size.set(size)


def _weight(ex: Exchange, cap: Capture) -> int:
    """Bytes an exchange holds until written: its teed body, the text of its timeline, the
    raw reply, and for a single JSON reply kept parsed on `ex.final`, about its wire size
    (O(1): no walking of parsed objects)."""
    body = len(ex.request_body) if ex.request_body is not None else 0
    text = len(cap.timeline.text) if cap.timeline is not None else 0
    raw = len(cap.raw.body) if cap.raw is not None else 0
    parsed = ex.response_bytes if ex.final is not None and not ex.streamed else 0
    return body + text + raw + parsed
