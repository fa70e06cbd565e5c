"""A local Tinker-compatible server: the official `tinker` SDK trains and samples on CPU."""

from .server import TinkerServer

__all__ = ["TinkerServer"]
