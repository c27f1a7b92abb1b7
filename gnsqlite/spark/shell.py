"""The one shell of the streaming source's modes: pickling, start, stop, Spark's API, the hub hop.

Spark calls a source from its own thread, in the Python process it starts on
the driver for the query's source; the source's client runs in a
:class:`~gnsqlite.spark._hub.HubThread` there. :class:`SourceShell` does that
once for every mode: it starts the hub at Spark's first call (in the process
that holds the reader; a pickled copy starts its own), logs the mode's one
WARNING, hops each of Spark's calls into the hub, stops on Spark's ``stop``
(shielded from SIGTERM, :mod:`gnsqlite.spark._shutdown`), and pickles only the
options (and what a mode names in :attr:`SourceShell._pickled`). A mode says
where rows go and how a batch is planned and committed, by filling the
hooks: ``_start``/``_stop`` and ``_initial``/``_latest``/``_partitions``/
``_commit``/``_report_latest`` (run in the hub), and ``_read`` (on an executor).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition

from ..errors import NSQConnectionError
from ._hub import HubThread
from ._shutdown import started, stopping
from .consuming import ReadMaxRows, SupportsTriggerAvailableNow, read_limit, stop_in_hub
from .options import SourceOptions

if TYPE_CHECKING:
    from .wal import WalStore

__all__ = ["SourceShell"]

log = logging.getLogger(__name__)


class SourceShell(SupportsTriggerAvailableNow, DataSourceStreamReader):
    """A streaming source's shell; a mode subclasses it and fills the hooks. Spark calls it.

    The constructor starts nothing: the hub thread starts at Spark's first
    call. Class attributes a mode sets: ``partition_type`` (what
    :meth:`read` accepts), ``hub_name`` (the thread's name, the topic
    appended), ``warning`` (logged once at start with the topic, channel
    and WAL location), ``stop_grace`` (seconds :meth:`stop` waits beyond
    ``stopTimeout``).
    """

    partition_type: ClassVar[type[InputPartition]] = InputPartition
    hub_name: ClassVar[str] = "gnsqlite-source"
    warning: ClassVar[str] = ""
    stop_grace: ClassVar[float] = 10.0
    #: Attributes pickled with the options (a mode's identity across processes).
    _pickled: ClassVar[tuple[str, ...]] = ()

    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        self._store: WalStore | None = None
        self._hub: HubThread | None = None
        self._pid = 0
        self._stopped = False

    def __getstate__(self) -> dict[str, Any]:
        return {"options": self.options, **{name: getattr(self, name) for name in self._pickled}}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["options"])  # type: ignore[misc]
        for name in self._pickled:
            setattr(self, name, state[name])

    def __repr__(self) -> str:
        o = self.options
        wal = f" wal={o.wal_location}" if o.wal_location else ""
        return f"<{type(self).__name__} {o.topic}/{o.channel}{wal}>"

    @property
    def store(self) -> WalStore:
        """The WAL's storage, opened lazily (a mode with ``walLocation`` only)."""
        if self._store is None:
            if self.options.wal_location is None:
                raise ValueError(f"{self!r} has no walLocation")
            from .wal import WalStore  # not imported by the source without a WAL

            self._store = WalStore(self.options.wal_location)
        return self._store

    # -- lifecycle (Spark's thread) -------------------------------------------

    def _ensure_started(self, *offsets: Mapping[str, Any] | None) -> HubThread:
        """The running hub; starts it (and the mode, :meth:`_start`) in a new process."""
        if self._stopped:
            raise NSQConnectionError(
                f"{self.options.topic}/{self.options.channel}", "the nsq source was stopped"
            )
        if self._hub is not None and self._pid == os.getpid():
            return self._hub
        self._pid = os.getpid()
        self._prepare(offsets)
        hub = HubThread(f"{self.hub_name}-{self.options.topic}")
        hub.start()
        self._hub = hub
        started(self)  # and SIGTERM handled: see _shutdown
        if self.warning:
            o = self.options
            args = (o.topic, o.channel, o.wal_location)[: self.warning.count("%s")]
            log.warning(self.warning, *args)
        hub.call(self._start)
        return hub

    def stop(self) -> None:
        """Spark ends the query: the mode's :meth:`_stop` in the hub, then the hub ends.

        Blocks (at most ``stopTimeout`` + :attr:`stop_grace` s); a SIGTERM
        arriving meanwhile raises ``SystemExit`` only once that is done.
        """
        self._stopped = True
        with stopping(self) as mine:
            if mine:
                hub, self._hub = self._hub, None
                stop_in_hub(self, hub, self._stop, self.options.stop_timeout + self.stop_grace)

    # -- a mode's hooks ------------------------------------------------------------

    def _prepare(self, offsets: Sequence[Mapping[str, Any] | None]) -> None:
        """Before the hub starts (Spark's thread), with the offsets of Spark's first call."""

    def _start(self) -> None:
        """In the hub, once: start consuming (or planning)."""

    def _stop(self) -> None:
        """In the hub, once: give back what is held, close."""

    def _initial(self) -> dict[str, Any]:
        raise NotImplementedError

    def _latest(
        self, start: Mapping[str, Any] | None, max_rows: int | None, min_rows: int | None
    ) -> dict[str, Any]:
        raise NotImplementedError

    def _partitions(
        self, start: Mapping[str, Any], end: Mapping[str, Any]
    ) -> Sequence[InputPartition]:
        raise NotImplementedError

    def _commit(self, end: Mapping[str, Any]) -> int:
        raise NotImplementedError

    def _report_latest(self) -> dict[str, Any] | None:
        return None

    def _read(self, partition: Any) -> Iterator[pa.RecordBatch]:
        raise NotImplementedError

    # -- Spark's API (Spark's thread) ----------------------------------------------

    def initialOffset(self) -> dict[str, Any]:
        """The offset a new query starts from (the mode's :meth:`_initial`)."""
        return self._ensure_started().call(self._initial)

    def getDefaultReadLimit(self) -> Any:
        """``maxMessagesPerBatch`` as Spark's read limit."""
        if ReadMaxRows is None:  # pragma: no cover - PySpark 4.0/4.1
            return None
        return ReadMaxRows(self.options.max_messages_per_batch)

    def latestOffset(
        self, start: dict[str, Any] | None = None, limit: Any = None
    ) -> dict[str, Any]:
        """The end of the next batch within ``limit`` (``start``: nothing new); blocks briefly."""
        hub = self._ensure_started(start)
        max_rows, min_rows = read_limit(limit, self.options.max_messages_per_batch)
        return hub.call(self._latest, start, max_rows, min_rows)

    def reportLatestOffset(self) -> dict[str, Any] | None:
        """What the source holds now, for Spark's progress (the mode's); does not start it."""
        hub = self._hub
        if hub is None or not hub.running or self._pid != os.getpid():
            return None
        return hub.call(self._report_latest)

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        """The batch from ``start`` to ``end`` as Spark partitions (the mode's)."""
        hub = self._ensure_started(start, end)
        return hub.call(self._partitions, start, end)

    def commit(self, end: dict[str, Any]) -> None:
        """Spark committed every batch up to ``end`` (the mode FINishes or deletes)."""
        hub = self._ensure_started(end)
        done = hub.call(self._commit, end)
        if done:
            log.debug("%r: committed %s (%d)", self, end, done)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """The rows of ``partition`` as Arrow record batches (runs on an executor)."""
        if not isinstance(partition, self.partition_type):
            raise TypeError(
                f"the nsq source cannot read {partition!r}: not an {self.partition_type.__name__}"
            )
        return self._read(partition)
