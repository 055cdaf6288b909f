"""The result record (docs/ARCHITECTURE.md, "The result record"): what every run returns, and
what plots, tests, benchmarks and the report read. Built in the parent from each rank's
`Recorder.result()`."""
from __future__ import annotations

from pathlib import Path

from mgpukit.files import write_text
from mgpukit.strict_json import from_json, to_json
from mgpukit.measure.idle import idle_split
from mgpukit.measure.spread import summarize


def build_record(*, strategy: str, mode: str, profile: str | None, dims: dict, config: dict,
                 ranks: list[dict], tokens_per_step: int, env: dict, theory: dict | None = None,
                 parity: dict | None = None) -> dict:
    """Merge per-rank results into one record (losses and step times come from rank 0:
    losses are already the mean over ranks, and every rank times the same synchronous step)."""
    lead = ranks[0]
    step_times = lead["step_time_s"]
    # the median of the steady steps (the first is warm-up: allocations, DDP's bucket rebuild)
    # with its spread (measure/spread.py)
    step_time = summarize(step_times, source="emulated" if mode == "emulated" else "measured")
    median = step_time["median_s"] if step_time else None
    record = {
        "strategy": strategy,
        "mode": mode,
        "profile": profile,
        "world_size": len(ranks),
        "dims": dims,
        "nodes": nodes_of(ranks),
        "config": config,
        "losses": lead["losses"],
        "grad_norms": lead["grad_norms"],
        "step_time_s": step_times,
        "step_time": step_time,
        # a run resumed from a checkpoint ran (and timed) only steps resumed_from_step.. ;
        # step_time_s[i] is step resumed_from_step + i (losses cover every step)
        "resumed_from_step": lead.get("extra", {}).get("resumed_from_step"),
        "tokens_per_s": (tokens_per_step / median) if median else None,
        "memory": {str(r["rank"]): r["memory"] for r in ranks},
        "comm": {str(r["rank"]): r["comm"] for r in ranks if r["comm"] is not None},
        "timeline": sorted((e for r in ranks for e in r["timeline"]),
                           key=lambda e: (e["rank"], e["start"])),
        "bubble_fraction": lead.get("extra", {}).get("bubble_fraction"),
        "parity": parity,
        "theory": theory or {},
        "extra": {str(r["rank"]): r.get("extra", {}) for r in ranks if r.get("extra")},
        "env": env,
        "threads": {"per_worker": lead.get("threads")},  # intra-op threads (experiment adds the policy)
        "flags": [],  # figures that break a physical bound (measure/bounds.py)
    }
    if record["bubble_fraction"] is not None:  # a pipeline: why it idles (measure.idle)
        record["idle_split"] = idle_split(record)
    return record


def nodes_of(ranks: list[dict]) -> dict:
    """Which node each rank ran on: ``{"count", "ranks_per_node", "of_rank", "hosts"}``
    (`of_rank[r]` is rank r's node index; `hosts[n]` node n's host name where known — two
    "nodes" on one machine, as in the loopback tests, share a host name)."""
    of_rank = [r.get("node", 0) for r in sorted(ranks, key=lambda r: r["rank"])]
    hosts: dict[int, str] = {}
    for r in ranks:
        if r.get("host"):
            hosts.setdefault(r.get("node", 0), r["host"])
    count = len(set(of_rank))
    return {"count": count, "ranks_per_node": max(of_rank.count(n) for n in set(of_rank)) if of_rank else 0,
            "of_rank": of_rank, "hosts": [hosts.get(n) for n in sorted(hosts)]}


def save_record(record: dict, path: str | Path) -> Path:
    """Write `record` as strict JSON, atomically (a failed write leaves the old file whole);
    a non-finite number is written as the string "NaN" / "Infinity" / "-Infinity"."""
    return write_text(path, to_json(record, indent=1), what="record")


def load_record(path: str | Path) -> dict:
    """Read a record `save_record` wrote ("NaN" / "Infinity" strings back as floats)."""
    return from_json(Path(path).read_text())


_TRACE_STREAMS = ("compute", "comm", "host")  # one thread each; "host": emulated GPU profiles


def to_chrome_trace(record: dict) -> dict:
    """The record's timeline as a Chrome / Perfetto trace (open in ui.perfetto.dev or
    chrome://tracing): one process per rank, one thread per stream, times in microseconds."""
    label = "emulated" if record.get("mode") == "emulated" else "measured"
    events = []
    for rank in sorted({e["rank"] for e in record["timeline"]}):
        events.append({"ph": "M", "name": "process_name", "pid": rank,
                       "args": {"name": f"rank {rank} ({label})"}})
        for tid, stream in enumerate(_TRACE_STREAMS):
            events.append({"ph": "M", "name": "thread_name", "pid": rank, "tid": tid,
                           "args": {"name": stream}})
    for e in record["timeline"]:
        name = e["kind"] if e.get("microbatch") is None else f"{e['kind']} mb{e['microbatch']}"
        events.append({
            "ph": "X", "name": name, "cat": e["stream"], "pid": e["rank"],
            "tid": _TRACE_STREAMS.index(e["stream"]) if e["stream"] in _TRACE_STREAMS else 1,
            "ts": e["start"] * 1e6, "dur": max(0.0, e["end"] - e["start"]) * 1e6,
            "args": {k: e.get(k) for k in ("microbatch", "stage", "step")},
        })
    return {"traceEvents": events, "displayTimeUnit": "ms",
            "otherData": {"strategy": record["strategy"], "mode": record["mode"],
                          "profile": record.get("profile")}}


def save_chrome_trace(record: dict, path: str | Path) -> Path:
    return write_text(path, to_json(to_chrome_trace(record)), what="trace")
