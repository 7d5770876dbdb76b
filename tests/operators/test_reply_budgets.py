"""Per-operator reply budgets: every executor call is capped by its operator's spec, never raised above the
backend's configured maximum."""

from __future__ import annotations

from operators.backends.base import ChatMessage, ChatRequest, SamplingParams, effective_sampling
from operators.backends.scripted import ScriptedBackend
from operators.base import OperatorInput, OperatorRuntime
from operators.registry import default_registry


def test_effective_sampling_caps_but_never_raises() -> None:
    defaults = SamplingParams(max_tokens=500, temperature=0.3)
    message = [ChatMessage(role="user", content="hi")]
    assert effective_sampling(ChatRequest(messages=message), defaults) == defaults
    capped = effective_sampling(ChatRequest(messages=message, max_tokens=100), defaults)
    assert capped.max_tokens == 100 and capped.temperature == 0.3
    assert effective_sampling(ChatRequest(messages=message, max_tokens=900), defaults).max_tokens == 500


async def test_operator_calls_carry_their_spec_budget() -> None:
    registry = default_registry()
    backend = ScriptedBackend(default="<steps>\n1. Multiply.\n</steps>")
    plan = registry.implementation("Plan")()
    await plan.run(OperatorInput(problem="What is 6*7?", task_type="math"), OperatorRuntime(llm=backend))
    assert backend.requests and all(r.max_tokens == registry.spec("Plan").reply_tokens == 256 for r in backend.requests)
    assert registry.spec("Format").reply_tokens is not None and registry.spec("Format").reply_tokens < 256
