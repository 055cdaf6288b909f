"""The error bar every prediction carries: a prediction interval over the validation table's errors.

A prediction's error bar is a *prediction interval* for the planner's error on
a run it has not seen (:mod:`~mgpukit.costmodel.bands`): from the rows validated for its
framework (``Framework.validated_by``; all rows when fewer than :data:`MIN_ROWS`) on the GPU
generation at hand (A100; H100/H200), ``mean ± t · sqrt(s_w²(1 + 1/n) + s_b²)`` — the spread
within a (framework, generation) group pooled over the table, Student's ``t`` and ``1/n`` for
few runs, and, where the generation at hand has no run of the framework, the spread across
generations (or frameworks) ``s_b`` — widened to hold every observed error. If the planner was
optimistic (error > 0), a predicted step time ``T`` reads as up to ``T·(1 + high)`` and a
predicted MFU as down to ``MFU / (1 + high)``; days and cost follow. It covers errors of the
kind the table holds, no more: :func:`unchecked` names what a layout uses that none of its
runs did (fp8 GEMMs, flash attention, no recompute, a schedule, ZeRO-3, ...), where the error
may be larger; plans carry it (``Plan.unchecked``) and the CLI prints it beside the error bar.
The memory bar (:func:`memory_error_bar`) is the same interval over the planner's peak against
the allocator peaks measured on one H200 and one H100.

The rows and their errors are :mod:`~mgpukit.costmodel.validation`'s; the interval's statistics are
:mod:`~mgpukit.costmodel.bands`'. :func:`validation_report` is the table and the bars as JSON-ready
data (``mgpukit plan --validation --json``).
"""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass
from functools import lru_cache

from mgpukit.costmodel import bands
from mgpukit.costmodel.frameworks import Framework, get_framework, list_frameworks
from mgpukit.costmodel.layout import Layout
from mgpukit.costmodel.validation import attention_of, validation_table

MIN_ROWS = 3


@dataclass(frozen=True, kw_only=True)
class ErrorBar:
    """The planner's error on throughput that a new run of ``kind`` may show: ``low`` (most
    pessimistic: predicted slower than real) … ``high`` (most optimistic), the prediction interval
    of :mod:`~mgpukit.costmodel.bands` over the errors of the ``rows`` published runs named in
    ``runs`` (``observed``: their lowest and highest error)."""

    low: float
    high: float
    rows: int
    kind: str  # the frameworks whose runs it rests on ("all frameworks: ..." when too few)
    generation: str = ""  # the GPU generation it is for ("" : any)
    runs: tuple[str, ...] = ()
    observed: tuple[float, float] = (0.0, 0.0)
    how: str = ""  # how the band was widened beyond the observed errors
    attention: tuple[str, ...] = ()  # the attention kernel generations its runs were charged (attention_of)
    of: str = "published runs"
    plus: str = "optimistic"  # what a positive error means

    def time(self, seconds: float) -> tuple[float, float]:
        """A predicted duration (step, days, GPU-hours, cost) as the range the errors allow: an
        optimistic planner (error > 0) means the real duration is longer."""
        return seconds * (1 + self.low), seconds * (1 + self.high)

    def rate(self, value: float) -> tuple[float, float]:
        """A predicted rate (MFU, tokens/s) as the range the errors allow: a predicted MFU above
        the published runs' (error > 0) widens the range downward."""
        return value / (1 + self.high), value / (1 + self.low)

    def held(self, predicted_bytes: float) -> tuple[float, float]:
        """A predicted memory peak as the range of real peaks the memory errors allow (error > 0:
        the planner charged more than the GPU held, so the real peak is lower)."""
        return self.rate(predicted_bytes)

    def describe(self) -> str:
        on = f" on {self.generation}" if self.generation else ""
        kernels = f"; attention {'/'.join(self.attention)}" if self.attention else ""
        return (f"errors {self.low:+.0%} … {self.high:+.0%}{on} (+: {self.plus}) from {self.rows} {self.of} "
                f"({self.kind}; observed {self.observed[0]:+.0%} … {self.observed[1]:+.0%}{self.how}{kernels})")


def _rows_of(framework: "str | Framework | None") -> tuple[list[dict], str]:
    """The validation rows a framework's error bar comes from, and what to call them."""
    fw = get_framework(framework)
    kinds = fw.validated_by or (fw.name,)
    rows = [r for r in validation_table() if r["run"].framework in kinds]
    if len(rows) < MIN_ROWS:
        return list(validation_table()), f"all frameworks: fewer than {MIN_ROWS} runs of {fw.name}"
    return rows, ", ".join(kinds)


