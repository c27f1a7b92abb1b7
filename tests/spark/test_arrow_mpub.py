"""MPUB bodies cut from an Arrow column equal the row-by-row encoding, within the limits."""

from __future__ import annotations

import random

import pytest

pa = pytest.importorskip("pyarrow", reason="the spark extra (pyarrow) is not installed")

from gnsqlite.errors import MessageTooLargeError  # noqa: E402
from gnsqlite.protocol.commands import mpub  # noqa: E402
from gnsqlite.spark.arrow_mpub import as_binary, check_bodies, mpub_payloads  # noqa: E402

pytestmark = pytest.mark.no_server


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_payloads_match_the_row_encoding_and_respect_both_limits(seed: int) -> None:
    rng = random.Random(seed)
    bodies = [bytes([rng.randrange(256)]) * rng.randint(1, 300) for _ in range(2000)]
    column = pa.array([b"skip"] * 7 + bodies, pa.binary()).slice(7)  # a sliced array
    max_messages, max_body = rng.choice([(50, 10_000), (1000, 4096), (3, 1 << 20)])
    got = list(mpub_payloads(column, max_messages, max_body))
    decoded: list[bytes] = []
    header = len(b"MPUB t\n") + 4
    for payload, count, size in got:
        assert count <= max_messages and len(payload) <= max_body
        assert payload == mpub("t", bodies[len(decoded) : len(decoded) + count])[header:]
        assert size == sum(map(len, bodies[len(decoded) : len(decoded) + count]))
        decoded.extend(bodies[len(decoded) : len(decoded) + count])
    assert decoded == bodies
    # Greedy: a chunk ends only at a limit.
    for payload, count, _ in got[:-1]:
        assert count == max_messages or len(payload) + 4 + 300 > max_body


def test_bad_bodies_are_named() -> None:
    with pytest.raises(ValueError, match="null body"):
        check_bodies(pa.array([b"a", None], pa.binary()), 100, "partition 0")
    with pytest.raises(ValueError, match="empty body"):
        check_bodies(as_binary(pa.array(["a", ""])), 100, "partition 0")
    with pytest.raises(MessageTooLargeError, match="maxMessageSize=3"):
        check_bodies(pa.array([b"abcd"], pa.binary()), 3, "partition 0")
