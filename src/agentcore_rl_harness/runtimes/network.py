"""What an isolated local session may reach on the network (`runtime.network`).

Under bubblewrap a session gets its own network namespace (`--unshare-net`): only its own
loopback, no route out, no DNS. What it needs is relayed in: for each allowed destination (the
gateway of its `_rollout.base_url`, the runtime's local S3 stand-in, and `runtime.network.allow`)
the harness opens a listening socket *inside* the session's namespace (a worker thread joins it
with setns(2), binds, and leaves: the socket stays in that namespace) at the address the agent
dials, and pipes every connection accepted there to the real destination from the host side. So
`_rollout.base_url` is unchanged, the agent needs no proxy settings, TLS goes end to end (the
relay only copies bytes), and nothing else is reachable: any other address is refused by the
session's own empty loopback. A destination given by name is mapped to a loopback address of its
own in the session's `/etc/hosts`. No process is added to the session: the relays are sockets on
the harness's event loop, a few hundred microseconds to set up.

`mode: host` shares the host's network instead (what `uid` and `none` isolation always do).
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import ipaddress
import logging
import os
import socket
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from ..errors import ConfigError, RuntimeStartError

logger = logging.getLogger(__name__)

NETWORK_MODES = ("isolated", "host")
_CLONE_NEWNET = 0x40000000
_COPY_CHUNK = 65536


@dataclass(frozen=True)
class NetworkPolicy:
    """`runtime.network`: `isolated` (bubblewrap: only the gateway and `allow`) or `host`."""

    mode: str = "isolated"  # isolated: only the gateway and `allow`; host: the machine's network
    allow: tuple[str, ...] = ()  # "host:port" a session may reach besides the gateway

    def check(self) -> None:
        if self.mode not in NETWORK_MODES:
            raise ConfigError(f"runtime.network.mode must be one of {', '.join(NETWORK_MODES)}, "
                              f"got {self.mode!r}")
        for entry in self.allow:
            parse_destination(entry)

    @property
    def isolated(self) -> bool:
        return self.mode == "isolated"

    def destinations(self) -> tuple[Destination, ...]:
        return tuple(parse_destination(entry) for entry in self.allow)


@dataclass(frozen=True)
class Destination:
    """One address a session may dial: `host` is a name or an IP literal."""

    host: str
    port: int

    @property
    def is_loopback_ip(self) -> bool:
        with contextlib.suppress(ValueError):
            return ipaddress.ip_address(self.host).is_loopback
        return False

    @property
    def is_ip(self) -> bool:
        with contextlib.suppress(ValueError):
            ipaddress.ip_address(self.host)
            return True
        return False


def parse_destination(entry: str, *, key: str = "runtime.network.allow") -> Destination:
    """`host:port` (`[::1]:port` for IPv6) as a Destination, or a ConfigError naming `key`."""
    text = str(entry).strip()
    host, sep, port_text = text.rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise ConfigError(f"{key} entry {entry!r} is not host:port (e.g. api.example.com:443 "
                          "or 127.0.0.1:8000)")
    destination = Destination(host=host.lower(), port=int(port_text))
    if destination.is_ip and not destination.is_loopback_ip:
        raise ConfigError(
            f"{key} entry {entry!r}: an isolated session can only be given a non-loopback "
            "address by name (its own loopback has no route out); allow the host's name "
            "instead, or set runtime.network.mode=host")
    if destination.is_ip and ipaddress.ip_address(destination.host).version == 6:
        raise ConfigError(f"{key} entry {entry!r}: IPv6 loopback is not relayed; use "
                          "127.0.0.1 or a name")
    return destination


def url_destination(url: str) -> Destination | None:
    """Where `url` (an agent's base URL) connects, or None if it is not an http(s) URL."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return None
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        return None
    return Destination(host=parts.hostname.lower(), port=port)


@dataclass(frozen=True)
class RelayPlan:
    """Where each destination listens inside the session, and the session's /etc/hosts."""

    binds: tuple[tuple[str, Destination], ...]  # (listen IP inside the session, destination)
    hosts: dict[str, str] = field(default_factory=dict)  # name -> its loopback IP in the session

    def hosts_file(self) -> str | None:
        if not self.hosts:
            return None
        lines = ["127.0.0.1 localhost", *(f"{ip} {name}" for name, ip in self.hosts.items())]
        return "\n".join(lines) + "\n"


def plan_relays(destinations: Iterable[Destination]) -> RelayPlan:
    """A listen address for each distinct destination: loopback IPs as they are, `localhost` at
    127.0.0.1, every other name at a loopback address of its own (127.0.100.n)."""
    names: dict[str, str] = {}
    binds: list[tuple[str, Destination]] = []
    for destination in dict.fromkeys(destinations):
        if destination.is_loopback_ip:
            listen = destination.host
        elif destination.host == "localhost":
            listen = "127.0.0.1"
        else:
            listen = names.setdefault(destination.host, f"127.0.100.{len(names) + 1}")
        if all((listen, destination.port) != (ip, bound.port) for ip, bound in binds):
            binds.append((listen, destination))  # `localhost:80` and `127.0.0.1:80` are one
    return RelayPlan(binds=tuple(binds), hosts=names)


def listen_in_namespace(pid: int, addresses: Sequence[tuple[str, int]]) -> list[socket.socket]:
    """Listening TCP sockets at `addresses` inside the network namespace of process `pid`.

    A worker thread joins that namespace (setns(2) moves only the calling thread), binds, and
    ends; the sockets stay in the session's namespace."""
    made: list[socket.socket] = []
    failure: list[BaseException] = []

    def bind_there() -> None:
        libc = ctypes.CDLL(None, use_errno=True)
        try:
            fd = os.open(f"/proc/{pid}/ns/net", os.O_RDONLY)
            try:
                if libc.setns(fd, _CLONE_NEWNET) != 0:
                    error = ctypes.get_errno()
                    raise OSError(error, f"setns into the session's network: {os.strerror(error)}")
            finally:
                os.close(fd)
            for host, port in addresses:
                sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                made.append(sock)
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                sock.bind((host, port))
                sock.listen(128)
                sock.setblocking(False)
        except BaseException as exc:  # reported to the caller, with the sockets closed
            failure.append(exc)

    worker = threading.Thread(target=bind_there, name="arl-netns-bind")
    worker.start()
    worker.join()
    if failure:
        for sock in made:
            sock.close()
        raise failure[0]
    return made


class SessionNetwork:
    """What one isolated session reaches: its /etc/hosts (written beside its directory, where
    no session sees it, when it dials names) and, once its namespace exists, a relay server per
    destination on the harness's loop."""

    def __init__(self, destinations: Iterable[Destination], *, hosts_path: Path) -> None:
        self.plan = plan_relays(destinations)
        content = self.plan.hosts_file()
        self.hosts_file: Path | None = None
        if content is not None:
            hosts_path.write_text(content)
            hosts_path.chmod(0o644)
            self.hosts_file = hosts_path
        self._servers: list[asyncio.base_events.Server] = []
        self._pipes: set[asyncio.Task[None]] = set()

    async def start(self, sandbox_pid: int) -> None:
        addresses = [(listen, destination.port) for listen, destination in self.plan.binds]
        try:
            sockets = await asyncio.to_thread(listen_in_namespace, sandbox_pid, addresses)
        except OSError as exc:
            raise RuntimeStartError(
                f"cannot relay {[f'{d.host}:{d.port}' for _, d in self.plan.binds]} into the "
                f"session's network namespace: {exc}; set runtime.network.mode=host to share "
                "the host's network instead") from exc
        for sock, (_, destination) in zip(sockets, self.plan.binds):
            server = await asyncio.start_server(
                lambda reader, writer, to=destination: self._accept(reader, writer, to), sock=sock)
            self._servers.append(server)

    def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                destination: Destination) -> None:
        task = asyncio.get_running_loop().create_task(self._relay(reader, writer, destination))
        self._pipes.add(task)
        task.add_done_callback(self._pipes.discard)

    async def _relay(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                     destination: Destination) -> None:
        try:
            upstream_reader, upstream_writer = await asyncio.open_connection(
                destination.host, destination.port)
        except OSError as exc:
            logger.debug("relay to %s:%s refused: %s", destination.host, destination.port, exc)
            writer.close()
            return
        try:
            await asyncio.gather(_copy(reader, upstream_writer), _copy(upstream_reader, writer))
        finally:
            for end in (writer, upstream_writer):
                end.close()

    async def aclose(self) -> None:
        for server in self._servers:
            server.close()
        for task in list(self._pipes):
            task.cancel()
        await asyncio.gather(*self._pipes, return_exceptions=True)
        self._servers.clear()
        if self.hosts_file is not None:
            with contextlib.suppress(FileNotFoundError):
                self.hosts_file.unlink()


async def _copy(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Bytes from `reader` to `writer` until EOF (then half-close), or either end fails."""
    try:
        while chunk := await reader.read(_COPY_CHUNK):
            writer.write(chunk)
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()
    except (ConnectionError, OSError):
        writer.close()
