"""Plotly figures from result records (docs/ARCHITECTURE.md, "The result record").

Every function takes data and returns a `plotly.graph_objects.Figure`; none prints, none trains.
Every title says where its numbers come from — measured, emulated (virtual clock) or predicted.

- `style`     colours per kind, units, `source_label`
- `layout`    titles that wrap, legends that fit (`finish`, `legend_fits`, `retitle`)
- `training`  loss parity, speedup, memory per rank
- `timeline`  per-rank Gantt, pipeline bubble
- `comm`      bytes sent per rank, bus bandwidth vs message size
- `summary`   `table_summary`, one row per record

One module per topic beside them, imported by name (`from mgpukit.plots.memory import …`):
`alpha_beta`, `compression`, `memory`, `pipeline`, `sharding` (the widgets' figures, which
`mgpukit.widgets` only calls), `hybrid`, `long_context`, `planner`, `planning`, `spot`,
`tensor_parallel`.
"""

from .comm import plot_bandwidth, plot_comm_bytes
from .layout import finish, legend_fits, retitle
from .style import KIND_COLORS, MEMORY_COLORS, format_time, kind_color, record_name, source_kind, source_label
from .summary import format_summary, table_summary
from .timeline import plot_bubble, plot_timeline
from .training import plot_loss_parity, plot_memory, plot_speedup

__all__ = [
    "KIND_COLORS",
    "finish",
    "format_time",
    "legend_fits",
    "retitle",
    "format_summary",
    "MEMORY_COLORS",
    "kind_color",
    "plot_bandwidth",
    "plot_bubble",
    "plot_comm_bytes",
    "plot_loss_parity",
    "plot_memory",
    "plot_speedup",
    "plot_timeline",
    "record_name",
    "source_kind",
    "source_label",
    "table_summary",
]
