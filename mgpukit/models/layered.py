"""What an applier may read of a model: the `Layered` protocol.

The appliers cut and wrap a model from outside (`strategies/`): a pipeline splits its repeated
layers into stages and puts what comes before them on the first stage and what comes after on
the last (`pipeline/stages.py`), autocast wraps each piece (`policies/precision.py`),
activation checkpointing recomputes whole layers or their attention (`policies/checkpointing.py`).
So a model says what those are — instead of the appliers asking `hasattr(model, "blocks")`:

    layers_name   the attribute holding the repeated layers ("blocks": GPT; "layers": MLP)
    layer_kind    what to call one of them in a message ("transformer blocks")
    repeated()    the repeated layers, in order (an `nn.ModuleList`)
    embed, head   the module before the layers and after them (None: the model has none)
    has_attention its layers hold an attention core (`block.attn.core`), selective checkpointing's unit
"""
from __future__ import annotations

from typing import Any, ClassVar, Protocol

from torch import nn


class Layered(Protocol):
    cfg: Any
    layers_name: ClassVar[str]
    layer_kind: ClassVar[str]
    has_attention: ClassVar[bool]
    embed: nn.Module | None
    head: nn.Module | None

    def repeated(self) -> nn.ModuleList: ...
