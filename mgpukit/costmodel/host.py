"""The host's side of a step in closed form: seconds to *issue* the ops of one micro-batch.

On a GPU the host (Python, the dispatcher, autograd) issues kernels while the device runs the
earlier ones; a step takes the later of the two (`costmodel.steptime`, one convention with the
emulator's virtual clock, `measure.vclock`). The host's part is a count of ops by context times
the profile's cost per op (`HardwareProfile.dispatch_overhead`: forward with autograd, the
autograd engine's backward, no_grad; ``model_code_factor`` for the model's own ops), plus
``collective_launch`` per collective.

The counts are the kit's GPT's, per layer and micro-batch, counted under a dispatch mode on CPU
(`tests/test_host_ops.py` holds the constants to that count):

- eager: forward — 2 norms, 4 linears (q, k, v, o), attention, 2 residual adds, fc1,
  activation, fc2 (12); backward — 3 kernels per linear (dX, dW, the bias's column sum), the
  attention's, norms', activation's and 4 gradient adds (26), then one accumulation per
  parameter tensor into ``.grad`` — only where ``.grad`` already holds one: the kit's trainer
  frees the gradients between steps where ``pp = 1`` (as torch's ``zero_grad`` does by default),
  so a step's first micro-batch assigns them and issues no add; a pipeline keeps them (every
  micro-batch adds; `training.trainer`, ``frees_grads``). `host_seconds` counts a step.
  Mixed precision adds autocast's casts: 16 per layer each way (weights,
  biases, the four linears' fp32 inputs), issued by torch itself, not the model.
- tensor parallel (`strategies.tensor_parallel`, Megatron's f and g as autograd functions):
  each row-parallel linear adds its bias after the sum (+2 forward, its backward is the same
  column sum), g's forward clones the partial sum it all-reduces (+2 no_grad: a function's
  forward records nothing), f's backward clones the gradient it all-reduces (+2 backward), and
  4 collectives (g forward, f backward, twice).
"""
from __future__ import annotations

from mgpukit.costmodel.profile import HardwareProfile
from mgpukit.costmodel.layout import Layout
from mgpukit.costmodel.shapes import ModelShape

FWD_OPS_PER_LAYER = 12
BWD_OPS_PER_LAYER = 26
CASTS_PER_LAYER = 16
# tensor parallelism (no sequence parallelism), per layer: (forward, no_grad, backward) ops, collectives
TP_OPS_PER_LAYER = (2, 2, 2)
TP_COLLECTIVES_PER_LAYER = 4


def host_seconds(shape: ModelShape, layout: Layout, profile: HardwareProfile, stage: int) -> float:
    """Host seconds to issue one step's micro-batches on pipeline ``stage``: each its forward
    and backward, and the accumulations into ``.grad`` of every micro-batch that finds one there
    (all of them in a pipeline, all but the first where ``pp = 1``; module docstring)."""
    m = layout.num_micro_batches
    adding = m if layout.pp > 1 else m - 1  # micro-batches whose backward adds into .grad
    return ((m - adding) * host_seconds_per_micro_batch(shape, layout, profile, stage, accumulate=False)
            + adding * host_seconds_per_micro_batch(shape, layout, profile, stage, accumulate=True))


def host_seconds_per_micro_batch(shape: ModelShape, layout: Layout, profile: HardwareProfile, stage: int,
                                 *, accumulate: bool = True) -> float:
    """Host seconds to issue one micro-batch's forward and backward on pipeline ``stage``
    (module docstring); 0 where the profile has no host figures. A gated MLP adds one linear and
    one multiply; the embedding and the head + loss add their handful. ``accumulate``: with one
    add into ``.grad`` per parameter tensor (False: the gradients were freed, backward assigns)."""
    if not profile.async_launch:
        return 0.0
    fwd, bwd = profile.dispatch_overhead("forward", model_code=True), profile.dispatch_overhead("backward", model_code=True)
    gate = 1 if shape.gated_mlp else 0
    tensors = 4 * (2 if shape.bias else 1) + (2 + gate) * (2 if shape.bias else 1) + 2 * (2 if shape.norm == "layernorm" else 1)
    tensors = tensors if accumulate else 0
    per_layer = (FWD_OPS_PER_LAYER + 2 * gate) * fwd + (BWD_OPS_PER_LAYER + 4 * gate + tensors) * bwd
    if layout.dtype != "fp32":
        per_layer += CASTS_PER_LAYER * (profile.dispatch_overhead("forward") + profile.dispatch_overhead("backward"))
    if layout.tp > 1 and not layout.sp:
        f, ng, b = TP_OPS_PER_LAYER
        per_layer += (f * fwd + ng * profile.dispatch_overhead("no_grad", model_code=True) + b * bwd
                      + TP_COLLECTIVES_PER_LAYER * profile.collective_launch)
    host = layout.layers_of_stage(shape.n_layer, stage) * per_layer
    embeddings = 2 if shape.learned_pos else 1
    head = ((2 if shape.norm == "layernorm" else 1) + (0 if shape.tied_embeddings else 1)
            + (1 if shape.lm_head_bias else 0))
    if stage == 0:  # lookups and the position add; backward: their scatters, and their accumulation
        host += 4 * fwd + (5 - embeddings + (embeddings if accumulate else 0)) * bwd
    if stage == layout.pp - 1:  # final norm, lm_head, target copy, log-softmax, NLL; backward, accumulation
        host += 5 * fwd + (9 - head + (head if accumulate else 0)) * bwd
    return host
