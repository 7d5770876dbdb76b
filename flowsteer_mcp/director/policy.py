"""The `policy` director: an LLM (FlowSteer-8b or any chat model) drives the canvas through `act`.

Per round it builds the observation with the shared ObservationBuilder, samples one turn, strips its reasoning
(`operators.parsing.strip_think`), re-asks once (thinking off) when an action turn contains no action, samples
instead when a greedy turn repeats the turn the canvas just refused, and sends the text to `act`. A turn that
never closes its `<think>` block is sent as is and the canvas rejects it as an invalid turn (the canvas applies
the same rule, so the policy cannot slip an action past it). Every turn is recorded with its prompt, completion,
token ids and log-probs (when the server returns them) and the feedback.
"""

from __future__ import annotations

import re
import time
from typing import Any

from mcp import Client
from openai import AsyncOpenAI

from flowsteer_mcp.canvas.observation import ObservationBuilder
from flowsteer_mcp.canvas.options import CanvasOptions, TaskSpec
from flowsteer_mcp.canvas.step import StateView
from flowsteer_mcp.director.episode import EpisodeResult, TurnRecord
from flowsteer_mcp.director.finalize import add_usage, collect
from flowsteer_mcp.director.generation import Generation, PolicySampling, generate
from flowsteer_mcp.director.link import CanvasCallError, CanvasCalls, CanvasLink
from operators.parsing import UnclosedThinkError, strip_think
from operators.registry import OperatorRegistry, default_registry

REASK = "Output exactly one action now, as tags (for example <action>add</action><operator>Custom</operator>), with no thinking."
REASK_MAX_TOKENS = 128  # the re-ask wants one action tag, never a long answer
# A greedy director whose turn repeats the one the canvas just refused samples that turn at this temperature (the
# rollouts' temperature in the training configs): a refusal leaves the canvas as it was, so greedy decoding would
# write the same refused turn in every remaining round.
RESAMPLE_TEMPERATURE = 1.0
_ACTION_TAG = re.compile(r"<action>|\[action\]", re.IGNORECASE)


def visible_text(generation: Generation) -> str | None:
    """The turn text without its reasoning; None when a think block was never closed (an invalid turn)."""
    try:
        return strip_think(generation.text)
    except UnclosedThinkError:
        return None


def has_action(text: str | None) -> bool:
    return text is not None and bool(_ACTION_TAG.search(text))


