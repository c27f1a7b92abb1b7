"""Replay the golden scripts and require nsqd's recorded answers, byte for byte.

Every script of ``golden_scripts.py`` runs against the embedded nsqd and
nsqlookupd on every run; when ``GNSQLITE_NSQD`` names the real binaries it
also runs against them, so a new nsqd version shows up as a diff against the
recordings (made with ``record.py --nsqd-bin DIR``). A failure names the
script and shows a unified diff of the normalised transcripts.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from golden_scripts import SCRIPTS
from record import Normaliser, Script, Servers, diff, dump, load, play

from gnsqlite.testing import nsq_bin_dir

_REAL = nsq_bin_dir()
BROKERS = ["embedded"] + (["real"] if _REAL else [])


@pytest.fixture(scope="module", params=BROKERS)
def servers(request: pytest.FixtureRequest) -> Iterator[Servers]:
    """The servers of every setup, started on first use, for one broker kind."""
    found = Servers("" if request.param == "embedded" else str(_REAL))
    try:
        yield found
    finally:
        found.close()


def test_scripts_have_unique_names() -> None:
    names = [s.name for s in SCRIPTS]
    assert len(names) == len(set(names))


@pytest.mark.parametrize("script", SCRIPTS, ids=[s.name for s in SCRIPTS])
def test_replay_matches_recording(servers: Servers, script: Script) -> None:
    expected = load(script)
    assert expected is not None, (
        f"no recording for {script.name}: record it with "
        f"`python tests/golden/record.py --nsqd-bin DIR -k {script.name}`"
    )
    actual = dump(script, play(script, servers.get(script.setup)))
    if actual != expected:
        pytest.fail(
            f"{script.name} answers differently from the recording:\n"
            + diff(expected, actual, script.name),
            pytrace=False,
        )


def test_a_port_is_replaced_in_an_address_only_not_where_the_same_number_was_sent() -> None:
    text = "E_BAD_BODY IDENTIFY heartbeat interval (60001) is invalid; from [::]:60001"
    assert Normaliser([60001]).text(text) == (
        "E_BAD_BODY IDENTIFY heartbeat interval (60001) is invalid; from [::]:<port>"
    )
