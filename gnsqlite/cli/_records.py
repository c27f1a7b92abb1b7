"""Records of a file or a pipe, as they arrive: what ``gnsqlite pub`` reads.

:class:`RecordSplitter` is pure: it cuts bytes into the records between a
delimiter, whatever sizes the bytes come in. :class:`RecordReader` reads a
file descriptor with it, returning what is there as soon as it is there
(``tail -f app.log | gnsqlite pub ...`` publishes line by line), and its
waits end on a timeout (to send a partial batch) or on a stop event (Ctrl-C).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from typing import IO

import gevent
import gevent.event

__all__ = ["CHUNK", "RecordReader", "RecordSplitter", "read_records"]

#: Bytes asked for in one read; a read returns what is there, up to this.
CHUNK = 64 * 1024


class RecordSplitter:
    """Cuts bytes fed in any sizes into non-empty records (empty ones are skipped)."""

    def __init__(self, delimiter: bytes) -> None:
        if not delimiter:
            raise ValueError("the delimiter cannot be empty")
        self.delimiter = delimiter
        #: Bytes after the last delimiter: a record not finished yet.
        self.rest = b""

    def feed(self, data: bytes) -> list[bytes]:
        """The records that ``data`` completes, in order."""
        parts = (self.rest + data).split(self.delimiter)
        self.rest = parts.pop()
        return [p for p in parts if p]

    def end(self) -> list[bytes]:
        """At the end of the input: the unfinished record, which is the last one."""
        rest, self.rest = self.rest, b""
        return [rest] if rest else []


def read_records(stream: IO[bytes], delimiter: bytes) -> Iterator[bytes]:
    """The non-empty records of ``stream`` split on ``delimiter``; blocks on each read."""
    splitter = RecordSplitter(delimiter)
    while chunk := stream.read(CHUNK):
        yield from splitter.feed(chunk)
    yield from splitter.end()


class RecordReader:
    """Reads the records of file descriptor ``fd`` as they arrive (a file, pipe or terminal).

    It does not own ``fd`` (closing it is the caller's job) and changes none
    of its flags: it waits in the hub until ``fd`` is readable, then reads what
    is there. A regular file is always readable.
    """

    def __init__(self, fd: int, delimiter: bytes) -> None:
        self.fd = fd
        self.splitter = RecordSplitter(delimiter)
        #: True once the input ended (the records returned include the unfinished one).
        self.eof = False
        #: Bytes read so far (delimiters included).
        self.bytes_read = 0
        self._regular = stat.S_ISREG(os.fstat(fd).st_mode)

    @property
    def unfinished(self) -> bytes:
        """Bytes read after the last delimiter (a record still being written)."""
        return self.splitter.rest

    def read(self, stop: gevent.event.Event, timeout: float | None) -> list[bytes] | None:
        """The records completed by the next read; blocks the calling greenlet.

        Waits up to ``timeout`` seconds (``None``: no limit) for input and
        returns ``None`` when none came or ``stop`` was set meanwhile. At the
        end of the input it sets :attr:`eof` and returns the last records
        (maybe none). Raises ``OSError`` when the read fails.
        """
        if self.eof or not self._wait_readable(stop, timeout):
            return None
        chunk = os.read(self.fd, CHUNK)
        self.bytes_read += len(chunk)
        if not chunk:
            self.eof = True
            return self.splitter.end()
        return self.splitter.feed(chunk)

    def _wait_readable(self, stop: gevent.event.Event, timeout: float | None) -> bool:
        if self._regular:  # always readable: yield once, so a Ctrl-C is seen on a big file
            gevent.sleep(0)
            return not stop.is_set()
        readable = gevent.event.Event()
        watcher = gevent.get_hub().loop.io(self.fd, 1)  # 1: READ
        watcher.start(readable.set)
        try:
            gevent.wait([readable, stop], timeout=timeout, count=1)
        finally:
            watcher.close()
        return readable.is_set() and not stop.is_set()
