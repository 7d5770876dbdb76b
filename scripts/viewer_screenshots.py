"""Screenshots of the viewer for the README, taken in headless Chromium from the project's own commands.

Why a script and not hand-made pictures: the README must show what the code really draws, and anyone can
retake them after a change. Everything runs offline on a scripted executor (canned replies, no model):

- live canvas: `flowsteer-mcp --transport http` with that executor; a workflow is built through MCP with `act`
  (as an assistant or a director builds it, one invalid turn included), so the page shows the graph, the
  history and the last run's per-node trace;
- episode browser: a small `flowsteer eval` run (three directors on four toy sums) opened with `flowsteer view`.

    .venv/bin/python scripts/viewer_screenshots.py            # writes docs/viewer/*.png

Needs Debian's `chromium` (`make system-deps`) and the `dev` extra (playwright); no browser is downloaded.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))  # tests.support.servers: the same server-process helpers the tests use

from playwright.async_api import Browser, Page, ViewportSize, async_playwright  # noqa: E402

from tests.support.servers import (  # noqa: E402
    HttpServerProcess,
    ToolCaller,
    flowsteer_mcp_script,
    free_port,
    http_client,
)

# One canned reply that every operator of the pictured workflows can read (a plan, a verdict, a program).
CANNED_REPLY = """<steps>1. Multiply 17 by 23 in Python.</steps>
<independent_answer>391</independent_answer>
<verdict>pass</verdict>
<confidence>0.9</confidence>
```python
def solve():
    return 17 * 23
```
Final answer: 391"""
SCRIPTED_EXECUTOR = f"""
[executor]
model = "script"

[models.script]
backend = "scripted"
default_reply = {json.dumps(CANNED_REPLY)}
"""
TOY_PROBLEMS = [
    ("toy/1", "What is 17 * 23?", "391"),
    ("toy/2", "What is 19 * 21?", "399"),
    ("toy/3", "What is 400 - 9?", "391"),
    ("toy/4", "What is 12 * 12?", "144"),
]
EVAL_DIRECTORS = ("direct", "template", "template:pot4-vote")
# The turns of the pictured workflow: the math library's classic shape, one edit per turn, and one bad turn.
TURNS = (
    "<action>add</action><operator>Plan</operator><prompt>Outline how to compute the product.</prompt>",
    "<action>add</action><structure>parallel</structure><operators>Programmer, Custom</operators>",
    "<action>add</action><operator>Wizard</operator>",
    "<action>add</action><operator>ScEnsemble</operator><prompt>Pick the answer most candidates agree on.</prompt>",
    "<action>add</action><structure>conditional</structure><condition>Verify</condition><true>Revise</true>",
    "<action>add</action><operator>Format</operator><prompt>Return only the final number.</prompt>",
)
VIEWPORT: ViewportSize = {"width": 1400, "height": 1000}


def chromium() -> str:
    path = shutil.which("chromium")
    if path is None:
        raise SystemExit("no `chromium` on PATH: run `make system-deps` (or apt-get install chromium)")
    return path


async def screenshot(browser: Browser, url: str, target: Path, *, ready: str, full_page: bool) -> None:
    """A picture of `url` (the first screen, or `full_page`) once `ready` (a selector) is there."""
    page: Page = await browser.new_page(viewport=VIEWPORT)
    try:
        await page.goto(url)
        await page.wait_for_selector(ready)
        target.parent.mkdir(parents=True, exist_ok=True)
        await page.screenshot(path=str(target), full_page=full_page)
    finally:
        await page.close()
    print(f"wrote {target}")


async def live_canvas(browser: Browser, work: Path, target: Path) -> None:
    config = work / "executor.toml"
    port = free_port()
    command = [
        str(flowsteer_mcp_script()),
        *("--transport", "http", "--host", "127.0.0.1", "--port", str(port)),
        *("--config", str(config), "--log-level", "WARNING"),
    ]
    with HttpServerProcess(command=command, port=port) as server:
        async with http_client(server.url) as client:
            tools = ToolCaller(client)
            workflow_id = await tools.create("What is 17 * 23?", task_type="math", options={"prompt_turns": False})
            for turn in TURNS:
                await tools.act(workflow_id, turn)
        await screenshot(
            browser, f"http://127.0.0.1:{port}/view/w/{workflow_id}", target, ready="#graph svg", full_page=False
        )


def evaluation_run(work: Path) -> Path:
    """A real `flowsteer eval` run folder (journal, report) over the toy problems."""
    data = work / "toy.jsonl"
    records = [
        {"id": pid, "source": "gsm8k", "problem_type": "math", "problem": problem, "ground_truth": gold}
        for pid, problem, gold in TOY_PROBLEMS
    ]
    data.write_text("".join(json.dumps(record) + "\n" for record in records), encoding="utf-8")
    out = work / "example-run"
    directors = [arg for name in EVAL_DIRECTORS for arg in ("--director", name)]
    flowsteer = flowsteer_mcp_script().with_name("flowsteer")
    command = [str(flowsteer), "eval", "--data", str(data), "--config", str(work / "executor.toml"), *directors]
    command += ["--out", str(out), "--no-progress", "--log-level", "WARNING"]
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
    return out


async def episode_browser(browser: Browser, work: Path, target: Path) -> None:
    run_dir = evaluation_run(work)
    port = free_port()
    command = [str(flowsteer_mcp_script().with_name("flowsteer")), "view", str(run_dir), "--port", str(port)]
    with HttpServerProcess(command=command, port=port):
        await screenshot(browser, f"http://127.0.0.1:{port}/", target, ready="#episodes", full_page=True)


async def main(out: Path) -> None:
    with tempfile.TemporaryDirectory(prefix="viewer-screenshots-") as folder:
        work = Path(folder)
        (work / "executor.toml").write_text(SCRIPTED_EXECUTOR, encoding="utf-8")
        async with async_playwright() as playwright:
            browser = await playwright.chromium.launch(
                executable_path=chromium(), headless=True, chromium_sandbox=os.geteuid() != 0
            )
            try:
                await live_canvas(browser, work, out / "live-canvas.png")
                await episode_browser(browser, work, out / "episode-browser.png")
            finally:
                await browser.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "docs" / "viewer", help="folder for the PNGs")
    asyncio.run(main(parser.parse_args().out))
