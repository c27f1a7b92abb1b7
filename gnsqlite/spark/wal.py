"""WAL segment files: Arrow IPC files under ``walLocation``, through ``pyarrow.fs``.

A segment is written to ``<number>-<rows>.arrow.tmp`` and renamed to
``<number>-<rows>.arrow`` once durable, so a listing shows only complete
segments and their row counts without opening them:

* local paths (``/data/wal``, ``file:///data/wal``): the file is flushed and
  ``os.fsync``-ed, renamed, and the directory is ``fsync``-ed too, before
  :meth:`WalStore.write` returns;
* any other filesystem ``pyarrow.fs`` opens (``hdfs://``, ``s3://``, ``gs://``
  ...): closing the output stream is the durability point (HDFS acknowledges
  the close once the block pipeline has it; S3 once the object is stored),
  then the file is moved to its final name (a server-side copy on S3).

Every storage failure (permission denied, disk full, a path under a file,
an unreachable store) raises :class:`WalStorageError` naming the path.
"""

from __future__ import annotations

import os
import re
import uuid
from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs

from ..errors import NSQError
from .arrow_rows import ROW_SCHEMA
from .segments import Segment, Slice

__all__ = ["ROW_SCHEMA", "WalStorageError", "WalStore", "open_filesystem"]

_NAME = re.compile(r"^(\d{12})-(\d+)\.arrow$")


class WalStorageError(NSQError, OSError):
    """The WAL's storage failed (permission, space, path, network); the message names the path."""


def open_filesystem(location: str) -> tuple[pafs.FileSystem, str]:
    """The ``pyarrow.fs`` filesystem and path of ``location`` (a local path or a URI)."""
    if "://" not in location:
        return pafs.LocalFileSystem(), os.path.abspath(location)
    try:
        fs, path = pafs.FileSystem.from_uri(location)
    except (pa.ArrowException, OSError, ValueError) as exc:
        raise WalStorageError(f"walLocation {location!r}: {exc}") from exc
    return fs, path


def segment_name(number: int, rows: int) -> str:
    """The file name of segment ``number`` holding ``rows`` rows."""
    return f"{number:012d}-{rows}.arrow"


