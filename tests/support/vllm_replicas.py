"""A test double for one vLLM replica of the policy: a real loopback HTTP server that can be killed mid-step.

Real vLLM cannot run in unit tests; replica routing, failover and per-replica adapter sync are HTTP behaviour,
so the double serves the routes they use over real sockets, on a free port the OS picks:

  GET  /v1/models                 the base served name and every loaded adapter (with `root`, like vLLM)
  POST /v1/load_lora_adapter      POST /v1/unload_lora_adapter
  POST /v1/chat/completions       `prompt_logprobs` probes (the base model and adapters answer differently),
                                  else whatever `responder(body)` returns (a `StubReply` with a raw body, or a
                                  JSON-able dict), or a plain completion

Every answer closes its connection, so a killed double refuses the next request instead of answering on a
kept-alive one. `kill()` (or `die_after=n` chat calls) stops it: calls in progress and the next call are cut
without an answer, as when a server process dies. `gate` (cleared) holds chat calls until it is set.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any

from tests.support.openai_stub import StubReply

__all__ = ["VLLMReplicaDouble"]

SAFETY_S = 20.0  # a held call gives up after this, so a broken test fails instead of hanging


class VLLMReplicaDouble:
    def __init__(
        self,
        *,
        served_name: str = "policy",
        responder: Callable[[dict[str, Any]], Any] | None = None,
        die_after: int | None = None,
        port: int = 0,  # 0: a free one; a killed double's port: the same replica started again
    ) -> None:
        self.served_name = served_name
        self.responder = responder
        self.die_after = die_after
        self.adapters: dict[str, str] = {}  # name -> path
        self.paths: list[str] = []  # every request's path, in order
        self.chat_models: list[str] = []  # the `model` of every answered chat call
        self.in_flight = 0
        self.max_in_flight = 0
        self.gate = threading.Event()
        self.gate.set()
        self.dead = threading.Event()
        self.entered = threading.Event()  # set once a chat call has arrived (held calls included)
        self._lock = threading.Lock()
        self._chat_calls = 0
        self._server = ThreadingHTTPServer(("127.0.0.1", port), _handler(self))
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()

    @property
    def base_url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def count(self, path: str) -> int:
        return sum(p == path for p in self.paths)

    def kill(self) -> None:
        """Stop listening and cut every call in progress: the replica is gone."""
        if self.dead.is_set():
            return
        self.dead.set()
        self.gate.set()
        threading.Thread(target=self._stop, daemon=True).start()

    def close(self) -> None:
        self.kill()
        self._thread.join(timeout=5)

    def __enter__(self) -> VLLMReplicaDouble:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.close()

    def _stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    # -- routes -------------------------------------------------------------------------------------------------

    def _models(self) -> dict[str, Any]:
        cards = [{"id": self.served_name, "object": "model", "root": "/models/base", "parent": None}]
        cards += [
            {"id": name, "object": "model", "root": path, "parent": self.served_name}
            for name, path in self.adapters.items()
        ]
        return {"object": "list", "data": cards}

    def _load(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        name = body["lora_name"]
        if name in self.adapters:
            return 400, {"error": {"message": f"The lora adapter '{name}' has already been loaded."}}
        self.adapters[name] = body["lora_path"]
        return 200, {"message": f"Success: LoRA adapter '{name}' added successfully."}

    def _unload(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        if self.adapters.pop(body["lora_name"], None) is None:
            return 404, {"error": {"message": f"The lora adapter '{body['lora_name']}' cannot be found."}}
        return 200, {"message": "Success"}

    def _chat(self, body: dict[str, Any]) -> bytes | None:
        """The answer's body, or None when the replica dies on this call (the connection is cut)."""
        with self._lock:
            self._chat_calls += 1
            dies = self.die_after is not None and self._chat_calls > self.die_after
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
        self.entered.set()
        try:
            if dies:
                self.kill()
                return None
            self.gate.wait(SAFETY_S)
            if self.dead.is_set():
                return None
            model = str(body.get("model"))
            if model != self.served_name and model not in self.adapters:
                return json.dumps({"error": {"message": f"The model `{model}` does not exist."}}).encode()
            self.chat_models.append(model)
            if body.get("prompt_logprobs") is not None:
                value = -1.0 if model == self.served_name else -0.5
                payload: Any = {"choices": [], "prompt_logprobs": [None, {"7": {"logprob": value}}, {"8": value}]}
                return json.dumps(payload).encode()
            reply = self.responder(body) if self.responder is not None else None
            if isinstance(reply, StubReply) and reply.body is not None:
                return reply.body
            if isinstance(reply, dict):
                return json.dumps(reply).encode()
            return json.dumps(_completion(model, "ok")).encode()
        finally:
            with self._lock:
                self.in_flight -= 1


def _completion(model: str, content: str) -> dict[str, Any]:
    return {
        "id": "chatcmpl-replica",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
    }


def _handler(double: VLLMReplicaDouble) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:
            double.paths.append(self.path)
            if self.path.rstrip("/") == "/v1/models":
                self._send(200, json.dumps(double._models()).encode())
            else:
                self._send(404, b'{"detail": "Not Found"}')

        def do_POST(self) -> None:
            raw = self.rfile.read(int(self.headers.get("content-length") or 0))
            body = json.loads(raw) if raw else {}
            double.paths.append(self.path)
            route = self.path.rstrip("/")
            if double.dead.is_set():
                self.close_connection = True  # cut without an answer
                return
            if route == "/v1/chat/completions":
                answer = double._chat(body)
                if answer is None:
                    self.close_connection = True
                    return
                status = 404 if b'"error"' in answer[:20] else 200
                self._send(status, answer)
            elif route == "/v1/load_lora_adapter":
                self._send(*_encoded(double._load(body)))
            elif route == "/v1/unload_lora_adapter":
                self._send(*_encoded(double._unload(body)))
            else:
                self._send(404, b'{"detail": "Not Found"}')

        def _send(self, status: int, body: bytes) -> None:
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(body)))
            self.send_header("connection", "close")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    return Handler


def _encoded(result: tuple[int, dict[str, Any]]) -> tuple[int, bytes]:
    return result[0], json.dumps(result[1]).encode()
