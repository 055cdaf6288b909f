"""What a study does in the parent process before it launches workers."""
from __future__ import annotations


def warm_parent() -> None:
    """Import in this process what every worker would otherwise import for itself.

    Workers are forked: a module the parent already imported is free for them. `torch._dynamo`
    (imported by the first optimizer built) and Accelerate take ~1.5 s of CPU per worker
    otherwise — 12 s for an 8-worker launch on 2 cores.
    """
    # lazy: importing them in this process, before a launch forks, is what this function is for
    import accelerate  # noqa: F401
    import torch._dynamo  # noqa: F401  (lazy: as the line above)


