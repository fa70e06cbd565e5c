"""A local Ray cluster that listens on 127.0.0.1 only, and joining one.

A Ray cluster accepts code from whoever reaches its ports, so one this project starts for a
single machine (a sweep's `hydra/launcher=ray`, the benchmarks, the tests) must not be reachable
from the network. Ray binds its GCS, raylet (node and object manager), workers and agents to the
node IP, and on Linux it replaces a loopback node IP with the machine's routable one
(`services.resolve_ip_for_localhost`, Ray 2.60): `ray.init(_node_ip_address="127.0.0.1")` and
`ray start --node-ip-address 127.0.0.1` both still listen on every interface. Ray's single-node
mode, its default on macOS and Windows (`RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`), keeps the node IP
at 127.0.0.1, and then every one of those servers binds loopback only. A process that joins such
a cluster needs the mode too, or it rewrites 127.0.0.1 to the routable address and never reaches
the GCS.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from ..errors import MissingDependencyError, RuntimeStartError
from ..serving import is_loopback

SINGLE_NODE_ENV = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"
DASHBOARD_DEFAULT = False


def address_host(address: str) -> str:
    """The host of a Ray address (`host:port`, `[v6]:port`, optionally `ray://`)."""
    address = address.removeprefix("ray://")
    if address.startswith("["):
        return address[1:address.index("]")]
    return address.rsplit(":", 1)[0] if address.count(":") == 1 else address


def use_single_node_mode() -> None:
    """Ray's single-node mode (node IP 127.0.0.1) for this process and the processes it starts.

    Ray reads the variable when it is imported; if it already was, the constant it sets is set too.
    """
    os.environ[SINGLE_NODE_ENV] = "0"
    constants = sys.modules.get("ray._private.ray_constants")
    if constants is not None and getattr(constants, "ENABLE_RAY_CLUSTER", False):
        constants.ENABLE_RAY_CLUSTER = False


def _import_ray() -> Any:
    try:
        import ray
    except ImportError as exc:
        raise MissingDependencyError(
            "a local Ray cluster needs Ray: pip install 'agentcore-rl-harness[ray]'"
        ) from exc
    return ray


def start_local(**init_kwargs: Any) -> str:
    """Start a one-node Ray cluster in this process that listens on 127.0.0.1 only, with no
    dashboard unless `include_dashboard=True`; return its GCS address for other processes."""
    if init_kwargs.get("address") not in (None, "local"):
        raise ValueError(f"start_local starts a new cluster; got address={init_kwargs['address']!r}")
    init_kwargs.pop("address", None)
    init_kwargs.setdefault("include_dashboard", DASHBOARD_DEFAULT)
    use_single_node_mode()
    ray = _import_ray()
    ray.init(**init_kwargs)
    address = ray.get_runtime_context().gcs_address
    if not is_loopback(address_host(address)):
        ray.shutdown()
        raise RuntimeStartError(
            f"the local Ray cluster came up at {address}, not on 127.0.0.1: this Ray "
            f"({ray.__version__}) ignores {SINGLE_NODE_ENV}=0; it was shut down"
        )
    return address
