"""A generated web site of linked pages, served on 127.0.0.1 for the crawler.

``/page/0`` is the root. Pages form a tree (``fanout`` children each) with a
few random cross links, duplicate links, fragments, an off-site link and a
``mailto:`` on every page, so the crawler has to normalise and de-duplicate.
A chain ``/deep/1`` -> ``/deep/2`` -> ... hangs off the root and goes deeper
than a crawl's depth limit. The server counts how often each path is fetched.
"""

from __future__ import annotations

import collections
import itertools
import random
from collections.abc import Callable, Iterable
from typing import Any

from gevent.pywsgi import WSGIServer

__all__ = ["TestSite"]


class TestSite:
    """``pages`` tree pages plus a ``deep_chain`` of pages; see the module docstring."""

    def __init__(self, pages: int = 300, fanout: int = 4, deep_chain: int = 10, seed: int = 7):
        rng = random.Random(seed)
        self.links: dict[str, list[str]] = {}
        for i in range(pages):
            last = min(pages, (i + 1) * fanout + 1)
            children = [f"/page/{c}" for c in range(i * fanout + 1, last)]
            cross = [f"/page/{rng.randrange(pages)}" for _ in range(3)]
            self.links[f"/page/{i}"] = children + cross + children[:1] + [f"/page/{i}#top"]
        chain = [f"/deep/{j}" for j in range(1, deep_chain + 1)]
        self.links["/page/0"].append(chain[0])
        for here, there in itertools.pairwise(chain):
            self.links[here] = [there, "/page/0"]
        if chain:
            self.links[chain[-1]] = ["/page/0"]
        self.depth = self._depths()
        self.fetches: collections.Counter[str] = collections.Counter()
        self._server: WSGIServer | None = None

    def _depths(self) -> dict[str, int]:
        depth = {"/page/0": 0}
        queue = collections.deque(["/page/0"])
        while queue:
            here = queue.popleft()
            for link in self.links[here]:
                path = link.split("#")[0]
                if path not in depth:
                    depth[path] = depth[here] + 1
                    queue.append(path)
        return depth

    def html(self, path: str) -> bytes:
        items = [f'<li><a href="{link}">{link}</a></li>' for link in self.links[path]]
        items.append('<li><a href="http://elsewhere.invalid/page/1">off site</a></li>')
        items.append('<li><a href="mailto:someone@example.com">mail</a></li>')
        return (
            f"<html><head><title>{path}</title></head><body><ul>"
            + "".join(items)
            + "</ul></body></html>"
        ).encode()

    def app(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        """The WSGI application."""
        path = environ["PATH_INFO"]
        self.fetches[path] += 1
        if path not in self.links:
            start_response("404 Not Found", [("Content-Type", "text/plain")])
            return [b"not found"]
        body = self.html(path)
        headers = [("Content-Type", "text/html"), ("Content-Length", str(len(body)))]
        start_response("200 OK", headers)
        return [body]

    def start(self) -> str:
        """Serve on a free port of 127.0.0.1; returns the root URL. Does not block."""
        self._server = WSGIServer(("127.0.0.1", 0), self.app, log=None)
        self._server.start()
        return f"http://127.0.0.1:{self._server.server_port}/page/0"

    def stop(self) -> None:
        """Stop serving."""
        if self._server is not None:
            self._server.stop(timeout=1)
