"""A real OpenAI-compatible HTTP server for tests: loopback only, programmable, recording.

Why a real server rather than a mocked transport: the `openai` backend's retry, timeout and concurrency
behaviour lives partly in the HTTP stack, so tests exercise it over real sockets. The server runs in a
background thread on a free port chosen by the OS; it serves `POST /v1/chat/completions` and
`GET /v1/models`.

Behaviour is scripted with `StubReply` values: queued replies are consumed one per chat call, then the
default reply answers. A reply can carry an HTTP error status, an injected delay (a "hang" longer than the
client's timeout simulates a timeout), a raw garbage body, a different model name, `reasoning_content`, or
explicit token counts. Every request is recorded (path, headers, JSON body) and the peak number of
concurrent chat calls is tracked.

    with OpenAIStub(replies=[StubReply.error(429)], latency_s=0.01) as stub:
        backend = OpenAICompatBackend(base_url=stub.base_url, model="stub-model", ...)
"""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any

__all__ = ["OpenAIStub", "RecordedRequest", "StubReply"]


@dataclass(frozen=True)
class StubReply:
    """One scripted answer. Defaults give a well-formed completion echoing the last user message."""

    content: str | None = None  # None: "echo: <last user message>"
    reasoning: str | None = None  # sent as `message.reasoning_content`
    model: str | None = None  # None: echo the requested model
    status: int = 200
    body: bytes | None = None  # raw body sent verbatim instead of a completion (garbage tests)
    content_type: str = "application/json"
    delay_s: float = 0.0  # added to the stub's base latency
    trickle_s: float = 0.0  # pause between body chunks: each read is quick, the whole reply is slow
    headers: Mapping[str, str] = field(default_factory=dict)
    prompt_tokens: int | None = None  # None: word count of the request messages
    completion_tokens: int | None = None  # None: word count of the content
    finish_reason: str = "stop"
    choices: tuple[str, ...] | None = None  # contents of the choices of an `n` request (None: numbered copies)

    @classmethod
    def error(cls, status: int, *, retry_after_s: float | None = None, message: str = "") -> StubReply:
        headers = {"retry-after": str(retry_after_s)} if retry_after_s is not None else {}
        text = message or f"stub error {status}"
        body = json.dumps({"error": {"message": text, "type": "stub_error", "code": status}}).encode()
        return cls(status=status, body=body, headers=headers)

    @classmethod
    def garbage(
        cls, body: bytes = b'{"choices": [ this is not json', content_type: str = "application/json"
    ) -> StubReply:
        """A 200 answer whose body is `body` verbatim (broken JSON by default)."""
        return cls(body=body, content_type=content_type)

    @classmethod
    def hang(cls, seconds: float) -> StubReply:
        """Answer normally, but only after `seconds` (longer than the client timeout: a timeout)."""
        return cls(delay_s=seconds)

    @classmethod
    def trickle(cls, pause_s: float) -> StubReply:
        """Send headers at once, then the body in small chunks `pause_s` apart."""
        return cls(trickle_s=pause_s)


@dataclass(frozen=True)
class RecordedRequest:
    method: str
    path: str
    headers: dict[str, str]  # lower-cased names
    body: Any  # parsed JSON, or the raw text when it was not JSON


Responder = Callable[[dict[str, Any]], StubReply]


