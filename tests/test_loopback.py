"""Nothing a launch opens is reachable from the network: every socket listening in the launch's
process tree (the parent's rendezvous store, the workers' gloo pairs) is bound to loopback."""
import ipaddress
import os

import psutil
import pytest
import torch
import torch.distributed as dist

import mgpukit
from mgpukit.runtime.failures import LaunchError


def _listening_sockets_of_the_launch():
    dist.all_reduce(torch.ones(1))  # the group is formed: gloo's sockets exist
    if dist.get_rank() == 0:
        parent = psutil.Process(os.getppid())
        pids = {parent.pid} | {p.pid for p in parent.children(recursive=True)}
        out = [(c.pid, c.laddr.ip, c.laddr.port) for c in psutil.net_connections("inet")
               if c.status == psutil.CONN_LISTEN and c.pid in pids]
    else:
        out = None
    dist.barrier()
    return out


def test_every_listening_socket_of_a_launch_is_loopback():
    sockets = mgpukit.launch(_listening_sockets_of_the_launch, 2, echo=False)[0]
    assert sockets, "found no listening socket at all: the probe is broken"
    parent = os.getpid()
    assert any(pid == parent for pid, _, _ in sockets), "the parent's store was not seen"
    wide = [(pid, ip, port) for pid, ip, port in sockets if not ipaddress.ip_address(ip).is_loopback]
    assert wide == [], f"listening beyond loopback: {wide}"


def test_a_host_that_is_not_this_machines_is_refused_in_one_sentence():
    with pytest.raises(LaunchError, match="cannot listen on host='192.0.2.1'"):
        mgpukit.launch(_listening_sockets_of_the_launch, 2, host="192.0.2.1", timeout_s=20)
