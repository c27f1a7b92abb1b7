"""The README's benchmark table, printed from a stored ``compare.py`` report.

Not a benchmark: it runs nothing, it formats a report that ``compare.py --json`` wrote::

    python benchmarks/readme_table.py                           # benchmarks/compare.json
    python benchmarks/readme_table.py other.json                # any report compare.py wrote
    python benchmarks/readme_table.py --update README.md        # rewrite the README's table

It prints a short caption (the broker, the machine, the repetitions) and one
Markdown table: the plain-transport workloads, each client's median messages
per second, and gnsqlite's median over the best Python peer's and over
go-nsq's, computed again from the report's cells by ``compare.py`` itself.
``--update`` replaces what stands between the two marker lines
(:data:`BEGIN`, :data:`END`) of the file with that output;
``tests/docs/test_readme_table.py`` checks that the README holds exactly what
this prints for ``benchmarks/compare.json``. The full tables (CPU per message,
compressed and TLS rows, memory) and the method are in docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import compare  # benchmarks/compare.py, beside this file

HERE = Path(__file__).resolve().parent
DEFAULT_REPORT = HERE / "compare.json"
#: The README's block lies between these two lines (both kept by ``--update``).
BEGIN = "<!-- benchmark-table: python benchmarks/readme_table.py -->"
END = "<!-- end benchmark-table -->"
#: The workloads shown: one connection, no compression, no TLS.
KEYS = ("consume_2500", "consume_100", "consume_1", "pub_sync", "pub_50", "mpub_100")
#: ``compare.py``'s name of the server, as the caption says it.
BROKERS = {"real nsqd": "the real nsqd v1.3.0", "embedded broker": "gnsqlite's embedded broker"}
NAMES = {"gnsqlite": "gnsqlite", "pynsq": "pynsq", "gnsq": "gnsq", "go": "go-nsq"}


def _rate(cell: dict[str, Any]) -> str:
    return f"{cell['median']:,.0f}" if "median" in cell else "-"


def _ratio(value: float | None, who: str | None = None) -> str:
    if not value:
        return "-"
    return f"{value:.2f}x ({who})" if who else f"{value:.2f}x"


def table(report: dict[str, Any]) -> str:
    """The caption and the Markdown table for ``report`` (a ``compare.py --json`` report)."""
    report = compare.rederive(report)
    clients = [c for c in report["clients"] if c in NAMES]
    caption = (
        f"Messages per second, one connection per client, {compare.BODY_SIZE}-byte messages,"
        f" against {BROKERS.get(report['broker'], report['broker'])} on a {report['cores']}-core"
        " machine"
        f" (Python {report['python']}): the median of {report['repeat']} repetitions, each"
        " client in its own process. The last two columns are gnsqlite's rate over the best"
        " Python peer's and over go-nsq's (higher is better)."
    )
    lines = [
        caption,
        "",
        "| workload | " + " | ".join(NAMES[c] for c in clients) + " | gnsqlite vs best peer"
        " | gnsqlite vs go-nsq |",
        "|---" * (len(clients) + 3) + "|",
    ]
    rows = {row.key: row for row in compare.ROWS}
    for key in KEYS:
        entry = report["rows"].get(key)
        if entry is None:
            continue
        cells = [_rate(entry["cells"].get(c, {})) for c in clients]
        r = entry["ratios"]
        lines.append(
            f"| {rows[key].title} | "
            + " | ".join(cells)
            + f" | {_ratio(r['vs_best_peer'], r['best_peer'])} | {_ratio(r['vs_go'])} |"
        )
    return "\n".join(lines) + "\n"


def replace_block(text: str, block: str) -> str:
    """``text`` with what stands between :data:`BEGIN` and :data:`END` replaced by ``block``."""
    start = text.index(BEGIN) + len(BEGIN)
    end = text.index(END, start)
    return text[:start] + "\n" + block + text[end:]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument(
        "report",
        nargs="?",
        default=str(DEFAULT_REPORT),
        help=f"a report written by compare.py --json (default {DEFAULT_REPORT.name})",
    )
    parser.add_argument(
        "--update",
        metavar="FILE",
        help=f"replace the lines between {BEGIN!r} and {END!r} in FILE instead of printing",
    )
    args = parser.parse_args(argv)
    with open(args.report) as f:
        block = table(json.load(f))
    if args.update is None:
        sys.stdout.write(block)
        return 0
    path = Path(args.update)
    try:
        path.write_text(replace_block(path.read_text(), block))
    except ValueError:
        parser.error(f"{path} has no {BEGIN!r} ... {END!r} block to replace")
    print(f"wrote the table of {args.report} into {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
