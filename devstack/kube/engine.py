"""The inference-engine stand-in of the Kubernetes API emulator (a development stand-in: no
model runs). A pod with the ``starverse.io/endpoint`` label, or a container with a
``STARVERSE_ENGINE`` env (``vllm``, ``tensorrt-llm``), answers on its Service's port as a small
OpenAI-compatible server, the way vLLM's and TensorRT-LLM's servers do:

* ``GET /health``: 200 (the Service only reaches Running, Ready pods; 503 otherwise);
* ``GET /v1/models``: the one model, named by the pod's ``STARVERSE_MODEL_NAME`` env;
* ``POST /v1/chat/completions`` and ``POST /v1/completions``: a deterministic echo of the last
  message (or prompt), cut at ``max_tokens`` words, with ``usage`` counted in words; a missing
  ``messages`` / ``prompt`` is a 400 and another model's name a 404, as OpenAI-style errors;
  ``stream: true`` answers server-sent events ending ``data: [DONE]``.

Each request waits ``STARVERSE_STANDIN_LATENCY_MS`` milliseconds first (the pod's env, else
the emulator's setting, default 0), so that concurrent requests pile up like real ones. The
model-load time (``STARVERSE_STANDIN_LOAD_S``) is the kubelet's (:mod:`.kubelet`).
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

Obj = dict[str, Any]
ENDPOINT_LABEL = "starverse.io/endpoint"
ENGINE_ENV = "STARVERSE_ENGINE"
MODEL_ENV = "STARVERSE_MODEL_NAME"
LATENCY_ENV = "STARVERSE_STANDIN_LATENCY_MS"
LOAD_ENV = "STARVERSE_STANDIN_LOAD_S"
EXIT_ENV = "STARVERSE_STANDIN_EXIT"
JSON = "application/json"


@dataclass
class Answer:
    status: int
    body: bytes
    headers: dict[str, str] = field(default_factory=dict)


def pod_env(pod: Obj) -> dict[str, str]:
    """The literal ``env`` values of a pod's containers (the first container wins)."""
    values: dict[str, str] = {}
    for container in (pod.get("spec") or {}).get("containers") or []:
        for env in container.get("env") or []:
            if isinstance(env, dict) and "value" in env:
                values.setdefault(str(env.get("name")), str(env["value"]))
    return values


def is_endpoint(pod: Obj) -> bool:
    labels = (pod.get("metadata") or {}).get("labels") or {}
    return ENDPOINT_LABEL in labels


def _number(text: str | None, default: float) -> float:
    try:
        return float(text) if text not in (None, "") else default
    except ValueError:
        return default


def engine_of(pod: Obj, latency_ms: float) -> Engine | None:
    """The stand-in engine of a pod, or None for a pod that is no inference engine."""
    env = pod_env(pod)
    if not is_endpoint(pod) and ENGINE_ENV not in env:
        return None
    return Engine(
        env.get(MODEL_ENV) or pod["metadata"].get("name", "model"),
        env.get(ENGINE_ENV, "vllm"),
        _number(env.get(LATENCY_ENV), latency_ms) / 1000,
    )


def standin_exit(pod: Obj) -> tuple[int, str] | None:
    """(exit code, termination message) from the pod's ``STARVERSE_STANDIN_EXIT``
    (``<code>`` or ``<code>:<message>``): its containers exit so each time they start."""
    value = pod_env(pod).get(EXIT_ENV)
    if not value:
        return None
    code, _sep, message = value.partition(":")
    try:
        return int(code), message
    except ValueError:
        return 1, value


def load_seconds(pod: Obj, default_s: float) -> float:
    """How long an endpoint pod takes to load its model before it is Ready."""
    if not is_endpoint(pod):
        return 0.0
    return max(0.0, _number(pod_env(pod).get(LOAD_ENV), default_s))


def _json(status: int, body: Obj) -> Answer:
    return Answer(status, json.dumps(body).encode(), {"Content-Type": JSON})


def _error(status: int, message: str, kind: str, param: str | None = None) -> Answer:
    return _json(
        status, {"error": {"message": message, "type": kind, "param": param, "code": status}}
    )