class PolicyDirector:
    name = "policy"

    def __init__(
        self,
        client: AsyncOpenAI,
        model: str,
        *,
        sampling: PolicySampling | None = None,
        canvas_options: dict[str, Any] | None = None,
        observer: ObservationBuilder | None = None,
        registry: OperatorRegistry | None = None,
        reask: bool = True,
        reask_max_tokens: int = REASK_MAX_TOKENS,
        transcript: bool = False,
        own_system_prompt: bool = False,
    ) -> None:
        self.client = client
        self.model = model
        self.sampling = sampling or PolicySampling()
        self.canvas_options = canvas_options or {}
        self.observer = observer or ObservationBuilder.default()
        self.registry = registry or default_registry()
        self.reask = reask
        if reask_max_tokens < 1:
            raise ValueError(f"reask_max_tokens must be at least 1, got {reask_max_tokens}")
        self.reask_max_tokens = reask_max_tokens
        # transcript=True is the `history` observation mode: every turn sees the whole conversation so far
        # (system, each observation, each of its own replies) instead of system + the current observation.
        self.transcript = transcript
        # own_system_prompt=True renders the system prompt from `observer` (the template the policy was trained on)
        # instead of taking the server's, so it plays the same game on any server (a shipped director's card).
        self.own_system_prompt = own_system_prompt

    @classmethod
    def from_url(cls, base_url: str, model: str, *, api_key: str | None = None, **kwargs: Any) -> PolicyDirector:
        return cls(AsyncOpenAI(base_url=base_url, api_key=api_key or "not-needed", max_retries=2), model, **kwargs)

    async def _turn(self, messages: list[dict[str, str]], *, prompt_turn: bool) -> Generation:
        return await generate(
            self.client,
            self.model,
            messages,
            self.sampling,
            max_tokens=self.sampling.max_prompt_tokens if prompt_turn else self.sampling.max_action_tokens,
            thinking=False
            if prompt_turn and self.sampling.enable_thinking is not None
            else self.sampling.enable_thinking,
            prefix=None if prompt_turn else self.sampling.action_prefix,
        )

    async def run(self, task: TaskSpec, client: Client) -> EpisodeResult:
        return await self.drive(task, CanvasLink(client))

    async def drive(self, task: TaskSpec, link: CanvasCalls) -> EpisodeResult:
        """One episode through `link`: an MCP client's (`run`) or a server's own canvas, in process."""
        started = time.monotonic()
        result = EpisodeResult(director=self.name, task=task)
        try:
            created = await link.create(task, self.canvas_options or None)
            workflow_id = created["workflow_id"]
            system = self._system_prompt() if self.own_system_prompt else created["system_prompt"]
            state = StateView.model_validate(created["state"])
            feedback: str | None = None
            history: list[dict[str, str]] | None = [{"role": "system", "content": system}] if self.transcript else None
            done = False
            refused: str | None = None
            while not done:
                record, step = await self._round(
                    link, workflow_id, task, state, system, feedback, history, refused=refused
                )
                refused = record.sent if record.kind == "action" and not record.ok else None
                result.records.append(record)
                result = add_usage(result, step)
                result.policy_tokens += record.policy_prompt_tokens + record.policy_completion_tokens
                feedback = step["feedback"]
                state = StateView.model_validate(step["state"])
                done = bool(step["done"])
            result = await collect(link, workflow_id, result)
        except CanvasCallError as error:
            result = result.model_copy(update={"error": str(error)})
        return result.model_copy(update={"wall_s": time.monotonic() - started})

    def _repeats_refusal(self, sent: str | None, refused: str | None) -> bool:
        """Whether a greedy turn is the refused turn of the round before, which the canvas would refuse again."""
        greedy = self.sampling.temperature == 0
        return greedy and sent is not None and refused is not None and sent.strip() == refused.strip()

    def _system_prompt(self) -> str:
        options = CanvasOptions.model_validate(self.canvas_options)  # the finish gate the server will apply
        return self.observer.system_prompt(self.registry, options.finish_policy())

    async def _round(
        self,
        link: CanvasCalls,
        workflow_id: str,
        task: TaskSpec,
        state: StateView,
        system: str,
        feedback: str | None,
        history: list[dict[str, str]] | None = None,
        *,
        refused: str | None = None,
    ) -> tuple[TurnRecord, dict[str, Any]]:
        """One turn. With `history` (transcript mode) the turn's user message and reply are appended to it.
        `refused` is the action turn the canvas refused in the round before, if it did."""
        prompt_turn = state.awaiting_prompt_for is not None
        if prompt_turn:
            user = self.observer.prompt_turn(task, state, self.registry)
        else:
            user = self.observer.turn(task, state, feedback)
        if history is not None:
            messages = [*history, {"role": "user", "content": user}]
        elif prompt_turn:
            messages = [{"role": "user", "content": user}]
        else:
            messages = [{"role": "system", "content": system}, {"role": "user", "content": user}]
        generation = await self._turn(messages, prompt_turn=prompt_turn)
        sent = visible_text(generation)
        reasked = False
        if not prompt_turn and self.reask and not has_action(sent):
            user = f"{user}\n\n{REASK}"
            messages = [*messages[:-1], {"role": "user", "content": user}]
            generation = await generate(
                self.client,
                self.model,
                messages,
                self.sampling,
                max_tokens=self.reask_max_tokens,
                thinking=False if self.sampling.enable_thinking is not None else None,
                prefix=self.sampling.action_prefix,
            )
            sent, reasked = visible_text(generation), True
        resampled = not prompt_turn and self._repeats_refusal(sent, refused)
        if resampled:
            sampled = self.sampling.model_copy(update={"temperature": RESAMPLE_TEMPERATURE, "top_p": 1.0})
            generation = await generate(
                self.client,
                self.model,
                messages,
                sampled,
                max_tokens=self.sampling.max_action_tokens,
                thinking=self.sampling.enable_thinking,
                prefix=self.sampling.action_prefix,
            )
            sent = visible_text(generation)
        if history is not None:  # the re-asked version replaces the first: only what the policy kept is history
            history += [{"role": "user", "content": user}, {"role": "assistant", "content": generation.text}]
        # An unclosed think block (sent is None) goes to `act` as written: the canvas reports it to the policy.
        step = await link.call("act", workflow_id=workflow_id, text=sent or generation.text or " ")
        record = TurnRecord(
            round=step["state"]["round"],
            kind="prompt" if prompt_turn else "action",
            system=None if prompt_turn else system,
            prompt=user,
            completion=generation.text,
            sent=sent if sent is not None else generation.text,
            reasked=reasked,
            resampled=resampled,
            prompt_token_ids=generation.prompt_token_ids,
            completion_token_ids=generation.completion_token_ids,
            completion_logprobs=generation.completion_logprobs,
            ok=bool(step["ok"]),
            feedback=step["feedback"],
            policy_prompt_tokens=generation.prompt_tokens,
            policy_completion_tokens=generation.completion_tokens,
        )
        return record, step
