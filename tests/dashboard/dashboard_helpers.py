"""A Chromium driven by Playwright in its own thread, while gevent runs this one.

Playwright's sync API blocks its thread in its own event loop, so it gets a
native thread of its own (a one-thread gevent ThreadPool); the test's
greenlets (consumer, producer, dashboard) keep running while it waits.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Callable
from typing import Any, TypeVar

import gevent.threadpool

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]

T = TypeVar("T")


def browser_missing() -> str | None:
    """Why the browser test cannot run, or ``None``."""
    if not os.path.exists(CHROMIUM):
        return f"{CHROMIUM} is absent: apt-get install -y chromium"
    if importlib.util.find_spec("playwright") is None:
        return "playwright is not installed: pip install playwright (no 'playwright install')"
    return None


class Browser:
    """One page of a headless Chromium; :meth:`call` runs ``fn(page)`` in the browser thread."""

    def __init__(self) -> None:
        self._pool = gevent.threadpool.ThreadPool(1)
        self._state: dict[str, Any] = {}
        self._pool.apply(self._open)

    def _open(self) -> None:
        from playwright.sync_api import sync_playwright

        playwright = sync_playwright().start()
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        self._state.update(playwright=playwright, browser=browser, page=page)

    def call(self, fn: Callable[[Any], T]) -> T:
        """``fn(page)`` in the browser's thread; blocks only this greenlet."""
        page = self._state["page"]
        result: T = self._pool.apply(fn, (page,))
        return result

    def close(self) -> None:
        def close() -> None:
            if "browser" in self._state:
                self._state["browser"].close()
            if "playwright" in self._state:
                self._state["playwright"].stop()

        try:
            self._pool.apply(close)
        finally:
            self._pool.kill()
