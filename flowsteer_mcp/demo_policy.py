"""The demo with the shipped Flow-Director at the wheel (`make demo DIRECTOR=policy`).

Why its own module: the demo's fixed steps show the canvas; this variant shows the trained policy using it. The
director is served for the one episode (by the `DirectorServing` function the `flowsteer` command passes in),
plays the task through the same stdio MCP client, and each of its turns is printed with the canvas's answer.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from mcp import Client

from flowsteer_mcp.canvas.options import TaskSpec
from flowsteer_mcp.director.card import ShippedDirector
from flowsteer_mcp.director.served import DirectorServing, ServeMode


@dataclass(frozen=True)
class DemoPolicy:
    shipped: ShippedDirector
    mode: ServeMode
    serve: DirectorServing


def _flat(text: str, limit: int) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


async def policy_episode(
    client: Client, task: dict[str, Any], policy: DemoPolicy, totals: dict[str, int], options: dict[str, Any]
) -> str:
    """Serve the director, let it build the workflow for `task`, print its turns; returns the workflow's id."""
    from openai import AsyncOpenAI

    meta = task.get("meta", {})
    spec = TaskSpec(
        problem=task["problem"],
        task_type="code",
        entry_point=meta.get("entry_point"),
        public_tests=meta.get("public_tests"),
    )
    card = policy.shipped.card
    async with policy.serve(policy.shipped, policy.mode) as served:
        print(
            f"director: {card.name} (LoRA on {card.base_model}, {card.steps} steps), served by {served.via}", flush=True
        )
        # it plays the game on its card; the demo's own options fill in what the card leaves unset
        async with AsyncOpenAI(base_url=served.url, api_key="not-needed", max_retries=2) as policy_client:
            director = policy.shipped.director(policy_client, served.model)
            director.canvas_options = {**options, **director.canvas_options}
            result = await director.run(spec, client)
    for number, record in enumerate(result.records, start=1):
        print(f"[{number}] {record.kind}: {_flat(record.sent, 90)}", flush=True)
        print(f"    {'ok' if record.ok else 'refused'}: {_flat(record.feedback, 110)}", flush=True)
    totals["llm_calls"] += result.llm_calls
    totals["tokens"] += result.tokens
    if result.workflow_id is None:
        raise RuntimeError(f"the director did not create a workflow: {result.error}")
    if result.error:
        print(f"episode error: {result.error}", flush=True)
    return result.workflow_id
