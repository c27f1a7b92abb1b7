"""The pages that explain RDY name every reason the dashboard's "why" column can show."""

from __future__ import annotations

from pathlib import Path

import pytest

from gnsqlite.flow.rdy import REASONS

DOCS = Path(__file__).resolve().parents[2] / "docs"

pytestmark = pytest.mark.no_server


def test_the_consuming_guide_lists_every_rdy_reason() -> None:
    guide = (DOCS / "consuming.md").read_text(encoding="utf-8")
    assert [reason for reason in REASONS if f'`"{reason}"`' not in guide] == []


@pytest.mark.parametrize("reason", ["rotation", "waiting"])
def test_the_dashboard_page_names_the_rotation(reason: str) -> None:
    assert f"`{reason}`" in (DOCS / "dashboard.md").read_text(encoding="utf-8")
