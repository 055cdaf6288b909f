"""Run registered strategies inside processes started by `accelerate launch` or `torchrun`.

`scripts/train.py` calls `training_function(name, cfg)`: each process reads its rank from the
launcher's environment, sets up Accelerate's state (with `cpu=True` when there is no GPU — the
trap `mgpukit.launch` closes for notebooks), builds the same device mesh `mgpukit.launch` gives
its workers, and runs the one runner's `run_rank`; rank 0 gathers the per-rank results into the
same result record, with the same parity check, that `mgpukit run` writes (`experiment.finish_run`).
`name="all"` runs every strategy in turn on the same process group.

Several nodes need nothing else: `torchrun --nnodes 2 ... --rdzv-endpoint HOST:PORT` or
`accelerate launch --num_machines 2 --machine_rank R --main_process_ip HOST ...` on each node
start the same script, every process reads its node from the launcher's environment
(`runtime.nodes`), the ranks share their nodes once, and the record names each rank's node.
"""
from __future__ import annotations

import dataclasses
import os
import socket
import time
import warnings
from collections.abc import Callable, Iterator
from datetime import timedelta

import torch
import torch.distributed as dist

from mgpukit.config import RunConfig
from mgpukit.experiment import finish_run, run_rank
from mgpukit.export import exportable
from mgpukit.prepare import check_outputs, prepare
from mgpukit.runtime import context as _context
from mgpukit.runtime.nodes import NodeLayout, node_rank_from_env
from mgpukit.runtime.peers import PeerLostError, PeerWatch
from mgpukit.strategies.policies.precision import accelerate_precision
from mgpukit.training.checkpoint import has_checkpoint


def training_function(name: str, cfg: RunConfig, *, layout: dict | None = None,
                      json_path: str | None = None, parity: bool = True,
                      on_skip: Callable[[str, str], None] | None = None) -> Iterator[tuple[str, dict | None]]:
    """Yield `(strategy, record)` per strategy run (`record` on rank 0, None elsewhere).

    `name="all"`: a strategy this launch cannot run (it needs more workers than were launched,
    or a model it does not train) is skipped — `on_skip(strategy, reason)` on rank 0, or a
    warning — and the others run; one named strategy that cannot run raises, as before."""
    # lazy: start-up (accelerate ~0.1 s: loaded where a run uses it, not on import)
    from accelerate import PartialState

    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    local = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    gpu = torch.cuda.is_available() and torch.cuda.device_count() >= local
    names = exportable() if name == "all" else [name]
    # validated before the process group exists: a bad configuration costs no rendezvous
    prepared = []
    for n in names:
        try:
            prepared.append(prepare(n, workers=world_size, mode="cpu", config=cfg, layout=layout))
        except ValueError as e:
            if name != "all":
                raise
            if int(os.environ.get("RANK", "0")) == 0:  # every rank skips the same ones
                reason = str(e).splitlines()[0]
                if on_skip is not None:
                    on_skip(n, reason)
                else:
                    warnings.warn(f"skipped {n}: {reason}", stacklevel=2)
    if not prepared:
        raise ValueError(f"no strategy can run on {world_size} worker(s) with these settings.")
    if json_path:  # a typo in the path must not throw the trained run away
        check_outputs(json_path=json_path)
    open_group_for_this_attempt(gpu)
    state = PartialState(cpu=not gpu)  # takes the group opened above, if any
    prepared = [dataclasses.replace(p, cfg=resume_after_restart(p.cfg)) for p in prepared]
    # `accelerate launch --mixed_precision bf16` exports ACCELERATE_MIXED_PRECISION. The kit's
    # strategies train in the layout's dtype (`--dtype`) and build their Accelerator with it, so
    # the flag is not applied: say so, rather than let the record and the launch line disagree.
    requested = os.environ.get("ACCELERATE_MIXED_PRECISION", "no")
    dtype = prepared[0].cfg.layout.dtype
    if requested not in ("no", accelerate_precision(dtype)) and state.process_index == 0:
        warnings.warn(f"accelerate launch asked for mixed_precision={requested!r}; mgpukit's "
                      f"strategies train in the layout's dtype ({dtype!r}; set it with --dtype), "
                      f"so it is not applied.", stacklevel=2)
    if state.num_processes != world_size:
        raise RuntimeError(f"Accelerate sees {state.num_processes} processes but WORLD_SIZE={world_size}.")
    nodes = gather_nodes(world_size)
    if state.process_index == 0:
        for p in prepared:
            nodes.warn(p.dims)
    watch = PeerWatch.from_env(state.process_index, world_size, nodes)
    for p in prepared:
        p = dataclasses.replace(p, mode="gpu" if gpu else "cpu")
        try:
            if watch:
                watch.started()
            if dist.is_initialized():
                dist.barrier()  # a common origin for every rank's timeline
            ctx = _context.worker_context(rank=state.process_index, world_size=world_size, mode=p.mode,
                                          device=state.device, t0=time.perf_counter(),
                                          threads=torch.get_num_threads(), dims=p.dims, layout=p.layout,
                                          nodes=nodes)
            out = run_rank(ctx, p.strategy.name, p.cfg)
            results = [None] * world_size
            if dist.is_initialized():
                dist.all_gather_object(results, out["result"])
            else:
                results = [out["result"]]
        except Exception as e:
            lost = watch.failed(e) if watch else None
            if lost is None:
                raise
            dist.destroy_process_group()  # nothing to leave together with: `teardown` skips its barrier
            raise PeerLostError(lost) from e
        if watch:
            watch.finished()
        record = None
        if ctx.rank == 0:
            path = json_path if len(prepared) == 1 else None
            record = finish_run(p, results, out["weights"], parity=parity, json_path=path, in_process=ctx)
        yield p.strategy.name, record


