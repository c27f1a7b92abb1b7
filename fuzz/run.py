"""Run one fuzz target with atheris (libFuzzer) for a number of inputs.

    python fuzz/run.py --target command_parser --runs 1000000
    python fuzz/run.py --target frames --replay DIR --coverage   # line coverage of a corpus

Targets are in :mod:`fuzz.targets`; seeds in ``fuzz/corpus/<target>/`` are
copied to a work directory (``--work``, a temporary one by default) so the
committed corpus only changes by hand. A crash (any exception but
gnsqlite's typed errors, a hang over ``--timeout`` seconds, more than
``--rss-limit-mb``) stops the run; libFuzzer writes the input to
``--artifacts`` and this script exits non-zero. At the end it prints one
line: target, inputs, seconds, inputs/s, and libFuzzer's coverage counters.
Needs ``atheris`` (``pip install -e .[fuzz]``); ``--replay`` needs only
``coverage``.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "fuzz" / "corpus"
sys.path.insert(0, str(ROOT))


def _parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--target", required=True)
    parser.add_argument("--runs", type=int, default=10_000, help="inputs to try (default 10000)")
    parser.add_argument("--max-len", type=int, default=4096, help="longest input in bytes")
    parser.add_argument("--timeout", type=int, default=10, help="seconds one input may take")
    parser.add_argument("--rss-limit-mb", type=int, default=1024)
    parser.add_argument("--seed", type=int, default=1, help="libFuzzer's random seed")
    parser.add_argument("--work", help="corpus work directory (default: a temporary one)")
    parser.add_argument(
        "--artifacts",
        default=str(ROOT / "fuzz" / "crashes"),
        help="where a crashing input is written",
    )
    parser.add_argument("--replay", help="run every file of this directory once, no fuzzing")
    parser.add_argument(
        "--coverage",
        action="store_true",
        help="with --replay: report line coverage of the target's modules",
    )
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def _replay(args: argparse.Namespace) -> int:
    cov = None
    if args.coverage:
        import coverage

        cov = coverage.Coverage(branch=False, data_file=None)
        cov.start()
    from fuzz.targets import MODULES, run_one

    files = sorted(p for p in Path(args.replay).iterdir() if p.is_file())
    for path in files:
        run_one(args.target, path.read_bytes())
    if cov is not None:
        cov.stop()
        parts = []
        for module in MODULES[args.target]:
            _, statements, _, missing, _ = cov.analysis2(str(ROOT / module))
            covered = len(statements) - len(missing)
            parts.append(
                f"{module} {covered}/{len(statements)} lines"
                f" ({100 * covered / max(len(statements), 1):.0f}%)"
            )
        print(f"replayed {len(files)} inputs: " + "; ".join(parts))
    return 0


def _fuzz_child(args: argparse.Namespace) -> None:
    import atheris

    with atheris.instrument_imports(include=["gnsqlite"]):
        from fuzz.targets import TARGETS, run_one
    if args.target not in TARGETS:
        sys.exit(f"unknown target {args.target!r}: use one of {', '.join(TARGETS)}")
    target = args.target

    def one(data: bytes) -> None:
        run_one(target, data)

    os.makedirs(args.artifacts, exist_ok=True)
    atheris.Setup(
        [
            sys.argv[0],
            f"-runs={args.runs}",
            f"-max_len={args.max_len}",
            f"-timeout={args.timeout}",
            f"-rss_limit_mb={args.rss_limit_mb}",
            f"-seed={args.seed}",
            "-print_final_stats=1",
            f"-artifact_prefix={args.artifacts}{os.sep}",
            args.work,
            str(CORPUS / target),
        ],
        one,
    )
    atheris.Fuzz()


def main(argv: list[str] | None = None) -> int:
    args = _parse(sys.argv[1:] if argv is None else argv)
    if args.replay:
        return _replay(args)
    if args.child:
        _fuzz_child(args)
        return 0
    work = args.work or tempfile.mkdtemp(prefix=f"gnsqlite-fuzz-{args.target}-")
    os.makedirs(work, exist_ok=True)
    cmd = [sys.executable, __file__, *sys.argv[1:], "--child", "--work", work]
    start = time.monotonic()
    proc = subprocess.run(cmd, stderr=subprocess.PIPE, text=True)
    elapsed = time.monotonic() - start
    log = proc.stderr
    done = re.findall(r"#(\d+)\s+DONE\s+cov: (\d+) ft: (\d+)", log)
    runs = re.findall(r"stat::number_of_executed_units: (\d+)", log)
    inputs = int(runs[-1]) if runs else 0
    if proc.returncode != 0 or not done:
        sys.stderr.write(log[-6000:])
        print(
            f"{args.target}: FAILED after {inputs} inputs, {elapsed:.1f} s"
            f" (exit {proc.returncode}); the input is under {args.artifacts}"
        )
        return 1
    _, cov, ft = done[-1]
    corpus_files = len(os.listdir(work))
    print(
        f"{args.target}: {inputs} inputs in {elapsed:.1f} s ({inputs / elapsed:,.0f}/s),"
        f" cov {cov} ft {ft}, corpus {corpus_files} files in {work}"
    )
    if not args.work:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
