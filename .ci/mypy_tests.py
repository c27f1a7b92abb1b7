"""Type-check ``tests/`` with mypy --strict (setup.cfg's ``[mypy]``), one run per directory.

Usage: ``python .ci/mypy_tests.py [DIR ...]`` from the checkout's root (tox's main env runs
it after ``mypy gnsqlite``). Without arguments it checks every directory directly under
``tests/`` that holds Python files; with arguments, only those directories.

Why one run per directory: the test directories are not packages. pytest's default ``prepend``
import mode puts each test file's own directory first on ``sys.path``, so tests import their
directory's ``conftest.py`` and sibling helpers by bare name (``from cli_helpers import ...``,
``from test_consumer import ...``), and several directories have their own ``conftest.py``.
One mypy run over all of ``tests/`` sees several top-level modules named ``conftest`` and
stops ("Duplicate module named 'conftest'"); one run per directory maps each file to a bare
module name exactly as pytest imports it.

Each run is ``python -m mypy DIR`` with this interpreter, from the root, so ``gnsqlite``
resolves to the checkout's package. Prints each directory's result and the total time;
exits 1 if any directory fails, 0 when all succeed. Blocks until every run is done.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TESTS = ROOT / "tests"


def test_directories() -> list[Path]:
    """The directories directly under ``tests/`` holding a ``.py`` file (at any depth), sorted."""
    return sorted(d for d in TESTS.iterdir() if d.is_dir() and any(d.rglob("*.py")))


def check(directory: Path) -> bool:
    """Run mypy on ``directory`` and print its output; blocks until it exits. True if it passed."""
    relative = directory.relative_to(ROOT).as_posix()
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "mypy", relative],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    elapsed = time.monotonic() - started
    output = (done.stdout + done.stderr).rstrip()
    print(f"== mypy {relative} ({elapsed:.1f} s)", flush=True)
    print(output, flush=True)
    return done.returncode == 0


def main(argv: list[str]) -> int:
    """Check the directories named in ``argv`` (default: all of them); 0 if all pass, else 1."""
    directories = [ROOT / a for a in argv] if argv else test_directories()
    missing = [str(d) for d in directories if not d.is_dir()]
    if missing:
        print(f"mypy_tests: not a directory: {', '.join(missing)}", file=sys.stderr)
        return 2
    started = time.monotonic()
    failed = [d.relative_to(ROOT).as_posix() for d in directories if not check(d)]
    total = time.monotonic() - started
    if failed:
        print(
            f"mypy_tests: FAILED in {len(failed)} of {len(directories)} directories "
            f"({', '.join(failed)}); {total:.1f} s"
        )
        return 1
    print(f"mypy_tests: all {len(directories)} directories pass; {total:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
