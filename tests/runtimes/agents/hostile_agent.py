"""Three roles for the isolation tests. `victim`: write a secret in its own directory, then wait.
`attacker`: try to list, read, write, signal and ptrace the victim and the harness, and report
what each attempt got (the test asserts every one was refused). `network`: try to reach servers
outside the session and the gateway it was given, and report what each attempt got."""

import ctypes
import glob
import os
import signal
import socket
import time

from bedrock_agentcore import BedrockAgentCoreApp

app = BedrockAgentCoreApp()
PTRACE_ATTACH = 16


def attempt(action):
    try:
        value = action()
    except Exception as exc:  # the refusal is the expected outcome
        return {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
    return {"ok": True, "value": repr(value)[:300]}


def ptrace_attach(pid):
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.ptrace(PTRACE_ATTACH, pid, None, None) != 0:
        raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))
    return "attached"


def found(pattern):
    hits = glob.glob(pattern, recursive=True)
    if not hits:
        raise FileNotFoundError(f"nothing matches {pattern}")
    return hits


def connect_unix(path):
    with socket.socket(socket.AF_UNIX) as sock:
        sock.connect(path)
    return "connected"


def fetch(host, port):
    """Send a line over TCP and return the first line that comes back."""
    with socket.create_connection((host, port), timeout=5) as sock:
        sock.sendall(b"hello\n")
        return sock.makefile("rb").readline().decode()


def reach_out(payload):
    gateway = payload["_rollout"]["base_url"].split("//")[1].split("/")[0].rsplit(":", 1)
    return {
        "gateway": attempt(lambda: fetch(gateway[0], int(gateway[1]))),
        "outside_loopback": attempt(lambda: fetch("127.0.0.1", payload["outside_port"])),
        "outside_by_name": attempt(lambda: fetch("localhost", payload["outside_port"])),
        "allowed": attempt(lambda: fetch("127.0.0.1", payload["allowed_port"])),
        "public_address": attempt(lambda: fetch("1.1.1.1", 53)),
        "dns": attempt(lambda: socket.getaddrinfo("example.com", 443)),
        "hosts": attempt(lambda: open("/etc/hosts").read()),
    }


@app.entrypoint
def invoke(payload):
    if payload["role"] == "network":
        return reach_out(payload)
    if payload["role"] == "victim":
        with open("SECRET_FROM_A", "w") as secret:
            secret.write("the victim's secret")
        time.sleep(payload.get("wait_s", 60))
        return {"done": True}
    victim = payload["victim"]
    secret = os.path.join(victim["workdir"], "SECRET_FROM_A")
    harness_pid = payload["harness_pid"]
    return {
        "list_temp_dirs": attempt(lambda: found("/tmp/**/SECRET_FROM_*")),
        "list_parent_dir": attempt(lambda: found(os.path.join(os.path.dirname(os.getcwd()), "*", "SECRET_*"))),
        "read_secret": attempt(lambda: open(secret).read()),
        "write_victim_dir": attempt(lambda: open(os.path.join(victim["workdir"], "planted"), "w").write("x")),
        "read_victim_cwd_via_proc": attempt(lambda: os.listdir(f"/proc/{victim['host_pid']}/cwd")),
        "read_victim_environ": attempt(lambda: open(f"/proc/{victim['host_pid']}/environ").read()),
        "signal_victim": attempt(lambda: os.kill(victim["host_pid"], signal.SIGKILL)),
        "ptrace_victim": attempt(lambda: ptrace_attach(victim["host_pid"])),
        "connect_victim_agent": attempt(lambda: connect_unix(os.path.join(victim["workdir"], ".agent.sock"))),
        "signal_harness": attempt(lambda: os.kill(harness_pid, signal.SIGTERM)),
        "ptrace_harness": attempt(lambda: ptrace_attach(harness_pid)),
        "read_harness_cmdline": attempt(lambda: open(f"/proc/{harness_pid}/cmdline").read()),
        "read_run_dir": attempt(lambda: open(os.path.join(payload["run_dir"], "rollouts.jsonl")).read()),
        "write_code": attempt(lambda: open(payload["code_file"], "a").write("# planted\n")),
        "see_processes": {"ok": True, "value": sorted(int(p) for p in os.listdir("/proc") if p.isdigit())},
    }
