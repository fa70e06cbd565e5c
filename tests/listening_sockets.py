"""Which TCP ports a process tree listens on, read from /proc (Linux): the tests that a Ray cluster
we start is reachable from this machine only."""

from __future__ import annotations

import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path

LISTEN = "0A"


@dataclass(frozen=True)
class Listener:
    pid: int
    name: str
    host: str
    port: int

    @property
    def loopback(self) -> bool:
        address = ipaddress.ip_address(self.host)
        mapped = getattr(address, "ipv4_mapped", None)
        return (mapped or address).is_loopback


def descendants(root: int) -> set[int]:
    """`root` and every process below it."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:  # gone meanwhile
            continue
        ppid = int(text.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(stat.parent.name))
    found, todo = set(), [root]
    while todo:
        pid = todo.pop()
        if pid not in found:
            found.add(pid)
            todo.extend(children.get(pid, []))
    return found


def _host(hex_address: str) -> str:
    raw = bytes.fromhex(hex_address)
    # /proc/net/tcp{,6} print each 32-bit word in host (little-endian) order
    swapped = b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4))
    return str(ipaddress.ip_address(swapped))


def _listening_inodes() -> dict[str, tuple[str, int]]:
    inodes = {}
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == LISTEN:
                address, port = fields[1].split(":")
                inodes[fields[9]] = (_host(address), int(port, 16))
    return inodes


def listeners(pids: set[int]) -> list[Listener]:
    """Every listening TCP socket held by one of `pids`."""
    inodes, found = _listening_inodes(), []
    for pid in sorted(pids):
        try:
            name = Path(f"/proc/{pid}/comm").read_text().strip()
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if target.startswith("socket:[") and target[8:-1] in inodes:
                host, port = inodes[target[8:-1]]
                found.append(Listener(pid, name, host, port))
    return found