def _text_of(content: Any) -> str:
    """A message's content: a string, or a list of parts of which the text ones count."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(
            str(part.get("text", ""))
            for part in content
            if isinstance(part, dict) and part.get("type") == "text"
        )
    return ""


def _words(text: str) -> int:
    return len(text.split())


@dataclass(frozen=True)
class Engine:
    model: str
    kind: str
    latency_s: float

    def answer(self, method: str, path: str, body: bytes) -> Answer:
        if self.latency_s > 0:
            time.sleep(self.latency_s)  # outside the store's lock: requests overlap
        routes = {
            "/health": ("GET", self._health),
            "/v1/models": ("GET", self._models),
            "/v1/chat/completions": ("POST", self._chat),
            "/v1/completions": ("POST", self._completion),
        }
        route = routes.get(path.rstrip("/") or "/")
        if route is None:
            return _error(404, f"no route {path} in the {self.kind} stand-in", "NotFoundError")
        if method not in (route[0], "HEAD" if route[0] == "GET" else route[0]):
            return _error(405, f"method {method} not allowed on {path}", "MethodNotAllowed")
        if route[0] == "GET":
            return route[1]({})
        try:
            request = json.loads(body or b"{}")
        except ValueError:
            return _error(400, "the request body is not valid JSON", "invalid_request_error")
        if not isinstance(request, dict):
            return _error(400, "the request body must be a JSON object", "invalid_request_error")
        model = request.get("model")
        if model not in (None, self.model):
            return _error(404, f"The model `{model}` does not exist.", "NotFoundError", "model")
        return route[1](request)

    def _health(self, request: Obj) -> Answer:
        return Answer(200, b"", {"Content-Type": JSON})

    def _models(self, request: Obj) -> Answer:
        return _json(
            200,
            {
                "object": "list",
                "data": [
                    {
                        "id": self.model,
                        "object": "model",
                        "created": int(time.time()),
                        "owned_by": self.kind,
                        "root": self.model,
                        "parent": None,
                    }
                ],
            },
        )

    def _reply(self, text: str, request: Obj) -> tuple[str, str]:
        """The echoed reply, cut at ``max_tokens`` words, and its finish reason."""
        words = f"Echo: {text}".split()
        limit = request.get("max_tokens")
        if isinstance(limit, int) and not isinstance(limit, bool) and 0 <= limit < len(words):
            return " ".join(words[:limit]), "length"
        return " ".join(words), "stop"

    def _chat(self, request: Obj) -> Answer:
        messages = request.get("messages")
        if not isinstance(messages, list) or not messages:
            return _error(
                400, "messages is required: a non-empty list", "invalid_request_error", "messages"
            )
        texts = [_text_of(m.get("content")) for m in messages if isinstance(m, dict)]
        reply, finish = self._reply(texts[-1] if texts else "", request)
        prompt_tokens = sum(_words(t) for t in texts)
        return self._respond(request, "chat.completion", reply, finish, prompt_tokens)

    def _completion(self, request: Obj) -> Answer:
        prompt = request.get("prompt")
        if isinstance(prompt, list):
            prompt = " ".join(str(p) for p in prompt)
        if not isinstance(prompt, str) or not prompt:
            return _error(400, "prompt is required", "invalid_request_error", "prompt")
        reply, finish = self._reply(prompt, request)
        return self._respond(request, "text_completion", reply, finish, _words(prompt))

    def _respond(
        self, request: Obj, kind: str, reply: str, finish: str, prompt_tokens: int
    ) -> Answer:
        chat = kind == "chat.completion"
        ident = f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex}"
        created = int(time.time())
        usage = {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": _words(reply),
            "total_tokens": prompt_tokens + _words(reply),
        }
        if request.get("stream") is True:
            return self._stream(request, ident, created, chat, reply, finish, usage)
        choice: Obj = {"index": 0, "finish_reason": finish, "logprobs": None}
        if chat:
            choice["message"] = {"role": "assistant", "content": reply}
        else:
            choice["text"] = reply
        return _json(
            200,
            {
                "id": ident,
                "object": kind,
                "created": created,
                "model": self.model,
                "choices": [choice],
                "usage": usage,
            },
        )

    def _stream(
        self,
        request: Obj,
        ident: str,
        created: int,
        chat: bool,
        reply: str,
        finish: str,
        usage: Obj,
    ) -> Answer:
        kind = "chat.completion.chunk" if chat else "text_completion"

        def chunk(piece: str | None, reason: str | None, role: bool = False) -> Obj:
            choice: Obj = {"index": 0, "finish_reason": reason, "logprobs": None}
            if chat:
                delta: Obj = {"role": "assistant"} if role else {}
                if piece is not None:
                    delta["content"] = piece
                choice["delta"] = delta
            else:
                choice["text"] = piece or ""
            return {
                "id": ident,
                "object": kind,
                "created": created,
                "model": self.model,
                "choices": [choice],
            }

        words = reply.split()
        chunks = [chunk("", None, role=True)] if chat else []
        chunks += [chunk(w if i == 0 else f" {w}", None) for i, w in enumerate(words)]
        chunks.append(chunk(None if chat else "", finish))
        if (request.get("stream_options") or {}).get("include_usage"):
            chunks.append(
                {
                    "id": ident,
                    "object": kind,
                    "created": created,
                    "model": self.model,
                    "choices": [],
                    "usage": usage,
                }
            )
        text = "".join(f"data: {json.dumps(c)}\n\n" for c in chunks) + "data: [DONE]\n\n"
        return Answer(200, text.encode(), {"Content-Type": "text/event-stream"})
