"""`runtimes/ray_loopback.py` without a cluster: which addresses count as this machine only, and the
/proc reader the cluster tests rely on (tests/runtimes/test_ray_limiter.py starts the cluster,
tests/test_sweep.py the sweep's)."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from agentcore_rl_harness.runtimes.ray_loopback import address_host, is_loopback, start_local
from listening_sockets import descendants, listeners


@pytest.mark.parametrize(("address", "loopback"), [
    ("127.0.0.1:6379", True), ("localhost:6379", True), ("[::1]:6379", True),
    ("127.0.0.2:6379", True), ("ray://127.0.0.1:10001", True), ("::1", True),
    ("192.0.2.2:6379", False), ("0.0.0.0:6379", False), ("[::]:6379", False), ("auto", False),
    ("head.example.com:6379", False),
])
def test_loopback_addresses(address, loopback):
    assert is_loopback(address_host(address)) is loopback


def test_start_local_refuses_to_join():
    with pytest.raises(ValueError, match="starts a new cluster; got address='auto'"):
        start_local(address="auto")


def test_the_reader_tells_a_wildcard_listener_from_loopback_ones():
    code = ("import socket, sys, time\n"
            "socks = []\n"
            "for family, host in [(socket.AF_INET, '0.0.0.0'), (socket.AF_INET, '127.0.0.1'),"
            " (socket.AF_INET6, '::1')]:\n"
            "    s = socket.socket(family); s.bind((host, 0)); s.listen(); socks.append(s)\n"
            "print('ready', flush=True); time.sleep(30)\n")
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "ready"
        time.sleep(0.1)
        found = [item for item in listeners(descendants(os.getpid())) if item.pid == child.pid]
    finally:
        child.kill()
        child.wait()
    assert sorted((item.host, item.loopback) for item in found) == [
        ("0.0.0.0", False), ("127.0.0.1", True), ("::1", True)]
