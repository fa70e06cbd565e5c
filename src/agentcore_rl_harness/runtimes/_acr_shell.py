"""The POSIX sh commands the ACR sandbox sends through InvokeAgentRuntimeCommand, and parsers
for what they print. Pure functions: every argument is quoted with shlex; only sh, coreutils
(base64, head, wc) and util-linux's setsid are assumed in the session's image.

Background commands leave files `<id>.{sup,pid,out,err,rc}` (and `killed` / `timedout`
markers) under `$TMPDIR/.arl-bg` (`/tmp` when TMPDIR is unset); a poll that sees `rc` reads
the capped outputs and removes the files.
"""

from __future__ import annotations

import base64
import math
import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ..errors import SandboxError

MAX_COMMAND_CHARS = 65536
BACKGROUND_DIR = '"${TMPDIR:-/tmp}/.arl-bg"'
TOO_LARGE = "arl:too-large"
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")

# `sh -c SUPERVISOR sh <base> <timeout_s> argv...`: puts the command in a session of its own (a
# process group to kill), arms a watchdog for the timeout (0: none), and records the exit status
# atomically in <base>.rc once the command ends. dash's kill needs `-s KILL` before `--`.
SUPERVISOR = """b=$1; t=$2; shift 2
echo $$ > "$b.sup"
setsid "$@" < /dev/null > "$b.out" 2> "$b.err" & c=$!
echo "$c" > "$b.pid"
w=
if [ "$t" != 0 ]; then
  ( s=; trap 'kill "$s" 2> /dev/null; exit 0' TERM
    sleep "$t" & s=$!; wait "$s" && { : > "$b.timedout"; kill -s KILL -- "-$c"; }
  ) > /dev/null 2>&1 &
  w=$!
fi
wait "$c"; r=$?
[ -n "$w" ] && kill "$w" 2> /dev/null
echo "$r" > "$b.rc.tmp" && mv -f "$b.rc.tmp" "$b.rc"
"""


@dataclass(frozen=True)
class Polled:
    """What a background poll printed: `running`, `gone`, or `rc` with the command's outputs."""

    state: str
    exit_code: int | None = None
    killed: bool = False
    timed_out: bool = False
    stdout: bytes = b""
    stderr: bytes = b""
    stdout_truncated: bool = False
    stderr_truncated: bool = False


def with_env(argv: tuple[str, ...], env: Mapping[str, str] | None) -> tuple[str, ...]:
    """`env -- K=V argv...` (GNU env would run a `--` placed after the assignments)."""
    if not env:
        return argv
    for name in env:
        if not _ENV_NAME.fullmatch(name):
            raise SandboxError(f"environment variable name {name!r} is not valid in a shell; "
                               "use letters, digits and underscores")
    return ("env", "--", *(f"{name}={value}" for name, value in env.items()), *argv)


def exec_command(argv: Sequence[str], *, cwd: str | None, stdin: bytes | None) -> str:
    """`cd <cwd> && exec argv...`, stdin fed from base64 inside the command (else /dev/null)."""
    if stdin is None:
        return f"{_cd(cwd)}exec {_quoted(argv)} < /dev/null"
    feed = f"printf %s '{base64.b64encode(stdin).decode()}' | base64 -d"
    return f"{_cd(cwd)}{feed} | {{ exec {_quoted(argv)}; }}"


def put_commands(path: str, data: bytes, *, mode: int, part_id: str) -> tuple[list[str], str]:
    """Commands writing `data` to `path` (each at most MAX_COMMAND_CHARS), and the cleanup.

    The first creates the parents and a partial file, each appends a base64 chunk, the last
    sets `mode` and renames the partial file over `path`.
    """
    target, partial = shlex.quote(path), shlex.quote(f"{path}.arl-part-{part_id}")
    first = f'mkdir -p -- "$(dirname -- {target})" && : > {partial} && '
    last = f" && chmod {mode:o} {partial} && mv -f -- {partial} {target}"
    append = f" | base64 -d >> {partial}"
    room = MAX_COMMAND_CHARS - len(first) - len(last) - len(append) - len("printf %s ''")
    if room < 1024:
        raise SandboxError(f"path {path!r} is too long to write through InvokeAgentRuntimeCommand")
    step = room // 4 * 3
    pieces = [data[i:i + step] for i in range(0, len(data), step)] or [b""]
    commands = [f"printf %s '{base64.b64encode(piece).decode()}'{append}" for piece in pieces]
    commands[0] = first + commands[0]
    commands[-1] += last
    return commands, f"rm -f -- {partial}"


