"""Policy generation over an OpenAI-compatible chat endpoint (vLLM, Ollama, OpenAI...), keeping token ids and
log-probs when the server returns them (vLLM: `return_token_ids`, `logprobs`), so training never re-tokenises."""

from __future__ import annotations

from typing import Any

from openai import AsyncOpenAI
from pydantic import BaseModel


class PolicySampling(BaseModel):
    temperature: float = 0.6
    top_p: float = 0.95
    top_k: int | None = 20  # vLLM extension; dropped for servers that do not know it when None
    max_action_tokens: int = 512
    max_prompt_tokens: int = 256
    enable_thinking: bool | None = None  # Qwen3 chat template switch; None = do not send it
    seed: int | None = None
    request_token_ids: bool = True  # ask vLLM for prompt/completion token ids and log-probs
    # Small models rarely start a tag on their own: an action prefix (e.g. "<action>") is sent as the start of
    # the assistant message and continued by the model (vLLM `continue_final_message`); it belongs to the prompt
    # tokens, not to the policy's. Only action turns are primed.
    action_prefix: str | None = None
    stop: list[str] | None = None  # e.g. ["\n"]: an action is one line


class Generation(BaseModel):
    text: str  # the content; reasoning the server split off is prepended as a <think> block
    reasoning: str | None = None
    prompt_token_ids: list[int] | None = None
    completion_token_ids: list[int] | None = None
    completion_logprobs: list[float] | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    finish_reason: str | None = None


async def generate(
    client: AsyncOpenAI,
    model: str,
    messages: list[dict[str, str]],
    sampling: PolicySampling,
    *,
    max_tokens: int,
    thinking: bool | None,
    prefix: str | None = None,
) -> Generation:
    """One chat completion; with `prefix`, the model continues an assistant message starting with it and the
    returned text includes the prefix."""
    extra: dict[str, Any] = {}
    if prefix:
        messages = [*messages, {"role": "assistant", "content": prefix}]
        extra.update({"continue_final_message": True, "add_generation_prompt": False})
    if sampling.top_k is not None:
        extra["top_k"] = sampling.top_k
    if thinking is not None:
        extra["chat_template_kwargs"] = {"enable_thinking": thinking}
    if sampling.request_token_ids:
        extra["return_token_ids"] = True
    response = await client.chat.completions.create(
        model=model,
        messages=messages,  # type: ignore[arg-type]
        max_tokens=max_tokens,
        temperature=sampling.temperature,
        top_p=sampling.top_p,
        seed=sampling.seed,
        stop=sampling.stop,
        logprobs=sampling.request_token_ids,
        extra_body=extra or None,
    )
    choice = response.choices[0]
    message = choice.message
    content = message.content or ""
    reasoning = getattr(message, "reasoning_content", None) or getattr(message, "reasoning", None)
    logprobs = None
    if choice.logprobs is not None and choice.logprobs.content:
        logprobs = [float(item.logprob) for item in choice.logprobs.content]
    usage = response.usage
    return Generation(
        text=f"{prefix or ''}{content}",
        reasoning=reasoning,
        prompt_token_ids=getattr(response, "prompt_token_ids", None),
        completion_token_ids=getattr(choice, "token_ids", None),
        completion_logprobs=logprobs,
        prompt_tokens=usage.prompt_tokens if usage else 0,
        completion_tokens=usage.completion_tokens if usage else 0,
        finish_reason=choice.finish_reason,
    )
