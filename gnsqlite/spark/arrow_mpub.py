"""MPUB bodies built from an Arrow binary column, without a Python object per message.

Pure (pyarrow only, no Spark, no I/O). An MPUB body is the 4-byte
big-endian message count, then per message its 4-byte big-endian size and
its bytes. :func:`mpub_payloads` computes the size prefixes with Arrow
compute kernels, joins them to the bodies element-wise (one contiguous data
buffer holding ``size, body, size, body ...``), and cuts that buffer into
MPUB bodies within a message count and a byte limit: Python work per MPUB,
not per message.
"""

from __future__ import annotations

import struct
import sys
from collections.abc import Iterator

import pyarrow as pa
import pyarrow.compute as pc

from ..errors import MessageTooLargeError

__all__ = ["as_binary", "check_bodies", "mpub_payloads"]

_COUNT = struct.Struct(">I")
_U32 = pa.uint32()


def as_binary(column: pa.Array) -> pa.Array:
    """A string/binary (or large) column as ``binary`` (zero-copy for ``string``)."""
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    if column.type != pa.binary():
        column = column.cast(pa.binary())
    return column


def check_bodies(bodies: pa.Array, max_message_size: int, what: str) -> None:
    """Raise unless every body is non-null, non-empty and within ``max_message_size``."""
    if bodies.null_count:
        raise ValueError(
            f"{what}: {bodies.null_count} rows have a null body:"
            " filter null bodies out before writing"
        )
    if len(bodies) == 0:
        return
    lengths = pc.binary_length(bodies)
    bounds = pc.min_max(lengths).as_py()
    if bounds["min"] == 0:
        raise ValueError(f"{what}: an empty body: nsqd refuses empty messages")
    if bounds["max"] > max_message_size:
        raise MessageTooLargeError(
            f"{what}: a body of {bounds['max']} bytes exceeds maxMessageSize={max_message_size}"
            " (nsqd's --max-msg-size)"
        )


def _big_endian_sizes(sizes: pa.Array) -> pa.Array:
    """``fixed_size_binary(4)`` prefixes: each size as 4 big-endian bytes."""
    s = sizes.cast(_U32)
    if sys.byteorder == "little":
        m = pa.scalar(0xFF, _U32)

        def byte(shift: int) -> pa.Array:
            return pc.bit_wise_and(pc.shift_right(s, pa.scalar(shift, _U32)), m)

        swapped = pc.bit_wise_or(
            pc.bit_wise_or(
                pc.shift_left(byte(0), pa.scalar(24, _U32)),
                pc.shift_left(byte(8), pa.scalar(16, _U32)),
            ),
            pc.bit_wise_or(pc.shift_left(byte(16), pa.scalar(8, _U32)), byte(24)),
        )
    else:  # pragma: no cover - big-endian hosts keep the native order
        swapped = s
    swapped = swapped.combine_chunks() if isinstance(swapped, pa.ChunkedArray) else swapped
    if swapped.offset:
        swapped = pa.concat_arrays([swapped])
    return pa.FixedSizeBinaryArray.from_buffers(
        pa.binary(4), len(swapped), [None, swapped.buffers()[1]]
    )


def mpub_payloads(
    bodies: pa.Array, max_messages: int, max_body_size: int
) -> Iterator[tuple[bytes, int, int]]:
    """Yield ``(mpub_body, messages, body_bytes)`` covering ``bodies`` in order.

    Each MPUB body holds at most ``max_messages`` messages and
    ``max_body_size`` bytes. ``bodies`` is a ``binary`` array already checked
    with :func:`check_bodies` (every body fits ``max_body_size - 8``).
    """
    n = len(bodies)
    if n == 0:
        return
    sizes = pc.binary_length(bodies)
    framed = pc.binary_join_element_wise(
        _big_endian_sizes(sizes).cast(pa.binary()), bodies, pa.scalar(b"", pa.binary())
    )
    data = framed.buffers()[2]
    # Where each framed message ends in ``data``, counted from the first.
    ends = pc.cumulative_sum(pc.add(sizes.cast(pa.int64()), 4))
    base = framed.buffers()[1]
    first = int.from_bytes(base.slice((framed.offset) * 4, 4).to_pybytes(), sys.byteorder)
    start, before = 0, 0
    budget = max_body_size - 4
    while start < n:
        stop = min(n, start + max_messages)
        if ends[stop - 1].as_py() - before > budget:  # binary search the byte limit
            lo, hi = start + 1, stop
            while lo < hi:
                mid = (lo + hi + 1) // 2
                if ends[mid - 1].as_py() - before <= budget:
                    lo = mid
                else:
                    hi = mid - 1
            stop = lo
        after = ends[stop - 1].as_py()
        chunk = data.slice(first + before, after - before)
        yield (
            _COUNT.pack(stop - start) + chunk.to_pybytes(),
            stop - start,
            after - before - 4 * (stop - start),
        )
        start, before = stop, after