def resume_after_restart(cfg: RunConfig) -> RunConfig:
    """Under `torchrun --max-restarts N`, a restarted attempt (TORCHELASTIC_RESTART_COUNT > 0)
    of a run that saves checkpoints (`-o checkpoint_dir=DIR`) goes on from the last one."""
    root = cfg.options.get("checkpoint_dir")
    # every rank of a round agrees on its start count; the agents' restart counts can differ
    start = os.environ.get("MGPUKIT_START")
    restarted = int(start) > 1 if start else int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") or 0) > 0
    if restarted and root and not cfg.options.get("resume") and has_checkpoint(root):
        return cfg.replace(options={**cfg.options, "resume": True})
    return cfg


def open_group_for_this_attempt(gpu: bool) -> bool:
    """Under torchrun's agent store, open the process group on a store namespaced by attempt.

    torchrun's workers reach the TCPStore its agent serves (TORCHELASTIC_USE_AGENT_STORE=True),
    and torch's env:// rendezvous assumes "a new TCPStore for every retry" — but the agent keeps
    the same store across `--max-restarts` attempts, so a restarted gloo group reads the previous
    attempt's worker addresses from it and fails with "Connection refused" (checked with torch
    2.13 and a 10-line script). So every rank counts its own starts in that store, and the n-th
    start of every rank meets under the key prefix `mgpukit/start_n`. The count is used rather
    than TORCHELASTIC_RESTART_COUNT because across nodes the agents' counts drift apart: an agent
    whose workers were still alive when another node failed restarts them as a membership change
    and does not count it. (It assumes every rank of a round reaches this point; a worker killed
    before it does leaves the next round waiting until its timeout.) Returns whether it opened
    the group; the namespace is kept in MGPUKIT_START for `runtime.peers`.
    """
    if (os.environ.get("TORCHELASTIC_USE_AGENT_STORE") != "True" or dist.is_initialized()
            or "MASTER_ADDR" not in os.environ):
        return False

    rank, world_size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    timeout = timedelta(minutes=10)
    agent_store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]),
                                is_master=False, timeout=timeout)
    start = agent_store.add(f"mgpukit/starts/{rank}", 1)
    os.environ["MGPUKIT_START"] = str(start)
    dist.init_process_group("nccl" if gpu else "gloo", timeout=timeout, rank=rank, world_size=world_size,
                            store=dist.PrefixStore(f"mgpukit/start_{start}", agent_store))
    return True


def gather_nodes(world_size: int) -> NodeLayout:
    """Every rank's node (GROUP_RANK from torchrun, which `accelerate launch` runs too) and the
    host it runs on, shared once over the process group: the same on every rank."""
    mine = (node_rank_from_env(), socket.gethostname())
    every = [mine] * world_size
    if dist.is_initialized() and world_size > 1:
        dist.all_gather_object(every, mine)
    hosts = {}
    for node, host in every:
        hosts.setdefault(node, host)
    return NodeLayout(of_rank=tuple(n for n, _ in every),
                      hosts=tuple(hosts.get(n, "") for n in range(max(hosts) + 1)))


def teardown() -> None:
    """Leave together: nobody tears the group down while a peer still reads from it."""
    if dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()
