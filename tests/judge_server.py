"""A scripted OpenAI-compatible judge on loopback: a real HTTP server (http.server in a thread)
answering `POST /v1/chat/completions` from a list or a function of the request, and recording
every request, so judge tests run the real `openai` client against it."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class ScriptedJudgeServer:
    """`answers`: texts served in order (the last repeats), or a callable request-body -> text."""

    def __init__(self, answers, *, status: int = 200):
        self.answers = answers
        self.status = status
        self.requests: list[dict] = []
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                owner.requests.append({"path": self.path, "auth": self.headers.get("Authorization"), **body})
                if owner.status != 200:
                    payload = {"error": {"message": "scripted failure", "type": "server_error"}}
                    self._send(owner.status, payload)
                    return
                text = owner._answer(body)
                prompt_tokens = sum(len(m["content"].split()) for m in body["messages"])
                self._send(200, {
                    "id": f"chatcmpl-{len(owner.requests)}", "object": "chat.completion", "created": 0,
                    "model": body["model"],
                    "choices": [{"index": 0, "finish_reason": "stop",
                                 "message": {"role": "assistant", "content": text}}],
                    "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": len(text.split()),
                              "total_tokens": prompt_tokens + len(text.split())}})

            def _send(self, status, payload):
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def _answer(self, body):
        if callable(self.answers):
            return self.answers(body)
        index = min(len(self.requests) - 1, len(self.answers) - 1)
        return self.answers[index]

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._server.shutdown()
        self._server.server_close()
