"""The live canvas viewer in headless Chromium, against a real `flowsteer-mcp --transport http` process.

Workflows are built the way an assistant builds them (MCP over streamable HTTP, `act` in the policy's tag
dialect); the test then reads what a person would see. Waits have a ceiling (`WAIT_MS`) only to end a hang.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pytest

from tests.browser.conftest import BROWSER_TESTS, WAIT_MS, LiveServer, live_server

if TYPE_CHECKING:
    from playwright.async_api import Page

pytestmark = BROWSER_TESTS

PLAN = "<action>add</action><operator>Plan</operator><prompt>Outline the steps needed to solve it.</prompt>"
PARALLEL = "<action>add</action><structure>parallel</structure><operators>Programmer, Custom</operators>"
CONDITIONAL = "<action>add</action><structure>conditional</structure><condition>Verify</condition><true>Revise</true>"
FORMAT = "<action>add</action><operator>Format</operator><prompt>Return only the final number.</prompt>"
UNKNOWN_OPERATOR = "<action>add</action><operator>Wizard</operator>"
XSS = '<script>window.__xss=1</script><img src=x onerror="window.__xss=2">'
TOKEN = "browser-token-5d1e7"
SECRET_TASK = "A task only a signed-in viewer may read"
REFUSED = "() => (document.getElementById('sign-in-status')?.textContent || '').includes('refused')"
NO_PROMPT_TURNS = {"prompt_turns": False}  # structures apply at once, so each `act` is one visible edit

SVG_NODES = """() => Object.fromEntries(
    [...document.querySelectorAll('#graph svg g.node')].map(g => [g.dataset.nodeId, g.dataset.operator]))"""
INLINE_SCRIPTS = "() => document.querySelectorAll('script:not([src])').length"
# A script element added to the DOM runs unless the CSP forbids inline script (it must).
INJECT_INLINE_SCRIPT = """() => {
    const s = document.createElement('script');
    s.textContent = 'window.__inline = 1';
    document.body.appendChild(s);
    return window.__inline;
}"""


@pytest.fixture(scope="module")
def server() -> Iterator[LiveServer]:
    with live_server() as running:
        yield running


def operator_nodes(detail: dict[str, Any]) -> dict[str, str]:
    """node id -> operator of every operator node, as the MCP server reports the graph."""
    return {node["id"]: node["operator"] for node in detail["state"]["nodes"] if node["kind"] == "operator"}


async def open_live(page: Page, url: str) -> None:
    """Load a viewer page and return once its event stream is connected, so later edits are announced to it."""
    async with page.expect_response(lambda response: response.url.endswith("/view/events"), timeout=WAIT_MS):
        await page.goto(url)


async def test_page_draws_the_graph_built_through_mcp(server: LiveServer, page: Page) -> None:
    async with server.tools() as tools:
        workflow_id = await tools.create("What is 17 * 23?", task_type="math", options=NO_PROMPT_TURNS)
        for text in (PLAN, PARALLEL, CONDITIONAL):
            assert (await tools.act(workflow_id, text))["ok"] is True
        expected = operator_nodes(await tools.detail(workflow_id))

    await page.goto(server.workflow_page(workflow_id))

    assert expected == {
        "node_1": "Plan",
        "node_2_p0": "Programmer",
        "node_2_p1": "Custom",
        "node_3_cond": "Verify",
        "node_3_fail": "Revise",
    }
    assert await page.evaluate(SVG_NODES) == expected
    assert await page.locator("#graph svg.workflow-graph").count() == 1
    assert await page.locator("#graph svg g.stage.parallel").count() == 1
    assert await page.locator("#graph svg g.stage.conditional").count() == 1
    assert "if check fails" in (await page.locator("#graph svg").text_content() or "")
    prompt = await page.locator('#graph svg g.node[data-node-id="node_1"] title').text_content()
    assert prompt is not None and "Outline the steps needed to solve it." in prompt
    assert await page.locator("#history li.step.ok").count() == 3
    assert await page.locator(f'#canvas[data-workflow-id="{workflow_id}"]').count() == 1


async def test_page_follows_a_further_act_without_reloading(server: LiveServer, page: Page) -> None:
    async with server.tools() as tools:
        workflow_id = await tools.create("What is 6 * 7?", task_type="math", options=NO_PROMPT_TURNS)
        await tools.act(workflow_id, PLAN)
        await open_live(page, server.workflow_page(workflow_id))
        assert await page.evaluate("() => document.body.dataset.updates") == "0"
        assert set(await page.evaluate(SVG_NODES)) == {"node_1"}
        await page.evaluate("() => { window.__marker = 1; }")

        assert (await tools.act(workflow_id, FORMAT))["ok"] is True

        await page.wait_for_function("() => Number(document.body.dataset.updates) > 0", timeout=WAIT_MS)
        await page.wait_for_selector('#graph svg g.node[data-node-id="node_2"]', timeout=WAIT_MS)
        assert await page.evaluate(SVG_NODES) == operator_nodes(await tools.detail(workflow_id))
    assert await page.evaluate(SVG_NODES) == {"node_1": "Plan", "node_2": "Format"}
    assert await page.locator("#history li.step").count() == 2
    assert await page.evaluate("() => window.__marker") == 1, "the page was reloaded"


async def test_list_page_follows_a_new_workflow(server: LiveServer, page: Page) -> None:
    await open_live(page, server.view)
    await page.evaluate("() => { window.__marker = 1; }")
    async with server.tools() as tools:
        workflow_id = await tools.create("A workflow created while the list is open")
    await page.wait_for_selector(f'#workflows tr.workflow[data-workflow-id="{workflow_id}"]', timeout=WAIT_MS)
    assert await page.evaluate("() => window.__marker") == 1, "the page was reloaded"


async def test_an_invalid_turn_shows_its_feedback(server: LiveServer, page: Page) -> None:
    async with server.tools() as tools:
        workflow_id = await tools.create("What is 2 + 2?", task_type="math")
        step = await tools.act(workflow_id, UNKNOWN_OPERATOR)
    assert step["ok"] is False and step["error_code"] == "unknown_operator"

    await page.goto(server.workflow_page(workflow_id))

    invalid = page.locator("#history li.step.invalid")
    assert await invalid.count() == 1
    assert await page.locator("#history li.step.ok").count() == 0
    assert "Unknown operator 'Wizard'" in await invalid.locator(".feedback").inner_text()
    assert UNKNOWN_OPERATOR in await invalid.inner_text()  # the turn's text, shown literally


async def test_markup_in_a_task_is_shown_as_text_and_never_runs(server: LiveServer, page: Page) -> None:
    async with server.tools() as tools:
        workflow_id = await tools.create(f"Compute 1 + 1. {XSS}", task_type="math")
        await tools.act(workflow_id, f"<action>add</action><operator>Custom</operator><prompt>{XSS}</prompt>")

    await page.goto(server.view)
    row = page.locator(f'#workflows tr.workflow[data-workflow-id="{workflow_id}"]')
    assert XSS in await row.inner_text()
    assert await row.locator("script, img").count() == 0

    await page.goto(server.workflow_page(workflow_id))
    assert XSS in await page.locator("#task").inner_text()
    assert await page.locator("#canvas script, #canvas img").count() == 0
    assert await page.evaluate("() => window.__xss") is None
    prompts = await page.locator("#graph svg g.node title").all_text_contents()
    assert any(XSS in prompt for prompt in prompts)


@pytest.mark.parametrize("path", ["", "w/{workflow_id}"])
async def test_content_security_policy_allows_no_inline_script(server: LiveServer, page: Page, path: str) -> None:
    async with server.tools() as tools:
        workflow_id = await tools.create("What is 3 * 3?")
    response = await page.goto(server.view + path.format(workflow_id=workflow_id))
    assert response is not None and response.ok
    policy = await response.header_value("content-security-policy")
    assert policy is not None and "script-src 'self'" in policy and "unsafe-inline" not in policy
    assert await page.evaluate(INLINE_SCRIPTS) == 0
    assert await page.evaluate(INJECT_INLINE_SCRIPT) is None
    assert await page.locator("script[src]").count() == 1


async def test_token_signs_in_from_the_url_fragment_and_never_stays_in_the_url(page: Page) -> None:
    with live_server(token=TOKEN) as server:
        async with server.tools() as tools:
            workflow_id = await tools.create(SECRET_TASK)
        row = f'#workflows tr.workflow[data-workflow-id="{workflow_id}"]'

        response = await page.goto(server.view)
        assert response is not None and response.status == 401
        assert SECRET_TASK not in await page.content()
        assert await page.locator("#workflows, #canvas").count() == 0
        assert (await page.request.get(f"{server.view}list/fragment")).status == 401

        await page.goto("about:blank")
        await page.goto(f"{server.view}#token={TOKEN}x")
        await page.wait_for_function(REFUSED, timeout=WAIT_MS)
        assert await page.context.cookies() == []

        await page.goto("about:blank")
        await page.goto(f"{server.view}#token={TOKEN}")
        await page.wait_for_selector(row, timeout=WAIT_MS)
        assert SECRET_TASK in await page.locator(row).inner_text()
        assert TOKEN not in page.url and "#" not in page.url
        assert TOKEN not in await page.content()
        [cookie] = await page.context.cookies()
        assert cookie["name"] == "flowsteer_view" and TOKEN not in cookie["value"]
        assert cookie["httpOnly"] is True and cookie["sameSite"] == "Strict"

        await page.goto(server.workflow_page(workflow_id))  # the cookie alone opens a workflow page
        assert SECRET_TASK in await page.locator("#task").inner_text()
