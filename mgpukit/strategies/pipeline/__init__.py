"""Model and pipeline parallelism: the layers cut into stages, micro-batches flowing through.

- `stages`            cut a GPT / MLP into ``p·v`` contiguous stages (full-model names kept)
- `p2p`               activations forward, gradients backward, through the recorder
- `split_backward`    input-grad / weight-grad split for zero-bubble schedules
- `executor`          runs any table of `mgpukit.costmodel.schedules.build_schedule`
- `bubble`            the bubble of a run, from its own timeline
- `train`, `plan`     the shared training loop; m, v and the checks; theory
- `pipeline_parallel` hand-written strategies: mp-naive, pp-gpipe, pp-1f1b, pp-interleaved, pp-zb
- `native`            the same split through torch.distributed.pipelining: pp-native-*
- `lab`               equal-cost stages, several schedules in one launch (bench, notebook)
- `torch_order`       PyTorch's order of each schedule, as our table (the tests compare them)
"""
from mgpukit.strategies.pipeline import native, pipeline_parallel  # noqa: F401  (registers)
