"""The episode browser (`flowsteer view RUN_DIR`) in headless Chromium, over a run folder written like an
evaluation writes it (a journal of `ItemResult` lines, a plot)."""

from __future__ import annotations

import json
import struct
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from flowsteer_mcp.canvas.execution import NodeTrace
from flowsteer_mcp.director.graded import ItemResult
from tests.browser.conftest import BROWSER_TESTS, WAIT_MS, episode_browser

if TYPE_CHECKING:
    from playwright.async_api import Page

pytestmark = BROWSER_TESTS

HIDDEN = "assert hidden_case() == 42"  # what a sandbox's stderr may echo of a hidden test: never shown
INLINE_SCRIPTS = "() => document.querySelectorAll('script:not([src])').length"
EPISODES = [
    ItemResult(
        director="template:plan-code",
        problem_id="gsm8k/17",
        source="gsm8k",
        problem_type="math",
        answer="391",
        score=1.0,
        correct=True,
        score_method="numeric",
        dsl="Plan -> Programmer",
        finished=True,
        turns=3,
        trace=[
            NodeTrace(
                node_id="node_1", operator="Plan", ok=True, output="Multiply 17 by 23.", llm_calls=1
            ).model_dump(),
            NodeTrace(node_id="node_2", operator="Programmer", ok=True, output="391", llm_calls=1).model_dump(),
        ],
    ),
    ItemResult(
        director="direct",
        problem_id="mbpp/7",
        source="mbpp",
        problem_type="code",
        answer="def add(a, b):\n    return a - b",
        score=0.0,
        correct=False,
        score_method="sandbox",
        score_details={
            "test_kind": "assert",
            "status": "failed",
            "passed": 2,
            "failed": 1,
            "total": 3,
            "stderr_tail": f"AssertionError: {HIDDEN}",
            "reason": HIDDEN,
        },
        turns=1,
    ),
    ItemResult(
        director="template:plan-code",
        problem_id="mbpp/9",
        source="mbpp",
        problem_type="code",
        answer="def double(x):\n    return 2 * x",
        score=1.0,
        correct=True,
        score_method="sandbox",
    ),
]


def tiny_png() -> bytes:
    """A valid 2x2 grey PNG, so the plot test needs no plotting library."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    pixels = zlib.compress(b"\x00\x80\x80" * 2)
    header = struct.pack(">IIBBBBB", 2, 2, 8, 0, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", pixels) + chunk(b"IEND", b"")


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("eval-run")
    lines = [json.dumps({"journal": 1, "config": {}}), *(episode.model_dump_json() for episode in EPISODES)]
    (folder / "items.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    (folder / "plots").mkdir()
    (folder / "plots" / "accuracy.png").write_bytes(tiny_png())
    return folder


@pytest.fixture(scope="module")
def base_url(run_dir: Path) -> Iterator[str]:
    with episode_browser(run_dir) as url:
        yield url


async def shown_rows(page: Page) -> list[tuple[str, str]]:
    """(problem id, pass|fail) of every row the episode table shows."""
    rows = page.locator("#episodes tr.episode")
    return [
        (
            str(await row.get_attribute("data-problem-id")),
            "pass" if "pass" in str(await row.get_attribute("class")) else "fail",
        )
        for row in await rows.all()
    ]


async def filter_by(page: Page, **choices: str) -> None:
    """Choose in the filter form and submit it, as a person does."""
    for name, value in choices.items():
        await page.select_option(f'#filters select[name="{name}"]', value)
    async with page.expect_navigation(timeout=WAIT_MS):
        await page.click('#filters button[type="submit"]')


async def test_filters_narrow_the_episode_rows(base_url: str, page: Page) -> None:
    await page.goto(base_url)
    everything = [("gsm8k/17", "pass"), ("mbpp/7", "fail"), ("mbpp/9", "pass")]
    assert await shown_rows(page) == everything

    await filter_by(page, result="pass")
    assert await shown_rows(page) == [("gsm8k/17", "pass"), ("mbpp/9", "pass")]
    assert "result=pass" in page.url

    await filter_by(page, result="fail")
    assert await shown_rows(page) == [("mbpp/7", "fail")]

    await filter_by(page, result="all", dataset="mbpp", director="template:plan-code")
    assert await shown_rows(page) == [("mbpp/9", "pass")]
    assert await page.evaluate(INLINE_SCRIPTS) == 0


async def test_an_episode_page_shows_its_graph_trace_and_answer(base_url: str, page: Page) -> None:
    await page.goto(base_url)
    async with page.expect_navigation(timeout=WAIT_MS):
        await page.click('#episodes tr.episode[data-problem-id="gsm8k/17"] a')

    nodes = page.locator("#graph svg g.node")
    assert [await node.get_attribute("data-operator") for node in await nodes.all()] == ["Plan", "Programmer"]
    assert await page.locator("#graph svg g.node.ok").count() == 2
    assert await page.locator("#trace tr[data-node-id]").count() == 2
    assert (await page.locator("#answer").inner_text()).strip() == "391"
    assert await page.evaluate(INLINE_SCRIPTS) == 0


async def test_a_failed_episode_shows_test_counts_but_never_hidden_tests(base_url: str, page: Page) -> None:
    await page.goto(f"{base_url}?result=fail")
    async with page.expect_navigation(timeout=WAIT_MS):
        await page.click('#episodes tr.episode[data-problem-id="mbpp/7"] a')

    score = page.locator("#score")
    for name, value in {"passed": "2", "failed": "1", "total": "3"}.items():
        assert (await score.locator(f'[data-detail="{name}"]').inner_text()).strip() == value
    assert "return a - b" in await page.locator("#answer").inner_text()
    assert "hidden_case" not in await page.content()


async def test_the_run_plots_are_shown(base_url: str, page: Page) -> None:
    await page.goto(base_url)
    plot = page.locator('#plots img[src="plots/accuracy.png"]')
    await plot.wait_for(timeout=WAIT_MS)
    await page.wait_for_function("img => img.complete", arg=await plot.element_handle(), timeout=WAIT_MS)
    assert await plot.evaluate("img => img.naturalWidth") == 2
