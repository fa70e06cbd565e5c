"""A stand-in for `python -m vllm.entrypoints.openai.api_server` that fails in the ways a real
engine can but will not on demand (FAKE_VLLM_MODE): `die` (exits while starting, after some log
lines), `hang` (never listens), `shifted` (tokenizes differently from the harness), `vocab` (a
larger vocabulary), `ok`. It serves /health, /v1/models, /tokenize and /detokenize on loopback
with the model folder's own tokenizer (tokenizers, no transformers: it starts in a second)."""

import argparse
import json
import os
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from tokenizers import Tokenizer

parser = argparse.ArgumentParser()
parser.add_argument("-m")
parser.add_argument("--model", required=True)
parser.add_argument("--port", type=int, required=True)
parser.add_argument("--host", default="127.0.0.1")
args, _ = parser.parse_known_args()
MODE = os.environ.get("FAKE_VLLM_MODE", "ok")
print(f"fake vLLM pid {os.getpid()} mode {MODE} model {args.model}", flush=True)
if MODE == "die":
    for line in range(40):
        print(f"engine init line {line}", flush=True)
    print("RuntimeError: fake engine could not allocate its KV cache", flush=True)
    sys.exit(3)
if MODE == "hang":
    time.sleep(3600)
TOKENIZER = Tokenizer.from_file(os.path.join(args.model, "tokenizer.json"))
REAL_VOCAB = TOKENIZER.get_vocab_size(with_added_tokens=True)
VOCAB = REAL_VOCAB + (10 if MODE == "vocab" else 0)


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *a):
        pass

    def _answer(self, status, body):
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        if self.path == "/health":
            self._answer(200, {})
        elif self.path == "/v1/models":
            self._answer(200, {"data": [{"id": args.model}]})
        else:
            self._answer(404, {"error": self.path})

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if self.path == "/tokenize":
            ids = TOKENIZER.encode(body["prompt"], add_special_tokens=False).ids
            self._answer(200, {"tokens": [i + 1 for i in ids] if MODE == "shifted" else ids})
        elif self.path == "/detokenize":
            # like vLLM: an id past the vocabulary decodes to ""; `vocab` mode has 10 more ids
            text = "".join(TOKENIZER.decode([t], skip_special_tokens=False) if t < REAL_VOCAB
                           else (f"<extra_{t}>" if t < VOCAB else "") for t in body["tokens"])
            self._answer(200, {"prompt": text})
        else:
            self._answer(404, {"error": self.path})


ThreadingHTTPServer((args.host, args.port), Handler).serve_forever()
