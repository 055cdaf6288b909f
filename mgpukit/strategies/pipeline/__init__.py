"""Model and pipeline parallelism: the layers cut into stages, micro-batches flowing through.

- `stages`            cut a GPT / MLP into ``p·v`` contiguous stages (full-model names kept)
- `p2p`               activations forward, gradients backward, through the recorder
- `split_backward`    input-grad / weight-grad split for zero-bubble schedules
- `executor`          runs any table of `mgpukit.costmodel.schedules.build_schedule`
- `engine`            the applier (`apply_pipeline`) and the engine the one trainer calls
- `plan`              m, v and the checks; theory
- `pipeline_parallel` hand-written strategies: mp-naive, pp-gpipe, pp-1f1b, pp-interleaved, pp-zb
- `native`            the same split through torch.distributed.pipelining: pp-native-*
- `torch_order`       PyTorch's order of each schedule, as our table (the tests compare them)

The bubble of a run, from its own timeline, is `mgpukit.measure.idle`; equal-cost stages with
several schedules in one launch (bench, notebook 04) are `mgpukit.lessons.pipeline_lab`.
"""
from mgpukit.strategies.pipeline import native, pipeline_parallel  # noqa: F401  (registers)