class WalStore:
    """The segment files under one ``location``; opens nothing until called.

    Every method blocks on the storage; the source calls :meth:`write`
    from a worker thread so its hub keeps receiving meanwhile.
    """

    def __init__(self, location: str, filesystem: pafs.FileSystem | None = None) -> None:
        self.location = location
        if filesystem is None:
            self.fs, self.path = open_filesystem(location)
        else:
            self.fs, self.path = filesystem, location
        self.local = isinstance(self.fs, pafs.LocalFileSystem)

    def __repr__(self) -> str:
        return f"<WalStore {self.location}>"

    def _file(self, name: str) -> str:
        return f"{self.path.rstrip('/')}/{name}"

    def _fail(self, what: str, path: str, exc: BaseException) -> WalStorageError:
        return WalStorageError(f"WAL {what} failed at {path}: {exc}")

    def prepare(self) -> list[Segment]:
        """Create the directory, delete unfinished ``.tmp`` files, list the segments."""
        try:
            self.fs.create_dir(self.path, recursive=True)
            infos = self.fs.get_file_info(pafs.FileSelector(self.path, recursive=False))
        except (pa.ArrowException, OSError) as exc:
            raise self._fail("listing", self.path, exc) from exc
        segments = []
        for info in infos:
            if info.base_name.endswith(".arrow.tmp"):
                try:  # never renamed: never durable, its messages were never finished
                    self.fs.delete_file(info.path)
                except (pa.ArrowException, OSError) as exc:
                    raise self._fail("cleanup", info.path, exc) from exc
                continue
            match = _NAME.match(info.base_name)
            if match:
                segments.append(
                    Segment(int(match[1]), info.base_name, int(match[2]), int(info.size or 0))
                )
        return sorted(segments, key=lambda s: s.number)

    def write(self, number: int, batch: pa.RecordBatch) -> Segment:
        """Write ``batch`` as segment ``number``; returns once it is durable (see module doc)."""
        data = _ipc_file(batch)
        name = segment_name(number, batch.num_rows)
        final = self._file(name)
        tmp = final + ".tmp"
        try:
            if self.local:
                self._write_local(tmp, final, data)
            else:
                with self.fs.open_output_stream(tmp) as out:
                    out.write(data)
                self.fs.move(tmp, final)
        except (pa.ArrowException, OSError) as exc:
            raise self._fail("write", tmp, exc) from exc
        return Segment(number, name, batch.num_rows, data.size)

    def write_first(self, name: str, batch: pa.RecordBatch) -> bool:
        """Write ``batch`` as file ``name`` unless it exists; ``True`` if this call created it.

        Returns once the file is durable (see the module doc). Of two calls
        racing for one name, one wins and the other returns ``False``,
        leaving the winner's file as it is: on a local filesystem by a hard
        link, which fails if the name exists; elsewhere by checking before
        the move, so two writers on an object store (S3) racing within that
        window may both see ``True`` (the second file replaces the first).
        """
        data = _ipc_file(batch)
        final = self._file(name)
        tmp = f"{final}.{uuid.uuid4().hex[:12]}.tmp"
        try:
            self.fs.create_dir(self.path, recursive=True)
            if self.local:
                return self._write_local(tmp, final, data, exclusive=True)
            if self.exists(name):
                return False
            with self.fs.open_output_stream(tmp) as out:
                out.write(data)
            if self.exists(name):
                self.fs.delete_file(tmp)
                return False
            self.fs.move(tmp, final)
            return True
        except (pa.ArrowException, OSError) as exc:
            raise self._fail("write", tmp, exc) from exc

    def exists(self, name: str) -> bool:
        """True if file ``name`` exists under the location (blocks on the storage)."""
        path = self._file(name)
        try:
            info = self.fs.get_file_info(path)
        except (pa.ArrowException, OSError) as exc:
            raise self._fail("stat", path, exc) from exc
        return bool(info.type != pafs.FileType.NotFound)

    def listing(self, prefix: str) -> list[pafs.FileInfo]:
        """The files under the location whose names start with ``prefix`` (none: no directory)."""
        try:
            infos = self.fs.get_file_info(pafs.FileSelector(self.path, allow_not_found=True))
        except (pa.ArrowException, OSError) as exc:
            raise self._fail("listing", self.path, exc) from exc
        return [
            i for i in infos if i.base_name.startswith(prefix) and not i.base_name.endswith(".tmp")
        ]

    def delete_names(self, names: Sequence[str]) -> None:
        """Delete the files ``names``; a missing one is skipped; raises :class:`WalStorageError`."""
        for name in names:
            path = self._file(name)
            try:
                self.fs.delete_file(path)
            except FileNotFoundError:
                continue
            except (pa.ArrowException, OSError) as exc:
                raise self._fail("delete", path, exc) from exc

    def _write_local(self, tmp: str, final: str, data: pa.Buffer, exclusive: bool = False) -> bool:
        with open(tmp, "wb") as f:
            f.write(memoryview(data))
            f.flush()
            os.fsync(f.fileno())
        won = True
        if exclusive:
            try:
                os.link(tmp, final)
            except FileExistsError:
                won = False
            os.unlink(tmp)
        else:
            os.replace(tmp, final)
        fd = os.open(os.path.dirname(final), os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        return won

    def delete(self, segments: Sequence[Segment]) -> None:
        """Delete ``segments`` (committed by Spark); raises :class:`WalStorageError`."""
        self.delete_names([segment.name for segment in segments])

    def read(self, piece: Slice) -> Iterator[pa.RecordBatch]:
        """The record batches of ``piece`` (rows ``lo`` to ``hi`` of one segment file)."""
        table = self._table(piece.name)
        yield from table.slice(piece.lo, piece.rows).to_batches()

    def read_file(self, name: str) -> pa.Table:
        """Every row of file ``name`` (blocks on the storage)."""
        return self._table(name)

    def _table(self, name: str) -> pa.Table:
        path = self._file(name)
        try:
            with self.fs.open_input_file(path) as source:
                return pa.ipc.open_file(source).read_all()
        except (pa.ArrowException, OSError) as exc:
            raise self._fail("read", path, exc) from exc

    def read_ids(self, segment: Segment) -> list[str]:
        """The message ids in ``segment``."""
        ids: list[Any] = self._table(segment.name).column("id").to_pylist()
        return [str(i) for i in ids]


def _ipc_file(batch: pa.RecordBatch) -> pa.Buffer:
    """``batch`` as the bytes of an Arrow IPC file."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_file(sink, batch.schema) as writer:
        writer.write_batch(batch)
    return sink.getvalue()
