"""Serve a prepared local model over a minimal OpenAI-compatible chat API (`flowsteer models serve NAME`).

For running a small policy (or executor) out of process on machines without vLLM: `/v1/models` and
`/v1/chat/completions` (non-streaming) with usage. Token ids and log-probs are not returned (use vLLM for
training rollouts). Binds to loopback by default.

`--adapter DIR` serves a PEFT LoRA adapter (a trained Flow-Director) merged onto the model, under the served
name. The weights are loaded before the port opens, so a client that sees `/v1/models` answer can be served at
once (the shipped director's launcher waits for exactly that).
"""

from __future__ import annotations

import argparse
import time
import uuid
from pathlib import Path
from typing import Any

import anyio
import uvicorn
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from operators.backends.base import BackendError, ChatMessage, ChatRequest, SamplingParams
from operators.backends.local import LocalBackend


class ChatBody(BaseModel):
    model_config = ConfigDict(extra="ignore")  # OpenAI clients send many optional fields

    model: str
    messages: list[ChatMessage] = Field(min_length=1)
    max_tokens: int | None = Field(default=None, ge=1)
    temperature: float = Field(default=0.0, ge=0.0)
    top_p: float = Field(default=1.0, gt=0.0, le=1.0)
    seed: int | None = None
    stop: str | list[str] | None = None


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": {"message": message, "type": "invalid_request_error"}}, status_code=status)


def build_app(backend: LocalBackend, served_name: str, *, default_max_tokens: int = 512) -> Starlette:
    card: dict[str, Any] = {"id": served_name, "object": "model", "owned_by": "local"}
    if backend.adapter is not None:  # as vLLM describes a LoRA module: the adapter's folder over its base model
        card.update(root=str(backend.adapter), parent=backend.model)

    async def models(_: Request) -> JSONResponse:
        return JSONResponse({"object": "list", "data": [card]})

    async def chat(request: Request) -> JSONResponse:
        try:
            body = ChatBody.model_validate(await request.json())
        except (ValidationError, ValueError) as error:
            return _error(400, f"invalid request: {error}")
        if body.model != served_name:
            return _error(404, f"model {body.model!r} is not served here; available: {served_name}")
        stop = [body.stop] if isinstance(body.stop, str) else list(body.stop or [])
        sampling = SamplingParams(
            temperature=body.temperature,
            top_p=body.top_p,
            max_tokens=body.max_tokens or default_max_tokens,
            seed=body.seed,
            stop=stop,
        )
        try:
            reply = await backend.complete(ChatRequest(messages=body.messages, sampling=sampling))
        except BackendError as error:
            return _error(400, str(error))
        payload: dict[str, Any] = {
            "id": f"chatcmpl-{uuid.uuid4().hex}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": served_name,
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": reply.text},
                    "finish_reason": reply.finish_reason or "stop",
                }
            ],
            "usage": {
                "prompt_tokens": reply.usage.prompt_tokens,
                "completion_tokens": reply.usage.completion_tokens,
                "total_tokens": reply.usage.total_tokens,
            },
        }
        return JSONResponse(payload)

    return Starlette(routes=[Route("/v1/models", models), Route("/v1/chat/completions", chat, methods=["POST"])])


def cli_serve(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="flowsteer models serve", description=__doc__.splitlines()[0])
    parser.add_argument("name", help="a prepared model name or a local HF model folder")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8011)
    parser.add_argument("--served-name", help="model name clients use (default: NAME)")
    parser.add_argument("--dtype", default="auto")
    parser.add_argument("--adapter", type=Path, help="a PEFT LoRA adapter folder to serve on top of the model")
    parser.add_argument("--num-threads", type=int, help="torch intra-op threads (default: torch's)")
    args = parser.parse_args(argv)
    backend = LocalBackend(args.name, dtype=args.dtype, adapter=args.adapter, num_threads=args.num_threads)
    anyio.run(backend.load)  # before the port opens: an answering server is a loaded one
    app = build_app(backend, args.served_name or args.name)
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning")
    return 0


if __name__ == "__main__":
    import sys

    raise SystemExit(cli_serve(sys.argv[1:]))
