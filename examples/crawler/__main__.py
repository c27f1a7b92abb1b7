from gevent import monkey

monkey.patch_all()

# Run the crawler example: python examples/crawler --nsqd-tcp-address 127.0.0.1:4150
#
# This is a monkey-patched program: the line above patches the standard
# library before anything imports it, so urllib.request in the fetchers
# yields to other greenlets while it waits. gnsqlite itself never patches;
# it works the same patched or not.

import sys  # noqa: E402
from pathlib import Path  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))

from pipeline import main  # noqa: E402

from gnsqlite.cli.wording import EXIT_INTERRUPTED, fail  # noqa: E402
from gnsqlite.errors import NSQError  # noqa: E402

try:
    main()
except NSQError as exc:  # a bad option, or no nsqd: one line, not a traceback
    fail("crawler", exc)
except KeyboardInterrupt:  # Ctrl-C before the crawl ended (docs/cli.md's exit rule)
    print("crawler: interrupted before the crawl ended", file=sys.stderr)
    sys.exit(EXIT_INTERRUPTED)
