"""Tries to exhaust a resource of the machine, as the payload's `attack` says; every attack is
bounded by itself too (a count, a size, a deadline), so a broken cap cannot take the machine.

- fork_bomb: forks children that each sleep, up to `count` (the cap should refuse forks first)
- memory_hog: `procs` processes each touching `mb_each` MB (together over the cap)
- disk_filler: writes `mb` MB in 1 MB chunks into `where` (the session dir, or /tmp inside it)
- output_flood: writes `mb` MB to stdout/stderr
- big_result: answers with a string of `mb` MB
- daemon: leaves behind a SIGTERM-ignoring process in its own session (double fork), answers
  its pid; it must not outlive the session
- well_behaved: sleeps `sleep_s` seconds and answers ok
"""

import os
import signal
import subprocess
import sys
import time

from bedrock_agentcore import BedrockAgentCoreApp

app = BedrockAgentCoreApp()


def fork_bomb(count: int, deadline_s: float) -> dict:
    started, refused = [], 0
    end = time.monotonic() + deadline_s
    while len(started) < count and time.monotonic() < end:
        try:
            pid = os.fork()
        except OSError:
            refused += 1
            time.sleep(0.01)
            continue
        if pid == 0:
            time.sleep(deadline_s)
            os._exit(0)
        started.append(pid)
    return {"started": len(started), "refused": refused}


_HOG = ("import sys, time; b = bytearray(int(sys.argv[1]) * 1048576)\n"
        "for i in range(0, len(b), 4096): b[i] = 1\n"
        "print('held', flush=True); time.sleep(float(sys.argv[2]))")


def memory_hog(procs: int, mb_each: int, deadline_s: float) -> dict:
    children = [subprocess.Popen([sys.executable, "-c", _HOG, str(mb_each), str(deadline_s)])
                for _ in range(procs)]
    codes = [child.wait(timeout=deadline_s + 10) for child in children]
    return {"codes": codes}


def disk_filler(mb: int, where: str) -> dict:
    path = os.path.join(os.getcwd() if where == "session" else where, "filler.bin")
    chunk = b"x" * 1048576
    written = 0
    try:
        with open(path, "wb") as f:
            for _ in range(mb):
                f.write(chunk)
                f.flush()
                written += 1
    except OSError as exc:
        time.sleep(5)  # the harness notices a full disk within a moment
        return {"written_mb": written, "error": str(exc)}
    time.sleep(5)
    return {"written_mb": written}


def output_flood(mb: int) -> dict:
    line = "y" * 1023 + "\n"
    try:
        for _ in range(mb * 1024):
            sys.stdout.write(line)
            sys.stderr.write(line)
    except OSError as exc:
        time.sleep(5)
        return {"error": str(exc)}
    time.sleep(5)
    return {"flooded_mb": mb}


def daemon(live_s: float) -> dict:
    read, write = os.pipe()
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            os.write(write, str(os.getpid()).encode())
            time.sleep(live_s)
            os._exit(0)
        os._exit(0)
    return {"daemon_pid": int(os.read(read, 32))}


@app.entrypoint
def invoke(payload, context):
    attack = payload["attack"]
    if attack == "fork_bomb":
        return fork_bomb(payload.get("count", 200), payload.get("deadline_s", 20.0))
    if attack == "memory_hog":
        return memory_hog(payload["procs"], payload["mb_each"], payload.get("deadline_s", 20.0))
    if attack == "disk_filler":
        return disk_filler(payload["mb"], payload.get("where", "session"))
    if attack == "output_flood":
        return output_flood(payload["mb"])
    if attack == "big_result":
        return {"blob": "z" * (payload["mb"] * 1048576)}
    if attack == "daemon":
        return daemon(payload.get("live_s", 60.0))
    time.sleep(payload.get("sleep_s", 0))
    return {"ok": True, "pid": os.getpid()}