def _groups(rows) -> dict[tuple[str, str], list[float]]:
    """Errors by (framework, GPU generation)."""
    out: dict = {}
    for r in rows:
        out.setdefault((r["run"].framework, bands.generation(r["run"].profile)), []).append(r["error"])
    return out


def error_bar(framework: "str | Framework | None" = None, profile=None) -> ErrorBar:
    """The error bar of predictions made for ``framework`` on ``profile``'s GPU generation (any
    generation when None): :mod:`~mgpukit.costmodel.bands`' prediction interval over the runs of
    that framework on that generation; where the generation has none, over all its runs with the
    spread across generations added; where the framework has fewer than :data:`MIN_ROWS` runs and
    none on that generation, over every framework's runs with the spread across frameworks added
    (module docstring)."""
    name = profile if profile is None or isinstance(profile, str) else profile.name
    return _error_bar(get_framework(framework), bands.generation(name) if name else "")


@lru_cache(maxsize=None)  # the search asks once per layout
def _error_bar(framework: Framework, gen: str) -> ErrorBar:
    table = validation_table()
    kinds = framework.validated_by or (framework.name,)
    own = [r for r in table if r["run"].framework in kinds]
    groups = _groups(table)
    s_w, df = bands.pooled_within_sd(groups)
    own_generations = {g for _, g in _groups(own)}
    on_gen = [r for r in own if bands.generation(r["run"].profile) == gen]
    kind, between, how = ", ".join(kinds), 0.0, ""
    if gen and on_gen:  # the framework's own runs on this generation
        used = on_gen
    elif len(own) >= MIN_ROWS:  # its runs on other generations: their offset from this one is unknown
        used = own
        if gen or len(own_generations) > 1:
            several = len(own_generations) > 1
            spread = _groups(own) if several else groups
            between = bands.between_sd([statistics.fmean(v) for v in spread.values()])
            how = ((f"; no run on {gen}:" if gen else ";") + " + the spread across "
                   f"{'generations' if several else 'frameworks and generations'} ±{between:.0%}")
    else:  # too few runs of its own: every framework's (on this generation where there are some)
        used = [r for r in table if bands.generation(r["run"].profile) == gen] or list(table)
        kind = f"all frameworks: fewer than {MIN_ROWS} runs of {framework.name}"
        between = bands.between_sd([statistics.fmean(v) for v in groups.values()])
        how = f"; + the spread across frameworks and generations ±{between:.0%}"
    errors = [r["error"] for r in used]
    low, high = bands.prediction_band(errors, within_sd=s_w, df=df, between=between)
    how = f", n = {len(used)}, t = {bands.t975(df):.2f} × pooled sd {s_w:.1%}" + how
    return ErrorBar(low=low, high=high, rows=len(used), kind=kind, generation=gen,
                    runs=tuple(r["run"].name for r in used), observed=(min(errors), max(errors)), how=how,
                    attention=tuple(sorted({attention_of(r["run"]) for r in used})))


@lru_cache(maxsize=1)
def memory_error_bar() -> ErrorBar:
    """The planner's memory error: predicted / measured peak − 1 (positive: it charges more than
    the GPU held) as a prediction interval over the reference GPUs' peaks (:mod:`bands`)."""
    rows = bands.memory_rows()
    errors = [r["error"] for r in rows]
    s = statistics.stdev(errors)
    low, high = bands.prediction_band(errors, within_sd=s, df=len(errors) - 1)
    devices = sorted({r["device"] for r in rows})
    return ErrorBar(low=low, high=high, rows=len(rows), kind="single-GPU peaks on " + " and ".join(devices), of="measured steps",
                    plus="the planner charges more",
                    runs=tuple(f"{r['config']} ({r['device']})" for r in rows), observed=(min(errors), max(errors)),
                    how=f", n = {len(rows)}, t = {bands.t975(len(rows) - 1):.2f} × sd {s:.1%}; tp/pp/ZeRO sharding unmeasured")


def _features(layout: Layout) -> set[str]:
    """What of a layout changes which terms the time model uses (and so where it can be wrong)."""
    out = {{"fp8": "fp8 GEMMs", "fp32": "fp32"}.get(layout.dtype, "16-bit GEMMs"),
           (f"flash attention ({layout.attention_kernel})" if layout.attention_kernel else "flash attention")
           if layout.flash_attention else "unfused attention",
           {"none": "no recompute", "selective": "selective recompute", "full": "full recompute"}[layout.checkpointing]}
    if layout.pp > 1:
        out.add(f"the {layout.schedule} schedule")
    if layout.zero == 3:
        out.add("ZeRO-3")
    if layout.cp > 1:
        out.add("context parallelism")
    if layout.ep > 1:
        out.add("expert parallelism")
    if layout.tp_overlap:
        out.add("tp overlap")
    return out


