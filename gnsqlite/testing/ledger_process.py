"""A :class:`~gnsqlite.testing.faults.DeliveryLedger` in a child process, fed over a pipe.

A soak that holds its books in its own process measures them as its own
memory: a minute of numbers at 1,000 msg/s is tens of MiB of dicts, sets
and records, and the tables grow in steps whenever the books are folded
late (a busy machine), which the process's RSS keeps as a high-water
mark. :class:`LedgerProcess` keeps the books in ``python -m
gnsqlite.testing.ledger_process`` instead, so the measuring process's RSS
and traced memory are the client's (and the run's own loop).

It records with the methods a :class:`DeliveryLedger` records with
(:meth:`~LedgerProcess.ack`, :meth:`~LedgerProcess.publish_failed`,
:meth:`~LedgerProcess.delivered`, :meth:`~LedgerProcess.handled`,
:meth:`~LedgerProcess.gave_up`, :meth:`~LedgerProcess.server_error`, the
``failures`` counter), so an :class:`~gnsqlite.testing.faults.AccountingHandler`
takes either. A record costs the caller an append to a list and never
blocks; a greenlet sends the list to the child every ``flush_interval``
seconds (0.1 by default) as one JSON line. A question
(:meth:`~LedgerProcess.lost`, :meth:`~LedgerProcess.duplicates`,
:meth:`~LedgerProcess.summary` ...) first sends what is pending, then
blocks the calling greenlet for the round trip.

A handling's connection crosses as a number: the parent keeps each
connection it has seen until it has ended, and tells the child, at the next
flush, which ones ended with an error, which is what
:func:`~gnsqlite.testing.faults.DeliveryLedger.duplicates` asks of a
connection (``connection.error``) when it explains a duplicate.

Constructing starts nothing; :meth:`~LedgerProcess.start` starts the child
and the flushing greenlet, :meth:`~LedgerProcess.close` ends both.
"""

from __future__ import annotations

import json
import subprocess
import sys
from typing import IO, Any

import gevent
import gevent.lock
import gevent.subprocess

from .faults import DeliveryLedger, Handling, rss_bytes

__all__ = ["LedgerProcess", "serve"]


