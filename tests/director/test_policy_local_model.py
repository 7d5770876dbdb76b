"""A real policy model behind a real OpenAI-compatible server drives a full episode through `act`.

The policy is the tiny random-weight Qwen3 (fast, meaningless text): this checks the plumbing end to end,
not the quality. The server is `python -m operators.models.serve` in its own process.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from mcp import Client

from flowsteer_mcp.canvas.observation import ObservationBuilder
from flowsteer_mcp.canvas.options import TaskSpec
from flowsteer_mcp.director.generation import PolicySampling
from flowsteer_mcp.director.policy import PolicyDirector
from flowsteer_mcp.server import build_server
from operators.models import prepare
from tests.support.servers import free_port

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def policy_server(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    home = tmp_path_factory.mktemp("models")
    folder = prepare("tiny-qwen3", home=home)
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "operators.models.serve", str(folder), "--port", str(port), "--served-name", "tiny",
         "--dtype", "float32"],
        cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)}, stderr=subprocess.PIPE,
    )  # fmt: skip
    base_url = f"http://127.0.0.1:{port}/v1"
    try:
        deadline = time.monotonic() + 120
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"policy server exited: {proc.stderr.read().decode() if proc.stderr else ''}")
            try:
                if httpx.get(f"{base_url}/models", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise TimeoutError("policy server did not start")
            time.sleep(0.3)
        yield base_url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


async def test_local_policy_plays_a_whole_episode(policy_server: str) -> None:
    # no executor: this is about the policy <-> canvas plumbing; a short loadable template keeps the prompt
    # within the tiny model's context window
    short = ObservationBuilder(system_template="Design a workflow with these operators:\n$operators\nWrite one action.")
    server = build_server(observer=short)
    director = PolicyDirector.from_url(
        policy_server, "tiny",
        sampling=PolicySampling(temperature=0.0, top_k=None, max_action_tokens=24, max_prompt_tokens=16,
                                request_token_ids=False),
        canvas_options={"max_rounds": 4},
    )  # fmt: skip
    async with Client(server.mcp) as client:
        result = await director.run(TaskSpec(problem="What is 6*7?", task_type="math"), client)
    assert result.error is None
    assert result.turns == 4 and len(result.records) == 4  # every round was a real policy turn sent to act
    assert result.end_reason in ("budget_exhausted", "finished")
    for record in result.records:
        assert record.completion  # the model produced text for every turn
        assert record.feedback.startswith("<feedback>")
        assert record.policy_completion_tokens > 0
    assert result.policy_tokens > 0


def test_unknown_model_is_refused_not_substituted(policy_server: str) -> None:
    response = httpx.post(
        f"{policy_server}/chat/completions", json={"model": "gpt-4", "messages": [{"role": "user", "content": "hi"}]}
    )
    assert response.status_code == 404 and "not served here" in response.text
