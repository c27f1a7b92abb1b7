"""Where a long run's memory goes: live objects by type, traced allocations by owner.

* :func:`count_objects` counts the live objects of gnsqlite's classes (and
  live greenlets) after a full collection: a leak test asserts that 1,000
  reconnects leave no more of them than 10 do.
* :func:`rss_by_mapping` and :func:`mapping_growth` put RSS growth down
  to the process's mappings (the allocator's heap and arenas, a library's
  pages);
* :func:`malloc_info` says what glibc's malloc holds: handed out (memory
  allocated in C too, beneath :mod:`tracemalloc`) or freed and kept (the
  allocator's fragmentation), which RSS alone cannot tell apart;
* :class:`MemoryWatch` samples the process's RSS and the memory
  :mod:`tracemalloc` traces, and compares a snapshot taken at a mark (the
  end of a warm-up) with one taken later, by allocating traceback. Each
  growth is put down to an *owner* by its traceback: ``books`` when a frame
  of ``gnsqlite.testing`` or of a benchmark script is in it (the run keeping
  accounts, and what the library allocates for them: a message id a ledger
  keeps), else ``client`` when a frame of the library is, else ``other``
  (the interpreter, gevent's hub). The printed tracebacks say more.

tracemalloc costs memory of its own (:attr:`Sample.overhead`, in RSS but
not in the traced figure) and time on every allocation; ``frames`` bounds
both. Nothing here starts a greenlet or a thread.
"""

from __future__ import annotations

import collections
import ctypes
import ctypes.util
import functools
import gc
import linecache
import os
import tempfile
import tracemalloc
from dataclasses import dataclass
from typing import Any

from .faults import live_greenlets, rss_bytes

__all__ = [
    "Growth",
    "Mapping",
    "MemoryWatch",
    "Sample",
    "count_objects",
    "mapping_growth",
    "owner_of",
    "rss_by_mapping",
    "MallocInfo",
    "malloc_info",
    "trim_malloc",
]

#: File name parts whose allocations are the accounts of a run, not the client's.
BOOKS = ("/gnsqlite/testing/", "/benchmarks/")
CLIENT = "/gnsqlite/"
MiB = 1024 * 1024


def count_objects(
    prefix: str = "gnsqlite.", exclude: tuple[str, ...] = ("gnsqlite.testing.",)
) -> collections.Counter[str]:
    """Live objects by ``module.Class`` for classes under ``prefix``, plus ``"greenlet"``.

    Classes under ``exclude`` (by default this package's testing tools, the
    measuring run's own records) are not counted. Collects garbage first
    (so only reachable objects count); blocks for a few milliseconds per
    hundred thousand live objects.
    """
    gc.collect()
    counts: collections.Counter[str] = collections.Counter()
    for obj in gc.get_objects():
        cls = type(obj)
        module = cls.__module__
        if isinstance(module, str) and module.startswith(prefix) and not module.startswith(exclude):
            counts[f"{module}.{cls.__qualname__}"] += 1
    counts["greenlet"] = len(live_greenlets())
    return counts


def trim_malloc() -> bool:
    """Ask glibc to return the free memory it holds to the system (``malloc_trim(0)``).

    RSS that falls after it was free memory the allocator kept, not live
    data. ``False`` where there is no glibc. Blocks for milliseconds.
    """
    trim = _libc("malloc_trim")
    if trim is None:
        return False
    trim(0)
    return True


@functools.cache
def _libc(function: str) -> Any:
    """glibc's ``function`` through ctypes, or ``None`` where there is none (looked up once)."""
    name = ctypes.util.find_library("c")  # runs ldconfig: once per process
    if name is None:
        return None
    try:
        return getattr(ctypes.CDLL(name), function)
    except (OSError, AttributeError):
        return None


class _Mallinfo2(ctypes.Structure):
    """glibc's ``struct mallinfo2`` (glibc 2.33 and later): every field a ``size_t``."""

    _fields_ = [
        (name, ctypes.c_size_t)
        for name in (
            "arena",  # bytes the main heap and arenas hold from the system
            "ordblks",
            "smblks",
            "hblks",
            "hblkhd",  # bytes in chunks mmap()ed on their own (large allocations)
            "usmblks",
            "fsmblks",
            "uordblks",  # bytes allocated and not freed
            "fordblks",  # bytes free in the heap and arenas, kept by malloc
            "keepcost",
        )
    ]