def unchecked(layout: Layout, framework: "str | Framework | None" = None) -> tuple[str, ...]:
    """What ``layout`` uses that none of the runs behind its error bar used (e.g. fp8 GEMMs, flash
    attention): there the error bar is the spread of errors on *other* configurations and may
    understate the error. Empty when every feature was validated."""
    rows, _ = _rows_of(framework)
    seen = set().union(*(_features(r["run"].layout) for r in rows))
    return tuple(sorted(_features(layout) - seen))


def error_bars() -> dict[str, ErrorBar]:
    """Every shipped framework's error bar, by framework name."""
    return {name: error_bar(name) for name in list_frameworks()}


def format_error_bars() -> str:
    """One line per framework (all generations), one per framework and GPU generation (what a plan
    on that GPU prints), and the memory bar."""
    lines = ["error bar of each framework's predictions (a prediction interval from the errors above):"]
    for name, eb in error_bars().items():
        lines.append(f"  {name:<17} {eb.describe()}")
        lines += [f"  {'':<17} {error_bar(name, p).describe()}" for p in ("a100-nvlink", "h100-ib")]
    return "\n".join(lines + [f"memory: {memory_error_bar().describe()}"])


def validation_report(rows=None) -> dict:
    """The table (``rows``: :func:`validation_table`'s by default) and the error bars as JSON-ready
    data (``mgpukit plan --validation --json``)."""
    rows = [{"run": r["run"].name, "framework": r["run"].framework, "profile": r["run"].profile,
             "attention": attention_of(r["run"]), "measure": r["run"].measure, "published": r["published"],
             "predicted": r["predicted"],
             "error": r["error"], "source": r["run"].source, "assumed": r["run"].assumed}
            for r in (validation_table() if rows is None else rows)]
    by_generation = {f"{k} on {p}": asdict(error_bar(k, p)) for k in list_frameworks() for p in ("a100-nvlink", "h100-ib")}
    return {"predicted": True, "rows": rows, "error_bars": {k: asdict(v) for k, v in error_bars().items()},
            "error_bars_by_generation": by_generation, "memory_bar": asdict(memory_error_bar())}


NO_PUBLISHED = {"moe": "MoE", "cp": "long-context (cp)"}


@lru_cache(maxsize=None)
def without_published(eb: ErrorBar, kinds: tuple[str, ...]) -> ErrorBar:
    """``eb`` for a plan of a kind no run in the table is (``kinds``: "moe" — a mixture of experts —,
    "cp" — context parallelism): none of the published runs above trained a MoE or split a sequence,
    so the dense band is applied and widened by the spread of the mean errors across (framework, GPU
    generation) groups — the same ``s_b`` a generation with no run of its framework gets — and says so.
    A published MoE or long-context run with its layout and throughput would replace this.

    Read and not (yet) rows, because the source does not tie a throughput to one stated layout
    under a stated FLOP count:

    * Megatron-Core's MoE README (GitHub NVIDIA/Megatron-LM, the README of its MoE package):
      "468 TFLOPS for Mixtral 8X7B bf16 training" with MCore v0.9, and, for MCore v0.8, a
      "reference parallel mapping" (64 H100, TP 1, EP 8, PP 4, "VP 8", micro-batch 1, global batch
      256, sequence 4,096, dropless). For that mapping (capacity factor 1.0, no recompute, ZeRO-1)
      the planner predicts 454 (1F1B) to 527 (interleaved, v = 8, the pipeline's sends overlapped as
      Megatron-Core does) TFLOP/s per GPU: −3 … +13 % — a consistency check, not a validation row;
      the interleaved figure is a known gap (the token permutation kernels and dropless routing's
      imbalance are not modelled: `tests/test_planner_moe.py`).
    * Llama 3's 128K stage (Dubey et al. 2024, Table 4, row 3: 16,384 H100, TP 8, CP 16, PP 16,
      DP 8, 38 % BF16 MFU): layout and throughput are published, but not whether the MFU counts
      causal attention's FLOPs whole or halved. Counted whole (Megatron's convention, this
      planner's) the planner predicts 59 % (+55 %); halved, 42 % (+11 %). A convention, not a
      measurement: not a row until the paper's count is known."""
    between = bands.between_sd([statistics.fmean(v) for v in _groups(validation_table()).values()])
    what = " or ".join(NO_PUBLISHED[k] for k in kinds)
    return ErrorBar(low=eb.low - between, high=eb.high + between, rows=eb.rows, kind=eb.kind,
                    generation=eb.generation, runs=eb.runs, observed=eb.observed, of=eb.of, plus=eb.plus,
                    how=eb.how + f"; no published {what} run: the dense band, widened ±{between:.0%}")
