"""pynsq 0.9.1's own test files, run against the drop-in with only ``import nsq`` redirected.

pynsq's tests are not in its PyPI sdist, and their code is not copied into
this repository (third-party code stays out of it), so this runs when
``GNSQLITE_PYNSQ_TESTS`` names a directory holding pynsq 0.9.1's ``tests/``
files (with the ``cert.pem``/``key.pem`` pair its TLS tests read), and is
skipped otherwise, saying so. The files start ``nsqd`` and ``nsqlookupd``
from ``PATH`` on nsqd's default ports; this test puts wrappers first on
``PATH`` that start the real ones (``GNSQLITE_NSQD``) or the embedded broker.

Three files patch tornado internals of pynsq's own ``AsyncConn`` and Reader
and are not run (:data:`NOT_RUN`); one test is expected to fail, for the
reason in :data:`EXPECTED_FAILURES`. Every other test must pass.
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from gnsqlite.testing import nsq_bin_dir

SUITE = os.environ.get("GNSQLITE_PYNSQ_TESTS")
HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]

NOT_RUN = {
    "test_async.py": "drives pynsq's AsyncConn through mocked tornado IOStream calls",
    "test_backoff.py": "asserts pynsq's RDY/backoff timers through a mocked IOLoop and IOStream",
    "test_rdy.py": "asserts pynsq's RDY redistribution through a mocked IOLoop and IOStream",
}
EXPECTED_FAILURES = {
    "ReaderIntegrationTest::test_conn_socket_upgrade": (
        "asserts that the TLS socket is the standard library's ssl.SSLSocket; the drop-in's"
        " is gevent.ssl.SSLSocket, which waits on the hub (in a monkey-patched process it is"
        " ssl.SSLSocket)"
    ),
}

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not SUITE,
        reason="pynsq's own tests are not here: set GNSQLITE_PYNSQ_TESTS to a directory"
        " holding pynsq 0.9.1's tests/ files to run them against the drop-in",
    ),
]


def write_wrappers(bin_dir: Path, data_dir: Path) -> None:
    real = nsq_bin_dir()
    for name, module in (("nsqd", "gnsqlite.broker"), ("nsqlookupd", "gnsqlite.broker.lookupd")):
        if real is not None:
            command = f'exec "{real}/{name}"'
        else:
            command = f'cd "{ROOT}" && exec "{sys.executable}" -m {module}'
        data = f'--data-path="$(mktemp -d "{data_dir}/nsqd.XXXXXX")" '
        script = bin_dir / name
        script.write_text(f'#!/bin/sh\n{command} {data if name == "nsqd" else ""}"$@"\n')
        script.chmod(script.stat().st_mode | stat.S_IXUSR)


def test_pynsq_own_suite_passes_on_the_dropin(tmp_path: Path) -> None:
    suite = Path(str(SUITE)).resolve()
    files = sorted(p.name for p in suite.glob("test_*.py") if p.name not in NOT_RUN)
    assert files, f"no test_*.py files in {suite}"
    bin_dir, data_dir = tmp_path / "bin", tmp_path / "data"
    bin_dir.mkdir()
    data_dir.mkdir()
    write_wrappers(bin_dir, data_dir)
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    report = tmp_path / "report.xml"
    env = dict(
        os.environ,
        PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
        PYTHONPATH=os.pathsep.join([str(HERE / "pynsq_suite"), str(ROOT)]),
    )
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "nsq_redirect",
            "-p",
            "no:cacheprovider",
            "-p",
            "no:gnsqlite",
            "-c",
            str(tmp_path / "pytest.ini"),
            "--rootdir",
            str(suite.parent),
            f"--junitxml={report}",
            "-q",
            *(str(suite / f) for f in files),
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    outcomes: dict[str, str] = {}
    for case in ET.parse(report).getroot().iter("testcase"):
        name = f"{case.get('classname', '').rsplit('.', 1)[-1]}::{case.get('name')}"
        broke = case.find("failure") is not None or case.find("error") is not None
        skipped = case.find("skipped") is not None
        outcomes[name] = "failed" if broke else "skipped" if skipped else "passed"
    failed = {n for n, o in outcomes.items() if o == "failed"}
    print(
        f"pynsq's own suite on the drop-in: {len(outcomes) - len(failed)} of {len(outcomes)}"
        f" passed ({', '.join(files)}); not run: {', '.join(NOT_RUN)}"
    )
    assert failed <= set(EXPECTED_FAILURES), run.stdout[-6000:]
    assert len(outcomes) >= 40, run.stdout[-3000:]