class LedgerProcess:
    """The books of a fault run, kept by a child process (see the module doc).

    ``transit`` is :attr:`DeliveryLedger.transit` (seconds).
    """

    def __init__(
        self, transit: float = 0.0, flush_interval: float = 0.1, start_timeout: float = 15.0
    ) -> None:
        self.transit = transit
        self.flush_interval = flush_interval
        self.start_timeout = start_timeout
        #: Handler runs that raised (the :class:`AccountingHandler` counts here).
        self.failures = 0
        self.unacked = 0
        self._pending: list[list[Any]] = []
        self._proc: subprocess.Popen[bytes] | None = None
        self._flusher: gevent.Greenlet[[], None] | None = None
        self._turn = gevent.lock.Semaphore()  # one line, or one question and its answer
        #: id(connection) -> (number, connection): held until the connection ends.
        self._connections: dict[int, tuple[int, Any]] = {}
        self._next_connection = 0
        self._sent_failures = 0

    # -- recording: never blocks ------------------------------------------------

    def ack(self, number: int) -> None:
        """nsqd acknowledged the publish of ``number``."""
        self._pending.append(["a", number])

    def publish_failed(self, number: int) -> None:
        """The publish of ``number`` raised: nsqd may or may not have stored it."""
        self.unacked += 1
        self._pending.append(["p", number])

    def delivered(self, number: int, attempts: int) -> None:
        """A handler started on ``number``, delivered for the ``attempts``-th time."""
        self._pending.append(["d", number, attempts])

    def gave_up(self, message: Any) -> None:
        """A consumer's ``on_giving_up`` hook (see :meth:`DeliveryLedger.gave_up`)."""
        self._pending.append(["g", int(message.body), message.attempts])

    def server_error(self, conn: object, error: Exception) -> None:
        """A consumer's non-fatal server error (see :meth:`DeliveryLedger.server_error`)."""
        words = str(error).split()
        if len(words) >= 3 and words[0] == "E_FIN_FAILED":
            self._pending.append(["f", words[2]])

    def handled(self, number: int, handling: Handling) -> None:
        """A handler completed on ``number``."""
        self._pending.append(
            [
                "h",
                number,
                handling.message_id,
                self._connection_number(handling.connection),
                handling.outlived,
                handling.fin_sent,
                handling.spare,
            ]
        )

    # -- questions: block the calling greenlet for a round trip ------------------

    @property
    def acked_count(self) -> int:
        """Acknowledged publishes, settled ones included."""
        return int(self._ask("acked_count"))

    @property
    def handled_count(self) -> int:
        """Completed handler runs, duplicates and settled ones included."""
        return int(self._ask("handled_count"))

    def lost(self) -> list[int]:
        """Acknowledged numbers neither handled nor given up (see :meth:`DeliveryLedger.lost`)."""
        return [int(n) for n in self._ask("lost")]

    def explain_lost(self, limit: int = 10) -> str:
        """See :meth:`DeliveryLedger.explain_lost`."""
        return str(self._ask("explain_lost", limit))

    def duplicates(self) -> dict[str, int]:
        """Every handling beyond the first, by cause (see :meth:`DeliveryLedger.duplicates`)."""
        return {str(k): int(v) for k, v in self._ask("duplicates").items()}

    def summary(self) -> str:
        """One line: acknowledged, handled, lost, duplicates by cause."""
        return str(self._ask("summary"))

    def settle(self, below: int) -> None:
        """Fold the numbers below ``below`` into counts (see :meth:`DeliveryLedger.settle`)."""
        self._ask("settle", below)

    def books(self) -> dict[str, int]:
        """The size of each of the child's books, and the connections its handlings name."""
        return {str(k): int(v) for k, v in self._ask("books").items()}

    def rss_bytes(self) -> int:
        """The child's resident set size in bytes (0 where ``/proc`` is missing)."""
        return int(self._ask("rss"))

    # -- life --------------------------------------------------------------------

    @property
    def pid(self) -> int | None:
        """The child's process id (``None`` before :meth:`start`)."""
        return None if self._proc is None else int(self._proc.pid)

    def start(self) -> LedgerProcess:
        """Start the child and the flushing greenlet; blocks until the child answers."""
        self._proc = gevent.subprocess.Popen(
            [sys.executable, "-m", __name__, repr(float(self.transit))],
            stdin=gevent.subprocess.PIPE,
            stdout=gevent.subprocess.PIPE,
        )
        with gevent.Timeout(self.start_timeout, TimeoutError("ledger process did not start")):
            self._ask("rss")
        self._flusher = gevent.spawn(self._flush_every)
        return self

    def close(self) -> None:
        """Stop flushing and end the child (what was not asked for is dropped with it)."""
        flusher, self._flusher = self._flusher, None
        if flusher is not None:
            flusher.kill()
        proc, self._proc = self._proc, None
        if proc is None:
            return
        try:
            assert proc.stdin is not None
            proc.stdin.close()  # end of input: the child exits
            proc.wait(timeout=10.0)
        except (OSError, gevent.subprocess.TimeoutExpired):
            proc.kill()
            proc.wait()
        self._connections.clear()

    def __enter__(self) -> LedgerProcess:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- the pipe ----------------------------------------------------------------

    def _connection_number(self, connection: Any) -> int | None:
        if connection is None:
            return None
        known = self._connections.get(id(connection))
        if known is not None and known[1] is connection:
            return known[0]
        self._next_connection += 1
        self._connections[id(connection)] = (self._next_connection, connection)
        return self._next_connection

    def _ended_connections(self) -> list[list[Any]]:
        """Forget the connections that ended; the records of those that ended with an error."""
        records = []
        for key, (number, connection) in list(self._connections.items()):
            if getattr(connection, "error", None) is not None:
                records.append(["e", number])
            if getattr(connection, "closed", False):
                del self._connections[key]
        return records

    def _take_pending(self) -> list[list[Any]]:
        records, self._pending = self._pending, []
        records += self._ended_connections()
        if self.failures != self._sent_failures:
            self._sent_failures = self.failures
            records.append(["x", self.failures])
        return records

    def _flush_every(self) -> None:
        while True:
            gevent.sleep(self.flush_interval)
            with self._turn:
                records = self._take_pending()
                if records:
                    self._write({"records": records})

    def _write(self, line: dict[str, Any]) -> None:
        if self._proc is None or self._proc.stdin is None:
            raise RuntimeError("the ledger process is not running: call start() first")
        self._proc.stdin.write(json.dumps(line, separators=(",", ":")).encode() + b"\n")
        self._proc.stdin.flush()

    def _ask(self, question: str, *args: Any) -> Any:
        with self._turn:
            self._write({"records": self._take_pending(), "ask": question, "args": list(args)})
            assert self._proc is not None and self._proc.stdout is not None
            answer = self._proc.stdout.readline()
        if not answer:
            raise RuntimeError("the ledger process exited")
        reply = json.loads(answer)
        if "error" in reply:
            raise RuntimeError(f"the ledger process answered {reply['error']!r} to {question!r}")
        return reply["answer"]


