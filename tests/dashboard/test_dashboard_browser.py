"""The dashboard in a real browser: live figures matching ``stats()``, bodies shown as text."""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import gevent
import gevent.event
import pytest
from dashboard_helpers import Browser, browser_missing

from gnsqlite.consumer import Consumer
from gnsqlite.producer import Producer
from gnsqlite.testing import wait_until

pytestmark = [
    pytest.mark.skipif(browser_missing() is not None, reason=browser_missing() or ""),
    pytest.mark.skipif(
        importlib.util.find_spec("geventwebsocket") is None,
        reason="the dashboard extra (gevent-websocket) is not installed",
    ),
]

#: A folder to save the page's screenshot in, as ``dashboard.png`` (default: the test's
#: tmp_path); docs/img/dashboard.png is a copy of one, for docs/dashboard.md.
SCREENSHOT_DIR = "GNSQLITE_SCREENSHOT_DIR"
HOSTILE = '<img src=x onerror="window.__owned=1"><b id="injected">bold</b> & "quotes"'


@pytest.fixture
def browser() -> Iterator[Browser]:
    browser = Browser()
    try:
        yield browser
    finally:
        browser.close()


def _number(text: str | None) -> float:
    return float((text or "0").replace(",", ""))


def test_the_page_shows_live_growing_figures_matching_stats(
    nsqd: Any, browser: Browser, tmp_path: Path
) -> None:
    from gnsqlite.dashboard import Dashboard

    producer = Producer(nsqd.tcp_address)
    consumer = Consumer(
        "clicks", "dash", None, nsqd_tcp_addresses=[nsqd.tcp_address], max_in_flight=20
    )
    dashboard = Dashboard(
        consumer, producer, nsqd_http_addresses=[nsqd.http_address], interval=0.25
    )
    consumer.set_handler(lambda message: gevent.sleep(0.005))  # the dashboard observes it
    published = 0
    stop = gevent.event.Event()

    def publish_steadily() -> None:
        nonlocal published
        while not stop.is_set():
            producer.publish("clicks", HOSTILE if published % 10 == 0 else f"click {published}")
            published += 1
            gevent.sleep(0.01)

    producer.start()
    consumer.start()
    dashboard.start(("127.0.0.1", 0))
    publisher = gevent.spawn(publish_steadily)
    try:
        browser.call(lambda page: page.goto(dashboard.url))

        def shown(counter: str) -> float:
            selector = f"[data-source=consumer0] [data-counter={counter}]"
            return _number(browser.call(lambda page: page.text_content(selector)))

        def shows(counter: str, value: float) -> bool:
            return shown(counter) == value

        def chart_max(source: str) -> float:
            selector = f"[data-source={source}] canvas"
            return _number(browser.call(lambda page: page.get_attribute(selector, "data-max")))

        wait_until(lambda: shown("received") > 0, timeout=15, message="a non-zero counter")
        wait_until(lambda: chart_max("consumer0") > 0, timeout=15, message="a consumer chart")
        wait_until(lambda: chart_max("cluster2") > 0, timeout=15, message="a cluster chart")
        first = shown("received")
        wait_until(lambda: shown("received") > first, timeout=15, message="a growing counter")
        # the picture of the docs: the page with traffic flowing and a few seconds of charts
        wait_until(lambda: shown("received") >= 300, timeout=30, message="300 messages shown")
        shot = Path(os.environ.get(SCREENSHOT_DIR) or tmp_path) / "dashboard.png"
        browser.call(lambda page: page.screenshot(path=str(shot), full_page=True))
        assert shot.stat().st_size > 10_000
        link = browser.call(lambda page: page.text_content("[data-testid=link]"))
        assert link == "live"

        # stop the traffic: the page must settle on exactly the consumer's stats()
        stop.set()
        publisher.join(timeout=5)
        wait_until(
            lambda: consumer.stats()["totals"]["finished"] == published,
            timeout=15,
            message="every message finished",
        )
        totals = consumer.stats()["totals"]
        assert totals["received"] == published
        for counter in ("received", "finished", "requeued", "in_flight"):
            wait_until(
                partial(shows, counter, totals[counter]),
                timeout=10,
                message=f"the page shows {counter}={totals[counter]}",
            )
        row = browser.call(
            lambda page: page.inner_text("[data-source=consumer0] table.conns tbody tr")
        )
        conn = consumer.stats()["connections"][0]
        assert row.split() == [
            conn["address"],
            str(conn["rdy"]),
            conn["rdy_reason"],
            "0",
            f"{published:,}",
            f"{published:,}",
            "0",
        ]

        # the producer's card counts what it published
        def producer_shows(counter: str) -> float:
            selector = f"[data-source=producer1] [data-counter={counter}]"
            return _number(browser.call(lambda page: page.text_content(selector)))

        wait_until(
            lambda: producer_shows("publishes") == published,
            timeout=10,
            message=f"the producer card shows {published} publishes",
        )
        assert producer_shows("messages") == published and producer_shows("errors") == 0
        prow = browser.call(
            lambda page: page.inner_text("[data-source=producer1] table.publishes tbody tr")
        )
        assert prow.split() == ["clicks", "pub", f"{published:,}", f"{published:,}"]

        # a body with HTML is shown as text, never as markup
        tail_text = browser.call(lambda page: page.inner_text("[data-testid=tail]"))
        assert HOSTILE in tail_text
        assert browser.call(lambda page: page.query_selector("#tail b, #tail img")) is None
        assert browser.call(lambda page: page.evaluate("window.__owned")) is None
        events = browser.call(lambda page: page.inner_text("[data-testid=events]"))
        assert f"connected to {nsqd.tcp_address}" in events

    finally:
        publisher.kill()
        dashboard.stop()
        consumer.close()
        producer.close()
