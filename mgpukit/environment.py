"""The environment variables torch and gloo read in every worker, checked in the parent first.

A value they reject fails only inside the ranks, after the fork, as a c10d stack per rank:
`GLOO_SOCKET_IFNAME=nonexistent0` ("Unable to find address for: nonexistent0") or
`TORCH_DISTRIBUTED_DEBUG=BOGUS` ("The value of TORCH_DISTRIBUTED_DEBUG must be OFF, INFO or
DETAIL"). `check_environment` refuses them in one sentence before anything forks.

It also says when the environment moves gloo off loopback. The launcher pins gloo's sockets to
the loopback interface (`launcher.py`, trap 2) *unless the caller set* `GLOO_SOCKET_IFNAME` — and
an inherited `GLOO_SOCKET_IFNAME=eth0` (a cluster's login profile sets it for multi-node jobs)
makes every worker listen on eth0's address, reachable from the network, without a word. That
is allowed (it may be meant) but warned about (`OffLoopbackWarning`).
"""
from __future__ import annotations

import os
import socket
import warnings

import psutil

DEBUG_LEVELS = ("OFF", "INFO", "DETAIL")  # c10d's DebugLevel (torch/csrc/distributed/c10d/debug.cpp)


class OffLoopbackWarning(UserWarning):
    """The environment makes gloo listen beyond the loopback interface."""


_WARNED: set[str] = set()


def check_environment(environ=None, *, host: str = "127.0.0.1", warn: bool = True) -> None:
    """ValueError (one sentence) for a value torch or gloo would reject in the workers; with
    `warn`, an `OffLoopbackWarning` when `GLOO_SOCKET_IFNAME` names a non-loopback interface for
    a loopback `host` (module docstring)."""
    env = os.environ if environ is None else environ
    level = env.get("TORCH_DISTRIBUTED_DEBUG")
    if level is not None and level.upper() not in DEBUG_LEVELS:
        raise ValueError(f"TORCH_DISTRIBUTED_DEBUG={level!r} in the environment: torch accepts "
                         f"{', '.join(DEBUG_LEVELS)}; unset it or give one of them.")
    names = env.get("GLOO_SOCKET_IFNAME")
    if names is None:
        return
    interfaces = psutil.net_if_addrs()
    asked = [n.strip() for n in names.split(",")]  # gloo takes a comma-separated list
    missing = [n for n in asked if n not in interfaces]
    if missing:
        raise ValueError(f"GLOO_SOCKET_IFNAME={names!r} in the environment names no interface of this "
                         f"machine ({', '.join(missing)}); it has {', '.join(sorted(interfaces))}. "
                         f"Unset it (the workers then use loopback) or name one of them.")
    outside = [n for n in asked if not _is_loopback(interfaces[n])]
    if warn and outside and host in ("127.0.0.1", "localhost", "::1") and names not in _WARNED:
        _WARNED.add(names)  # once per process: a run's launch and its reference's say it once
        warnings.warn(f"GLOO_SOCKET_IFNAME={names} in the environment moves gloo's sockets off loopback: "
                      f"the workers listen on {', '.join(outside)}, reachable from the network. Unset it "
                      f"to keep them on this machine.", OffLoopbackWarning, stacklevel=3)


def _is_loopback(addrs) -> bool:
    return any((a.family == socket.AF_INET and a.address.startswith("127."))
               or (a.family == socket.AF_INET6 and a.address == "::1") for a in addrs)