class _Connection:
    """The child's stand-in for a client connection: all the books ask of it is ``error``."""

    __slots__ = ("error",)

    def __init__(self) -> None:
        self.error: bool | None = None


def _apply(ledger: DeliveryLedger, connections: dict[int, _Connection], record: list[Any]) -> None:
    kind = record[0]
    if kind == "a":
        ledger.ack(record[1])
    elif kind == "d":
        ledger.delivered(record[1], record[2])
    elif kind == "h":
        _, number, message_id, conn, outlived, fin_sent, spare = record
        stand_in = None if conn is None else connections.setdefault(conn, _Connection())
        ledger.handled(number, Handling(message_id, stand_in, outlived, fin_sent, spare))
    elif kind == "e":
        connections.setdefault(record[1], _Connection()).error = True
    elif kind == "f":
        ledger.fin_failed.add(record[1])
    elif kind == "g":
        ledger.given_up[record[1]] = record[2]
    elif kind == "p":
        ledger.publish_failed(record[1])
    elif kind == "x":
        ledger.failures = record[1]
    else:
        raise ValueError(f"unknown record {record!r}")


def _answer(ledger: DeliveryLedger, question: str, args: list[Any]) -> Any:
    if question == "acked_count":
        return ledger.acked_count
    if question == "handled_count":
        return ledger.handled_count
    if question == "lost":
        return ledger.lost()
    if question == "explain_lost":
        return ledger.explain_lost(*args)
    if question == "duplicates":
        return ledger.duplicates()
    if question == "summary":
        return ledger.summary()
    if question == "settle":
        ledger.settle(*args)
        return None
    if question == "books":
        held = {id(h.connection) for runs in ledger.handlings.values() for h in runs}
        return {
            "handlings": len(ledger.handlings),
            "deliveries": len(ledger.deliveries),
            "acked": len(ledger.acked),
            "fin_failed": len(ledger.fin_failed),
            "given_up": len(ledger.given_up),
            "connections": len(held),
        }
    if question == "rss":
        return rss_bytes()
    raise ValueError(f"unknown question {question!r}")


def serve(ledger: DeliveryLedger, lines: IO[str], answers: IO[str]) -> None:
    """Apply each line's records to ``ledger`` and answer its question, until EOF."""
    connections: dict[int, _Connection] = {}
    for line in lines:
        request = json.loads(line)
        for record in request.get("records", ()):
            _apply(ledger, connections, record)
        question = request.get("ask")
        if question is None:
            continue
        try:
            reply = {"answer": _answer(ledger, question, request.get("args", []))}
        except Exception as exc:  # said to the parent, which raises it
            reply = {"error": f"{type(exc).__name__}: {exc}"}
        answers.write(json.dumps(reply) + "\n")
        answers.flush()


def main(argv: list[str] | None = None) -> int:
    """``python -m gnsqlite.testing.ledger_process TRANSIT``: serve stdin until EOF."""
    args = sys.argv[1:] if argv is None else argv
    transit = float(args[0]) if args else 0.0
    serve(DeliveryLedger(transit=transit), sys.stdin, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
