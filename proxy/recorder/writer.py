"""The write path: a bounded queue drained by one thread that commits in batches.

The event loop side is a ``deque.append`` (no I/O; a lock only to wake the thread, when the
queue was empty); a full queue drops the record and counts it, so client traffic is never
slowed. The thread sleeps until there is work: a record queued (it then waits FLUSH_EVERY
seconds for more and writes everything queued in transactions of up to BATCH rows), the
file's measurement falling due (at most every MEASURE_EVERY seconds after writes), a prune
(every PRUNE_EVERY seconds), or stop, when it drains the queue before closing. An idle
proxy's writer wakes only to prune: it used to wake every FLUSH_EVERY seconds to find
nothing, each time taking the GIL from the event loop. Retention runs here rather than in
a second connection so the file has exactly one writer and no transaction ever waits on
another.
"""

from __future__ import annotations

import contextlib
import operator
import os
import sqlite3
import threading
import time
from collections import deque
from pathlib import Path
from typing import Any, Final

import structlog

from proxy.config import RecordMode
from proxy.exchange import Exchange
from proxy.metrics.registered import RecorderMetrics
from proxy.recorder.record import COLUMNS, to_row
from proxy.recorder.retention import Retention, prune
from proxy.recorder.schema import open_writer
from proxy.recorder.scope import Capture

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
time every round writes one row, and its two `stat` calls were a tenth of its CPU."""
_INSERT: Final = (
    f"INSERT INTO records ({', '.join(COLUMNS)}) VALUES ({', '.join('?' * len(COLUMNS))})"
)
_VALUES: Final = operator.itemgetter(*COLUMNS)
"""A row's values in COLUMNS order: binding them by position spares sqlite3 a dict lookup
per named parameter (35 per row), about 15% of the insert's CPU."""

log = structlog.get_logger("ollama_tap.recorder")


class Writer:
    """Owns the write connection; everything but `submit` runs off the event loop."""

    def __init__(
        self,
        path: Path,
        mode: RecordMode,
        capacity: int,
        retention: Retention,
        metrics: RecorderMetrics,
    ) -> None:
        self.path = path
        self.mode = mode
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
        self._conn: sqlite3.Connection | None = None
        self._next_measure = 0.0
        self._next_prune = time.monotonic() + PRUNE_EVERY
        self._unmeasured = False
        self._writing = 0
        """Records taken from the queue and not yet written (the writer thread's count)."""
        self._file: tuple[int, int] | None = None
        """The database file the connection writes to, as opened (device, inode)."""
        metrics.queue_depth.set_function(lambda: len(self._queue))

    def submit(self, ex: Exchange, cap: Capture) -> None:
        """Queue a finished exchange, or drop and count it when the queue is full (by count
        or by bytes) or the writer thread is gone."""
        weight = _weight(ex, cap)
        queued = self._added - self._taken
        full = len(self._queue) >= self.capacity or queued + weight > QUEUE_BYTES
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
        return self._added - self._taken

    def _take(self, n: int) -> list[tuple[Exchange, Capture]]:
        self._writing = n  # until written: `stop` counts them as unwritten until then
        items = [self._queue.popleft() for _ in range(n)]
        self._taken += sum(weight for _, _, weight in items)
        return [(ex, cap) for ex, cap, _ in items]

    def open(self) -> None:
        """Open and migrate the file, and prune once (blocking: call it in a thread)."""
        self._conn = open_writer(self.path)
        self._file = _identity(self.path)
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
                # Queued, and the batch being written (a stuck disk holds it too).
                unwritten = len(self._queue) + self._writing
                log.warning("recorder_stop_timeout", unwritten=unwritten)

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
            if stopping and not self._queue:
                break
        assert self._conn is not None
        self._conn.close()

    def _until_due(self) -> float:
        """Seconds until the next prune, or the measurement a throttled write left due; none
        while records wait (a failed round can leave some, and no new one would wake it)."""
        if self._queue:
            return 0.0
        due = self._next_prune
        if self._unmeasured:
            due = min(due, self._next_measure)
        return max(0.0, due - time.monotonic())

    def _round(self) -> None:
        """Write everything queued, then prune or measure."""
        wrote = False
        while self._queue:
            self._write(self._take(min(BATCH, len(self._queue))))
            self._writing = 0
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

    def _write(self, batch: list[tuple[Exchange, Capture]]) -> None:
        rows = []
        for ex, cap in batch:
            try:
                rows.append(to_row(ex, cap, self.mode))
            except Exception:
                self.metrics.write_errors.inc()
                log.exception("record_build_failed", id=ex.id)
        self._insert(rows)

    def _insert(self, rows: list[dict[str, Any]]) -> None:
        conn = self._conn
        assert conn is not None
        try:
            conn.execute("BEGIN")
            conn.executemany(_INSERT, map(_VALUES, rows))
            conn.execute("COMMIT")
        except Exception as exc:
            # sqlite3's errors, and a value it cannot bind (an integer past 64 bits, a lone
            # surrogate): either way the transaction must end here, or it would hold the
            # write lock, and the other rows must not share the bad one's fate.
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            if len(rows) > 1 and not isinstance(exc, sqlite3.OperationalError):
                # Retry one by one so one bad record does not cost the whole batch. Not for
                # the file's own failures (locked, full, I/O): every row would wait and fail
                # alike, one busy timeout each.
                for row in rows:
                    self._insert([row])
            elif rows:
                self.metrics.write_errors.inc(len(rows))
                log.error(
                    "record_write_failed",
                    ids=[row["id"] for row in rows[:10]],
                    records=len(rows),
                    error=str(exc),
                )

    def _reopen(self) -> None:
        """The file was deleted or replaced under the running proxy: SQLite would go on
        writing to the unlinked one without a word, and the records would vanish with it.
        A new file is made (and said so); what went into the old one since the last
        check (at most about MEASURE_EVERY seconds of records) is lost with it."""
        log.error("recorder_file_replaced", path=str(self.path))
        self.metrics.write_errors.inc()
        conn = open_writer(self.path)  # if this fails, the old connection stays, retried later
        assert self._conn is not None
        self._conn.close()
        self._conn = conn
        self._file = _identity(self.path)

    def _prune(self) -> None:
        assert self._conn is not None
        try:
            deleted = prune(self._conn, self.retention, time.time())
        except sqlite3.Error as exc:
            log.error("retention_failed", error=str(exc))
        else:
            if deleted:
                log.info("records_pruned", deleted=deleted)
        self._measure()

    def _measure(self) -> None:
        if _identity(self.path) != self._file:
            self._reopen()
        size = 0
        for suffix in ("", "-wal"):
            with contextlib.suppress(FileNotFoundError):
                size += os.stat(f"{self.path}{suffix}").st_size
        self.metrics.db_size.set(size)


def _identity(path: Path) -> tuple[int, int] | None:
    """The file at `path` (device, inode), or None when there is none."""
    try:
        info = os.stat(path)
    except FileNotFoundError:
        return None
    return info.st_dev, info.st_ino


def _weight(ex: Exchange, cap: Capture) -> int:
    """Bytes an exchange holds until written: its teed body, the text of its timeline, and
    for a single JSON reply kept parsed on `ex.final`, about its wire size (O(1): no
    walking of parsed objects)."""
    body = len(ex.request_body) if ex.request_body is not None else 0
    text = len(cap.timeline.text) if cap.timeline is not None else 0
    return body + text + (ex.response_bytes if ex.final is not None and not ex.streamed else 0)