class OpenAIStub:
    """OpenAI-compatible chat server on 127.0.0.1, started by `start()` or `with`, stopped by `close()`.

    `served_models`: when given, chat calls naming another model get a 404 like a real server.
    `model_details`: extra `GET /models` fields per served name, e.g. vLLM's `root` and `parent` of an adapter.
    `api_key`: when given, requests without `Authorization: Bearer <api_key>` get a 401.
    `responder`: computes the reply from the request body when no queued reply is left.
    """

    def __init__(
        self,
        replies: Iterable[StubReply] = (),
        *,
        default: StubReply | None = None,
        responder: Responder | None = None,
        latency_s: float = 0.0,
        served_models: Iterable[str] | None = None,
        model_details: Mapping[str, Mapping[str, str]] | None = None,
        api_key: str | None = None,
        port: int = 0,
    ) -> None:
        self._port = port  # 0: the OS picks a free one; a given port lets a test bring a "dead" server back
        self._queue: deque[StubReply] = deque(replies)
        self._default = default or StubReply()
        self._responder = responder
        self.latency_s = latency_s
        self.served_models = set(served_models) if served_models is not None else None
        self.model_details = dict(model_details or {})
        self._api_key = api_key
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._requests: list[RecordedRequest] = []
        self._in_flight = 0
        self._max_in_flight = 0
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- programming -------------------------------------------------------------------------------
    def enqueue(self, *replies: StubReply) -> None:
        with self._lock:
            self._queue.extend(replies)

    def fail_next(self, count: int, status: int = 429) -> None:
        """Make the next `count` chat calls fail with `status` (429, 500, ...)."""
        self.enqueue(*(StubReply.error(status) for _ in range(count)))

    def hang_next(self, count: int, seconds: float) -> None:
        """Delay the next `count` chat calls by `seconds` (past the client timeout: timeouts)."""
        self.enqueue(*(StubReply.hang(seconds) for _ in range(count)))

    # -- observation -------------------------------------------------------------------------------
    @property
    def requests(self) -> list[RecordedRequest]:
        with self._lock:
            return list(self._requests)

    @property
    def chat_requests(self) -> list[RecordedRequest]:
        return [r for r in self.requests if r.path.endswith("/chat/completions")]

    @property
    def max_in_flight(self) -> int:
        with self._lock:
            return self._max_in_flight

    @property
    def port(self) -> int:
        if self._server is None:
            raise RuntimeError("OpenAIStub is not running; call start() or use it as a context manager")
        return int(self._server.server_address[1])

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    # -- lifecycle ---------------------------------------------------------------------------------
    def start(self) -> OpenAIStub:
        if self._server is not None:
            return self
        self._stopping.clear()
        server = ThreadingHTTPServer(("127.0.0.1", self._port), _make_handler(self))
        server.daemon_threads = True
        self._server = server
        self._thread = threading.Thread(
            target=server.serve_forever, kwargs={"poll_interval": 0.05}, name="openai-stub", daemon=True
        )
        self._thread.start()
        return self

    def close(self) -> None:
        if self._server is None:
            return
        self._stopping.set()  # wakes handlers sleeping in an injected delay
        self._server.shutdown()
        self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._server = None
        self._thread = None

    def __enter__(self) -> OpenAIStub:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    # -- request handling (called from server threads) ---------------------------------------------
    def _record(self, request: RecordedRequest) -> None:
        with self._lock:
            self._requests.append(request)

    def _next_reply(self, body: dict[str, Any]) -> StubReply:
        with self._lock:
            if self._queue:
                return self._queue.popleft()
        if self._responder is not None:
            return self._responder(body)
        return self._default

    def _enter_call(self) -> None:
        with self._lock:
            self._in_flight += 1
            self._max_in_flight = max(self._max_in_flight, self._in_flight)

    def _leave_call(self) -> None:
        with self._lock:
            self._in_flight -= 1

    def _sleep(self, seconds: float) -> None:
        if seconds > 0:
            self._stopping.wait(seconds)

    def _authorised(self, headers: Mapping[str, str]) -> bool:
        return self._api_key is None or headers.get("authorization") == f"Bearer {self._api_key}"

    def _chat(self, body: Any) -> tuple[int, bytes, str, Mapping[str, str], float]:
        if not isinstance(body, dict) or not isinstance(body.get("messages"), list):
            return (*_error_body(400, "request body must be a JSON object with `messages`"), 0.0)
        requested = str(body.get("model", ""))
        if self.served_models is not None and requested not in self.served_models:
            return (*_error_body(404, f"The model `{requested}` does not exist."), 0.0)
        reply = self._next_reply(body)
        self._sleep(self.latency_s + reply.delay_s)
        if reply.body is not None or reply.status != 200:
            raw = reply.body if reply.body is not None else b""
            return reply.status, raw, reply.content_type, reply.headers, reply.trickle_s
        completion = json.dumps(_completion(body, reply)).encode()
        return 200, completion, "application/json", reply.headers, reply.trickle_s

    def _models(self) -> tuple[int, bytes, str, Mapping[str, str]]:
        names = sorted(self.served_models or {"stub-model"})
        data = [
            {"id": n, "object": "model", "created": 0, "owned_by": "stub", **self.model_details.get(n, {})}
            for n in names
        ]
        return 200, json.dumps({"object": "list", "data": data}).encode(), "application/json", {}


