"""The pynsq program on gnsqlite: count the words of each sentence, publish the counts.

Reads topic ``sentences`` (channel ``wordcount``), prints each sentence with
its word count and publishes the count to topic ``counts``. Runs until
Ctrl-C or SIGTERM. ``before.py`` is the same program on pynsq: only the
import differs.

    python after.py 127.0.0.1:4150
"""

import sys

from gnsqlite import nsq

NSQD = sys.argv[1] if len(sys.argv) > 1 else "127.0.0.1:4150"


def published(conn, data):
    if isinstance(data, nsq.Error):
        print(f"publish failed: {data}")


def handler(message):
    words = len(message.body.split())
    writer.pub("counts", str(words).encode(), callback=published)
    print(f"{message.body.decode()} -> {words} words", flush=True)
    return True


try:
    writer = nsq.Writer([NSQD])
    reader = nsq.Reader(
        topic="sentences",
        channel="wordcount",
        message_handler=handler,
        nsqd_tcp_addresses=[NSQD],
        max_in_flight=10,
    )
except ValueError as exc:  # a bad address: one line, not a traceback
    sys.exit(f"wordcount: {exc}")
nsq.run()
