"""What a soak's memory report rests on: live objects by class, traced growth by owner."""

from __future__ import annotations

import mmap
import sys
import tracemalloc

import pytest

from gnsqlite.config import ConsumerConfig
from gnsqlite.testing.memory import (
    MemoryWatch,
    count_objects,
    malloc_info,
    mapping_growth,
    owner_of,
    rss_by_mapping,
    trim_malloc,
)


def test_count_objects_counts_live_library_objects_by_class() -> None:
    name = "gnsqlite.config.ConsumerConfig"
    before = count_objects()[name]
    kept = [ConsumerConfig() for _ in range(5)]
    assert count_objects()[name] == before + 5
    del kept
    assert count_objects()[name] == before  # collected: only reachable objects count
    mappings = rss_by_mapping()  # the measuring run's own records are not the client's
    assert "gnsqlite.testing.memory.Mapping" not in count_objects()
    assert count_objects(exclude=())["gnsqlite.testing.memory.Mapping"] >= len(mappings)


def frames(*filenames: str) -> tracemalloc.Traceback:
    """A traceback through ``filenames``, oldest first (as tracemalloc orders them)."""
    return tracemalloc.Traceback(tuple((name, 1) for name in reversed(filenames)))


def test_owner_of_puts_what_a_ledger_keeps_on_the_books() -> None:
    client = "/src/gnsqlite/consumer/link.py"
    books = "/src/gnsqlite/testing/faults.py"
    assert owner_of(frames("/usr/lib/python3.11/socket.py", client)) == "client"
    assert owner_of(frames(client, books, "/src/gnsqlite/message.py")) == "books"
    assert owner_of(frames("/src/benchmarks/soak.py")) == "books"
    assert owner_of(frames("/usr/lib/python3.11/heapq.py")) == "other"


def test_growth_names_the_traceback_that_grew_since_the_mark() -> None:
    watch = MemoryWatch(frames=4).start()
    try:
        watch.mark()
        grown = [bytearray(1000) for _ in range(100)]  # ~100 KiB, allocated in this file
        growth = watch.growth(top=3)
        assert growth.by_owner["other"] >= 100 * 1000  # a test file is neither client nor books
        assert "test_memory_watch.py" in "\n".join(growth.top[:3])
        assert watch.sample().traced > 0
        del grown
    finally:
        watch.stop()
    with pytest.raises(RuntimeError, match=r"needs mark\(\) first"):
        MemoryWatch().growth()
    with pytest.raises(ValueError, match="frames must be 1 or more"):
        MemoryWatch(frames=0)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc_trim")
def test_trim_malloc_reaches_glibc() -> None:
    assert trim_malloc() is True


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallinfo2")
def test_malloc_info_tells_memory_in_use_from_memory_freed() -> None:
    before = malloc_info()
    assert before is not None
    # 4,000 objects of 2 KiB: above pymalloc's 512 bytes, so each is one malloc() of glibc's.
    blocks = [bytearray(2048) for _ in range(4000)]
    held = malloc_info()
    assert held is not None
    assert held.in_use - before.in_use >= 7 * 1024 * 1024, (before, held)
    del blocks[::2]  # every other one: holes glibc keeps in its heap, not returned
    freed = malloc_info()
    assert freed is not None
    assert held.in_use - freed.in_use >= 3 * 1024 * 1024, (held, freed)
    assert freed.free - held.free >= 3 * 1024 * 1024, (held, freed)
    assert freed.heap >= freed.free


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/smaps")
def test_mapping_growth_names_the_mapping_whose_pages_were_touched() -> None:
    before = rss_by_mapping()
    assert any(m.name == "[stack]" for m in before.values())
    # An anonymous mapping of its own (malloc might serve 16 MiB from its heap instead).
    block = mmap.mmap(-1, 16 * 1024 * 1024, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    try:
        for page in range(0, len(block), mmap.PAGESIZE):  # touch every page
            block[page] = 1
        touched = rss_by_mapping()
        lines = mapping_growth(before, touched, top=1)
        assert float(lines[0].split(" MiB ", 1)[0]) >= 15.0, lines
        assert " anonymous " in lines[0], lines  # (the kernel may merge it with a neighbour)
    finally:
        block.close()  # unmapped at once
    net = mapping_growth(touched, rss_by_mapping())[-1]  # (the rest moves a little too)
    assert float(net.split("net ", 1)[1].split(" MiB", 1)[0]) <= -15.0, net