@dataclass(frozen=True)
class MallocInfo:
    """What glibc's malloc holds, in bytes (``mallinfo2()``).

    ``in_use`` growing while :mod:`tracemalloc`'s figure stays flat is memory
    allocated in C beneath Python's tracing; ``free`` growing is the
    allocator keeping freed chunks (fragmentation), which
    :func:`trim_malloc` may give back where they fill whole pages.
    """

    in_use: int  # allocated and not freed, in the heap and arenas and mmap()ed
    free: int  # freed chunks malloc keeps in its heap and arenas
    heap: int  # the heap and arenas' size, in use plus free


def malloc_info() -> MallocInfo | None:
    """glibc's malloc figures now; ``None`` without glibc 2.33 or later. Does not block."""
    call = _libc("mallinfo2")
    if call is None:
        return None
    call.restype = _Mallinfo2
    info = call()
    return MallocInfo(in_use=info.uordblks + info.hblkhd, free=info.fordblks, heap=info.arena)


def owner_of(traceback: tracemalloc.Traceback) -> str:
    """``"books"``, ``"client"`` or ``"other"``: who allocated (see the module docstring)."""
    names = [frame.filename.replace("\\", "/") for frame in traceback]
    if any(part in name for name in names for part in BOOKS):
        return "books"
    if any(CLIENT in name for name in names):
        return "client"
    return "other"


@dataclass(frozen=True)
class Mapping:
    """One memory mapping of the process: where, what, how large, how much is resident."""

    start: int  # its address
    name: str  # the file's path, ``[heap]``, ``[stack]``..., or ``""`` for anonymous memory
    size: int  # bytes mapped
    rss: int  # bytes resident

    def describe(self) -> str:
        """``[heap]``, a file's base name, or ``anonymous`` with the mapping's size."""
        if not self.name:
            return f"anonymous {self.size / MiB:.2f} MiB mapping"
        return os.path.basename(self.name) if self.name.startswith("/") else self.name


def rss_by_mapping(path: str = "/proc/self/smaps") -> dict[tuple[int, str], Mapping]:
    """The process's mappings by (address, name), from Linux ``/proc``; empty elsewhere.

    Reads ``smaps``: blocks for about a millisecond per hundred mappings.
    Growth of RSS between two readings can then be put down to mappings:
    ``[heap]`` and large anonymous ones are the allocator's (glibc's main
    heap, its per-thread arenas, Python's object arenas), a file's are its
    code and data touched so far.
    """
    out: dict[tuple[int, str], Mapping] = {}
    try:
        with open(path, encoding="ascii", errors="replace") as smaps:
            head: tuple[int, int, str] | None = None
            for line in smaps:
                first = line.split(None, 1)[0]
                if "-" in first and not first.endswith(":"):  # a mapping's header line
                    parts = line.split(None, 5)
                    low, high = (int(x, 16) for x in parts[0].split("-"))
                    head = (low, high - low, parts[5].strip() if len(parts) > 5 else "")
                elif first == "Rss:" and head is not None:
                    low, size, name = head
                    out[(low, name)] = Mapping(low, name, size, int(line.split()[1]) * 1024)
    except OSError:
        return {}
    return out


def mapping_growth(
    before: dict[tuple[int, str], Mapping],
    after: dict[tuple[int, str], Mapping],
    top: int = 8,
) -> list[str]:
    """The ``top`` mappings whose resident bytes grew most from ``before`` to ``after``.

    A mapping that is new counts from 0, one that is gone from ``after`` is
    summed into the last line (``gone``), with the net change.
    """
    grown = []
    for key, now in after.items():
        was = before.get(key)
        delta = now.rss - (was.rss if was is not None else 0)
        if delta:
            grown.append((delta, now, was is None))
    gone = sum(m.rss for key, m in before.items() if key not in after)
    net = sum(m.rss for m in after.values()) - sum(m.rss for m in before.values())
    lines = [
        f"  {delta / MiB:+.2f} MiB {m.describe()} at {m.start:#x}{' (new)' if new else ''}"
        f" now {m.rss / MiB:.2f} MiB"
        for delta, m, new in sorted(grown, key=lambda g: -g[0])[:top]
        if delta > 0
    ]
    lines.append(f"  mappings gone since: {gone / MiB:.2f} MiB; net {net / MiB:+.2f} MiB")
    return lines