def get_command(path: str, *, max_bytes: int) -> str:
    """Prints the size of regular file `path`, then its base64 (TOO_LARGE on stderr, exit 3)."""
    quoted = shlex.quote(path)
    plain = re.sub(r"[^A-Za-z0-9._/+-]", "?", path)
    return (
        f'[ -f {quoted} ] || {{ echo "arl: {plain} is missing or not a regular file" >&2; '
        f"exit 2; }}; n=$(wc -c < {quoted}) || exit 2; "
        f'if [ "$n" -gt {max_bytes} ]; then echo "{TOO_LARGE} $n" >&2; exit 3; fi; '
        f'echo "$n"; base64 < {quoted}'
    )


def base64_size(raw_bytes: int) -> int:
    """An upper bound on `base64`'s output for `raw_bytes` (76-column lines)."""
    return 4 * math.ceil(raw_bytes / 3) * 77 // 76 + 64


def launch_command(handle_id: str, argv: Sequence[str], *, cwd: str | None,
                   timeout: float | None) -> str:
    """Starts `argv` detached under SUPERVISOR; prints the command's pid (its process group)."""
    base = f"{BACKGROUND_DIR}/{handle_id}"
    watchdog = "0" if timeout is None else f"{max(timeout, 0.001):g}"
    return (
        f"mkdir -p {BACKGROUND_DIR} && {_cd(cwd)}"
        f"nohup setsid {_quoted(('/bin/sh', '-c', SUPERVISOR, 'sh'))} {base} {watchdog} "
        f"{_quoted(argv)} < /dev/null > /dev/null 2>&1 &\n"
        f"i=0; while [ ! -s {base}.pid ] && [ $i -lt 200 ]; do sleep 0.05; i=$((i+1)); done\n"
        f"cat {base}.pid"
    )


def poll_command(handle_id: str, *, cap: int) -> str:
    """Prints `running`, or `gone`, or `rc N`, markers, then each output (`parse_poll`)."""
    return (
        f'b={BACKGROUND_DIR}/{handle_id}; if [ -f "$b.rc" ]; then echo "rc $(cat "$b.rc")"; '
        'elif kill -0 "$(cat "$b.sup" 2> /dev/null)" 2> /dev/null; then echo running; exit 0; '
        "else echo gone; exit 0; fi\n"
        '[ -f "$b.killed" ] && echo killed; [ -f "$b.timedout" ] && echo timedout\n'
        'for s in out err; do echo "$s $(wc -c < "$b.$s")"; '
        f'head -c {cap} "$b.$s" | base64; echo .; done\n'
        'rm -f "$b".*'
    )


def kill_command(handle_id: str) -> str:
    """Marks the command killed and SIGKILLs its process group."""
    return (f'b={BACKGROUND_DIR}/{handle_id}; : > "$b.killed"; '
            'kill -s KILL -- "-$(cat "$b.pid")" 2> /dev/null; true')


def parse_poll(text: str, *, cap: int) -> Polled:
    """Reads what `poll_command` printed: outputs as `<out|err> <size>`, base64 lines, `.`."""
    lines = text.split("\n")
    state = lines[0].split()
    if not state or state[0] != "rc":
        return Polled(state=state[0] if state else "")
    found: dict[str, tuple[bytes, bool]] = {}
    name, size, chunks = "", 0, []
    for line in lines[1:]:
        if not name:
            head = line.split()
            if len(head) == 2 and head[0] in ("out", "err") and head[1].isdigit():
                name, size, chunks = head[0], int(head[1]), []
        elif line == ".":
            found[name] = (base64.b64decode("".join(chunks)), size > cap)
            name = ""
        else:
            chunks.append(line)
    stdout, stdout_cut = found.get("out", (b"", False))
    stderr, stderr_cut = found.get("err", (b"", False))
    return Polled(
        state="rc", exit_code=int(state[1]), killed="killed" in lines,
        timed_out="timedout" in lines, stdout=stdout, stderr=stderr,
        stdout_truncated=stdout_cut, stderr_truncated=stderr_cut,
    )


def _cd(cwd: str | None) -> str:
    return f"cd -- {shlex.quote(cwd)} && " if cwd else ""


def _quoted(argv: Sequence[str]) -> str:
    return " ".join(shlex.quote(word) for word in argv)
