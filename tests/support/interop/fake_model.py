"""A scripted OpenAI-compatible model on 127.0.0.1: Chat Completions, always streamed
as SSE with a usage chunk, plus `GET /v1/models`.

The script rides in the task prompt as `[[fake: key=value ...]]`, so one server
serves many concurrent rollouts deterministically:

- `tools=N` (default 1): N turns of `bash` tool calls, then a final answer;
- `parallel=1`: the first tool turn makes two calls;
- `wrong=1`: the final answer is off by one (reward 0);
- `fail=K`: model call K answers HTTP 500 once per rollout (the harness retries);
- `hang=K`: model call K hangs until the test calls `release()`;
- `pad=N`: each tool turn's text carries N more characters (a large trace).

The final answer is the last tool result, so it depends on the tool really running.
"""

from __future__ import annotations

import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

MODEL = "fake-model"
_DIRECTIVES = re.compile(r"\[\[fake: ([^\]]*)\]\]")
_EXPRESSION = re.compile(r"Expression: (.*)")


def _text(message: dict) -> str:
    content = message.get("content") or ""
    if isinstance(content, list):
        return "".join(part.get("text", "") for part in content if isinstance(part, dict))
    return content


class FakeModel:
    """Runs the server on a daemon thread; `hanging` is set while a call hangs."""

    def __init__(self) -> None:
        self.hanging = threading.Event()
        self._release = threading.Event()
        self._failed: set[tuple[str, int]] = set()
        self._lock = threading.Lock()
        self.models_calls = 0
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self.base_url = f"http://127.0.0.1:{self._server.server_address[1]}/v1"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> FakeModel:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=10)

    def release(self) -> None:
        """Let every hanging call (and any later one) go on."""
        self._release.set()

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        model = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                if self.path.rstrip("/") != "/v1/models":
                    self.send_error(404)
                    return
                with model._lock:
                    model.models_calls += 1
                body = json.dumps(
                    {"object": "list", "data": [{"id": MODEL, "object": "model", "owned_by": "tests"}]}
                ).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_POST(self) -> None:
                if self.path.rstrip("/") != "/v1/chat/completions":
                    self.send_error(404)
                    return
                request = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                model._answer(self, request)

        return Handler

    def _answer(self, handler: BaseHTTPRequestHandler, request: dict) -> None:
        messages = request["messages"]
        prompt = next(_text(m) for m in messages if m["role"] == "user")
        match = _DIRECTIVES.search(prompt)
        script = dict(item.split("=", 1) for item in match.group(1).split()) if match else {}
        turn = 1 + sum(m["role"] == "assistant" for m in messages)
        if int(script.get("fail", 0)) == turn:
            # once per rollout: verifiers names the rollout (its trace id) in a header
            key = (handler.headers.get("X-Session-ID") or prompt, turn)
            with self._lock:
                first = key not in self._failed
                self._failed.add(key)
            if first:
                body = json.dumps({"error": {"message": "fake upstream failure", "type": "server_error"}}).encode()
                handler.send_response(500)
                handler.send_header("Content-Type", "application/json")
                handler.send_header("Content-Length", str(len(body)))
                handler.end_headers()
                handler.wfile.write(body)
                return
        if int(script.get("hang", 0)) == turn:
            self.hanging.set()
            self._release.wait()
        expression = _EXPRESSION.search(prompt).group(1).strip()
        if turn <= int(script.get("tools", 1)):
            calls = 2 if turn == 1 and script.get("parallel") == "1" else 1
            content = f"Step {turn}: running bash." + "." * int(script.get("pad", 0))
            tool_calls = [
                {
                    "index": i,
                    "id": f"call_{turn}_{i}",
                    "type": "function",
                    "function": {"name": "bash", "arguments": json.dumps({"command": f"echo $(({expression}))"})},
                }
                for i in range(calls)
            ]
        else:
            last = next(_text(m) for m in reversed(messages) if m["role"] == "tool").strip()
            content = str(int(last) + 1) if script.get("wrong") == "1" else last
            tool_calls = []
        prompt_tokens = sum(len(_text(m)) for m in messages) // 4 + len(messages)
        completion_tokens = len(content) // 4 + 8 * len(tool_calls) + 1
        chunks = [{"role": "assistant", "content": content}]
        if tool_calls:
            chunks.append({"tool_calls": tool_calls})
        handler.send_response(200)
        handler.send_header("Content-Type", "text/event-stream")
        handler.send_header("Cache-Control", "no-cache")
        handler.send_header("Connection", "close")
        handler.end_headers()
        base = {"id": f"chatcmpl-{turn}", "object": "chat.completion.chunk", "created": 1700000000, "model": MODEL}
        for delta in chunks:
            self._event(handler, {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": None}]})
        finish = "tool_calls" if tool_calls else "stop"
        self._event(handler, {**base, "choices": [{"index": 0, "delta": {}, "finish_reason": finish}]})
        usage = {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        }
        self._event(handler, {**base, "choices": [], "usage": usage})
        handler.wfile.write(b"data: [DONE]\n\n")
        handler.wfile.flush()
        handler.close_connection = True

    @staticmethod
    def _event(handler: BaseHTTPRequestHandler, payload: dict) -> None:
        handler.wfile.write(b"data: " + json.dumps(payload).encode() + b"\n\n")