@dataclass
class Sample:
    """One look at the process: bytes resident, traced, and tracemalloc's own."""

    rss: int
    traced: int
    overhead: int


@dataclass
class Growth:
    """The traced growth from the mark to a later snapshot."""

    by_owner: dict[str, int]  # bytes, may be negative
    top: list[str]  # the largest growths, one per traceback, formatted

    def report(self) -> str:
        """Several lines: the growth by owner, then the top tracebacks."""
        owners = " ".join(f"{k} {v / 1024:+.1f} KiB" for k, v in sorted(self.by_owner.items()))
        return "\n".join([f"traced growth by owner: {owners}", *self.top])


class MemoryWatch:
    """Traces allocations (``frames`` deep) from :meth:`start` until :meth:`stop`."""

    def __init__(self, frames: int = 12) -> None:
        if frames < 1:
            raise ValueError(f"frames must be 1 or more, not {frames!r}")
        self.frames = frames
        self._mark: str | None = None  # the marked snapshot's file (kept out of memory)

    def start(self) -> MemoryWatch:
        """Start tracing (if not already tracing). Does not block."""
        if not tracemalloc.is_tracing():
            tracemalloc.start(self.frames)
        return self

    def stop(self) -> None:
        """Stop tracing and drop the mark."""
        self._drop_mark()
        tracemalloc.stop()

    def _drop_mark(self) -> None:
        path, self._mark = self._mark, None
        if path is not None:
            os.unlink(path)

    @staticmethod
    def sample() -> Sample:
        """The RSS, the traced bytes and tracemalloc's own bytes, now. Cheap."""
        traced = tracemalloc.get_traced_memory()[0] if tracemalloc.is_tracing() else 0
        return Sample(rss_bytes(), traced, tracemalloc.get_tracemalloc_memory())

    def mark(self) -> None:
        """Take the snapshot later ones are compared with (blocks while it copies every trace).

        It is written to a temporary file, so the traced memory that follows
        does not include it.
        """
        self._drop_mark()
        fd, path = tempfile.mkstemp(prefix="gnsqlite-mark-", suffix=".tracemalloc")
        os.close(fd)
        self._mark = path
        snapshot = self._snapshot()
        snapshot.dump(path)

    def growth(self, top: int = 15, context: int = 6) -> Growth:
        """Compare a fresh snapshot with the mark (blocks, as :meth:`mark` does).

        ``top`` tracebacks with the largest growth are listed, each with its
        ``context`` innermost frames.
        """
        if self._mark is None:
            raise RuntimeError("MemoryWatch.growth() needs mark() first")
        diffs = self._snapshot().compare_to(tracemalloc.Snapshot.load(self._mark), "traceback")
        by_owner: collections.Counter[str] = collections.Counter(books=0, client=0, other=0)
        for diff in diffs:
            by_owner[owner_of(diff.traceback)] += diff.size_diff
        lines = []
        for diff in sorted(diffs, key=lambda d: d.size_diff, reverse=True)[:top]:
            if diff.size_diff <= 0:
                break
            lines.append(
                f"  {diff.size_diff / 1024:+.1f} KiB {diff.count_diff:+d} blocks"
                f" ({owner_of(diff.traceback)})"
            )
            for frame in list(diff.traceback)[-context:][::-1]:
                code = linecache.getline(frame.filename, frame.lineno).strip()
                lines.append(f"      {_short(frame.filename)}:{frame.lineno} {code}")
        return Growth(dict(by_owner), lines)

    @staticmethod
    def _snapshot() -> tracemalloc.Snapshot:
        gc.collect()
        return tracemalloc.take_snapshot().filter_traces(
            [tracemalloc.Filter(False, tracemalloc.__file__)]
        )


def _short(filename: str) -> str:
    for marker in ("/site-packages/", "/lib/python3"):
        if marker in filename:
            return filename.split(marker, 1)[1]
    for marker in ("/gnsqlite/", "/benchmarks/"):
        if marker in filename:
            return marker.strip("/") + "/" + filename.split(marker, 1)[1]
    return filename