def _completion(body: dict[str, Any], reply: StubReply) -> dict[str, Any]:
    messages = [m for m in body["messages"] if isinstance(m, dict)]
    user_texts = [str(m.get("content", "")) for m in messages if m.get("role") == "user"]
    content = reply.content if reply.content is not None else f"echo: {user_texts[-1] if user_texts else ''}"
    prompt_tokens = reply.prompt_tokens
    if prompt_tokens is None:
        prompt_tokens = sum(len(str(m.get("content", "")).split()) for m in messages)
    completion_tokens = reply.completion_tokens
    if completion_tokens is None:
        completion_tokens = len(content.split())
    requested = body.get("n")
    count = requested if isinstance(requested, int) and requested > 1 else 1
    contents = _choice_contents(content, reply, count)
    if count > 1 and reply.completion_tokens is None:
        completion_tokens = sum(len(text.split()) for text in contents)
    choices = []
    for index, text in enumerate(contents):
        message: dict[str, Any] = {"role": "assistant", "content": text}
        if reply.reasoning is not None:
            message["reasoning_content"] = reply.reasoning
        choices.append({"index": index, "message": message, "finish_reason": reply.finish_reason})
    return {
        "id": f"chatcmpl-stub-{time.monotonic_ns()}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": reply.model if reply.model is not None else body.get("model", ""),
        "choices": choices,
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
    }


def _choice_contents(content: str, reply: StubReply, count: int) -> list[str]:
    """The texts of `count` choices (`n` in the request): the scripted ones, else numbered copies."""
    if reply.choices is not None:
        return [reply.choices[i % len(reply.choices)] for i in range(count)]
    if count == 1:
        return [content]
    return [f"{content} (choice {i})" for i in range(count)]


def _error_body(status: int, message: str) -> tuple[int, bytes, str, Mapping[str, str]]:
    body = json.dumps({"error": {"message": message, "type": "invalid_request_error", "code": status}})
    return status, body.encode(), "application/json", {}


def _make_handler(stub: OpenAIStub) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, like real servers

        def do_POST(self) -> None:
            raw = self.rfile.read(int(self.headers.get("content-length") or 0))
            try:
                body: Any = json.loads(raw) if raw else None
            except ValueError:
                body = raw.decode("utf-8", "replace")
            headers = {k.lower(): v for k, v in self.headers.items()}
            stub._record(RecordedRequest("POST", self.path, headers, body))
            if not stub._authorised(headers):
                self._send(*_error_body(401, "invalid api key"))
            elif self.path.rstrip("/").endswith("/chat/completions"):
                stub._enter_call()
                try:
                    self._send(*stub._chat(body))
                finally:
                    stub._leave_call()
            else:
                self._send(*_error_body(404, f"no route {self.path}"))

        def do_GET(self) -> None:
            headers = {k.lower(): v for k, v in self.headers.items()}
            stub._record(RecordedRequest("GET", self.path, headers, None))
            if self.path.rstrip("/").endswith("/models"):
                self._send(*stub._models())
            else:
                self._send(*_error_body(404, f"no route {self.path}"))

        def _send(
            self,
            status: int,
            body: bytes,
            content_type: str,
            headers: Mapping[str, str],
            trickle_s: float = 0.0,
        ) -> None:
            try:
                self.send_response(status)
                self.send_header("content-type", content_type)
                self.send_header("content-length", str(len(body)))
                for name, value in headers.items():
                    self.send_header(name, value)
                self.end_headers()
                if trickle_s <= 0:
                    self.wfile.write(body)
                    return
                self.wfile.flush()
                step = max(1, len(body) // 16)
                for start in range(0, len(body), step):
                    self.wfile.write(body[start : start + step])
                    self.wfile.flush()
                    stub._sleep(trickle_s)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client gave up (a timeout test); nothing to answer

        def log_message(self, format: str, *args: Any) -> None:
            pass  # keep test output clean

    return Handler
