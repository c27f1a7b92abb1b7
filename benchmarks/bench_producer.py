"""Producer throughput: gnsqlite against pynsq's Writer and gnsq's Producer.

Prints messages per second for three workloads, each run by the three
clients one after the other against the same nsqd in the same run, and the
ratio of gnsqlite to each:

* sequential PUB: one publisher waits for each answer before the next;
* pipelined PUB: 50 publishers at once (50 greenlets for gnsqlite and gnsq,
  50 outstanding callbacks for pynsq's tornado Writer);
* MPUB: batches of 100 messages, one batch at a time.

By default it starts the embedded broker in a subprocess
(``gnsqlite.testing.NsqdServer``; the real nsqd when ``GNSQLITE_NSQD`` names
its directory); ``--nsqd host:port`` uses a running nsqd instead. This is a
script that prints figures, not a test::

    python benchmarks/bench_producer.py [--count 20000] [--size 100]
"""

from __future__ import annotations

import argparse
import functools
import logging
from collections.abc import Callable

from gnsqlite.cli._bench_peers import PUBLISH
from gnsqlite.cli.bench import publish_rate
from gnsqlite.http import NsqdHTTPClient
from gnsqlite.testing import NsqdServer

__all__ = ["main"]

Workload = Callable[[str, str, bytes, int], float]


def _clients(mode: str) -> dict[str, Workload]:
    """The three clients' ``seconds(address, topic, body, count)`` for ``mode``.

    The workloads are the ones ``gnsqlite bench --compare`` runs
    (:mod:`gnsqlite.cli.bench` and its peers module), so both print the same thing.
    """
    return {
        "gnsqlite": functools.partial(_with_mode, publish_rate, mode),
        "pynsq": functools.partial(_with_mode, PUBLISH["pynsq"], mode),
        "gnsq": functools.partial(_with_mode, PUBLISH["gnsq"], mode),
    }


def _with_mode(
    fn: Callable[[str, str, bytes, int, str], float],
    mode: str,
    address: str,
    topic: str,
    body: bytes,
    count: int,
) -> float:
    return fn(address, topic, body, count, mode)


#: (name, scale of --count, clients); MPUB moves far more messages per call.
WORKLOADS: list[tuple[str, int, dict[str, Workload]]] = [
    ("sequential PUB", 1, _clients("sequential")),
    ("pipelined PUB x50", 1, _clients("pipelined")),
    ("MPUB batches of 100", 5, _clients("mpub")),
]


def run(
    address: str, count: int, size: int, repeat: int, http: NsqdHTTPClient | None = None
) -> None:
    """Run every workload with every client and print the table.

    With ``http``, each topic is deleted after its runs so nsqd's memory
    stays flat.
    """
    body = b"m" * size
    scales = ", ".join(f"x{scale} for {name}" for name, scale, _ in WORKLOADS if scale > 1)
    print(f"nsqd {address}; {count} messages of {size} bytes ({scales}); best of {repeat} runs")
    header = f"{'workload':<22}{'gnsqlite':>12}{'pynsq':>12}{'gnsq':>12}"
    print(header + f"{'vs pynsq':>10}{'vs gnsq':>10}")
    print("-" * (len(header) + 20))
    for index, (name, scale, clients) in enumerate(WORKLOADS):
        n = count * scale
        rates = dict.fromkeys(clients, 0.0)
        # Rounds interleave the clients, so a drift of the machine or of the
        # broker's state hits them alike; each keeps its best round.
        for round_ in range(repeat):
            for client, fn in clients.items():
                topic = f"bench{index}_{client}_{round_}"
                rates[client] = max(rates[client], n / fn(address, topic, body, n))
                if http is not None:
                    http.delete_topic(topic)
        ours = rates["gnsqlite"]
        print(
            f"{name:<22}{ours:>12,.0f}{rates['pynsq']:>12,.0f}{rates['gnsq']:>12,.0f}"
            f"{ours / rates['pynsq']:>9.2f}x{ours / rates['gnsq']:>9.2f}x"
        )
    print("figures are messages per second; higher is better")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nsqd", help="host:port of a running nsqd (default: start one)")
    parser.add_argument("--count", type=int, default=20000, help="messages per run")
    parser.add_argument("--size", type=int, default=100, help="message body size in bytes")
    parser.add_argument("--repeat", type=int, default=3, help="runs per figure (best kept)")
    args = parser.parse_args()
    # gnsq logs every connection it closes at warning level; keep the table readable.
    logging.getLogger("gnsq").setLevel(logging.ERROR)
    if args.nsqd:
        run(args.nsqd, args.count, args.size, args.repeat)
        return
    # Publishes stay in memory; no larger, see compare.py's MEM_QUEUE_SIZE.
    with NsqdServer(mem_queue_size=1_000_000) as server:
        kind = "real nsqd" if server.is_real else "embedded broker"
        print(f"started the {kind} in a subprocess")
        run(server.tcp_address, args.count, args.size, args.repeat, server.http)


if __name__ == "__main__":
    main()
