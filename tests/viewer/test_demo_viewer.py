"""The demo's live viewer: `flowsteer-mcp view` started on the demo server's store file, stopped with the demo."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from flowsteer_mcp.demo_viewer import live_viewer
from flowsteer_mcp.store.sqlite import SQLiteStore
from tests.viewer.test_follow import record

pytestmark = pytest.mark.slow


async def test_the_demo_viewer_serves_the_store_and_stops_with_the_block(tmp_path: Path) -> None:
    path = tmp_path / "workflows.sqlite"
    writer = SQLiteStore(path)
    await writer.put(record("wf_demo", 1.0, problem="Return the second largest number."))
    try:
        async with live_viewer(path) as url:
            assert url is not None and url.startswith("http://127.0.0.1:") and url.endswith("/view/")
            async with httpx.AsyncClient() as client:
                page = await client.get(url)
            assert page.status_code == 200 and 'data-workflow-id="wf_demo"' in page.text
        with pytest.raises(httpx.ConnectError):
            async with httpx.AsyncClient() as client:
                await client.get(url)
    finally:
        await writer.close()


async def test_a_viewer_that_cannot_start_yields_none(tmp_path: Path) -> None:
    async with live_viewer(tmp_path / "missing.sqlite") as url:  # `view` refuses a missing file and exits 2
        assert url is None
