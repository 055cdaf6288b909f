"""Why a launch failed: the errors it raises, and how the root cause is found among the ranks.

Every failing rank writes a timestamped traceback into the launch's store (`ERROR_KEY`), so the
parent can tell the first failure from the peers that failed because of it; a rank that died
without raising (a segfault, `os._exit`, the out-of-memory killer) is found from its exit code
and the tail of its output.
"""
from __future__ import annotations

import os
import signal
from collections.abc import Sequence

ERROR_KEY = "mgpukit/error/{rank}"  # value: "<time_ns>\n<traceback>"
# A rank that stopped on purpose — its exception class has an `exit_code` (NonFiniteError, an
# OutputError, a refused checkpoint) — also leaves "<exit code>\n<its message>" here: the
# CLI then prints that one line, not the traceback.
ONE_LINE_KEY = "mgpukit/one-line/{rank}"
PEER_GONE = ("Connection reset by peer", "Connection closed by peer", "Broken pipe")


class LaunchError(RuntimeError):
    """A launch could not start, or a worker failed. The message says what to change."""


class WorkerError(LaunchError):
    """A rank raised (or died). `rank` is the root cause, `traceback` its formatted traceback."""

    def __init__(self, message: str, *, rank: int, traceback: str, exitcode: int | None,
                 one_line: str | None = None, exit_code: int = 1):
        super().__init__(message)
        self.rank = rank
        self.traceback = traceback
        self.exitcode = exitcode  # the process's (negative: the signal that ended it)
        self.one_line = one_line  # the root cause's own message, when it stopped on purpose
        self.exit_code = exit_code  # what the CLI exits with


class LaunchTimeout(LaunchError):
    """The launch ran past its time limit; `ranks` never finished."""

    def __init__(self, message: str, *, ranks: Sequence[int]):
        super().__init__(message)
        self.ranks = list(ranks)


def worker_error(log_dir: str, result, store, n: int, exitcodes: dict | None = None, *,
                 ended: dict | None = None) -> WorkerError:
    """Find the root cause among the failed ranks; the others are listed, not blamed.

    Ranks that torch terminated after the first failure (SignalException, SIGTERM) are not
    failures. Root cause, in order: a rank killed by a signal nobody in the launch sends
    (SIGKILL, SIGSEGV, SIGABRT: the OOM killer, a native crash) — its peers' errors are its
    consequences, whatever they say; else the earliest rank that raised an error of its own;
    else a rank that died without raising (os._exit); else the earliest "peer closed the
    connection". `exitcodes`: every rank's exit code where known (torch's result only keeps
    the first failure it noticed, which need not be the first that happened). `ended`: the
    ranks the launch killed itself after the first failure ({rank: psutil status then}): never
    a crash; a *stopped* one is the root cause when its peers timed out waiting for it.
    """
    ended = ended or {}
    raised = {}
    for r in range(n):
        key = ERROR_KEY.format(rank=r)
        if store.check([key]):
            stamp, trace = store.get(key).decode(errors="replace").split("\n", 1)
            if "SignalException" not in trace:  # terminated by us after the first failure
                raised[r] = (int(stamp), trace.rstrip())
    terminated = {r for r in range(n) if store.check([ERROR_KEY.format(rank=r)])} - set(raised)
    codes = {r: f.exitcode for r, f in result.failures.items()}
    codes.update({r: c for r, c in (exitcodes or {}).items() if c is not None and r not in codes})
    died = sorted(r for r, c in codes.items() if c and r not in raised and r not in terminated
                  and c != -signal.SIGTERM and r not in ended)
    crashed = [r for r in died if codes[r] < 0]  # by a signal, and not our SIGTERM
    own = {r: v for r, v in raised.items() if not any(p in v[1] for p in PEER_GONE)}
    if crashed:
        rank = crashed[0]
    elif own:
        rank = min(own, key=lambda r: own[r][0])
    elif died:
        rank = died[0]
    else:
        rank = min(raised, key=lambda r: raised[r][0])
    if rank in raised:
        how, trace = "raised", raised[rank][1]
        if _timed_out(trace):
            trace += ("\n(A collective waited past its timeout: the other ranks never joined it, or "
                      "joined a different one. Rerun with --debug-collectives "
                      "(debug_collectives=True) to have torch name the mismatch.)")
        if rank not in own:
            trace += ("\n(A peer left while this rank waited on it: a rank died, or ranks called "
                      "different collectives. Ranks must call the same collectives in the same order.)")
    else:
        code = codes[rank]
        how = f"died with exit code {code}{_signal_name(code)}"
        trace = "(no Python traceback: the process ended without raising an exception)"
        trace += _LIKELY_CAUSE.get(code, "")
        trace += tail_logs(log_dir, [rank])
    stopped = sorted(r for r, state in ended.items() if state == "stopped")
    timed_out = rank in raised and _timed_out(raised[rank][1])
    if ended:
        trace += "\n(" + "; ".join(f"rank {r} was {_STATES.get(s, s)} when rank {rank} failed" for r, s
                                    in sorted(ended.items())) + ": mgpukit ended it.)"
    frozen = bool(stopped and timed_out)
    if frozen:  # the peers waited on a frozen rank until their timeout
        waited, rank = rank, stopped[0]
        how = (f"was stopped (SIGSTOP, Ctrl-Z or a debugger: it could not run) and never joined the "
               f"collective rank {waited} waited in; rank {waited} gave up at its collective "
               f"timeout (--collective-timeout) and mgpukit ended rank {rank}. Rank {waited}'s error")
    others = sorted(r for r in {*raised, *died} if r != rank)
    also = f" (rank(s) {others} failed after it)" if others and not frozen else ""
    exitcode = codes.get(rank)
    one_line, exit_code = None, 1
    key = ONE_LINE_KEY.format(rank=rank)
    if rank in raised and store.check([key]):
        code, one_line = store.get(key).decode(errors="replace").split("\n", 1)
        exit_code, one_line = int(code), " ".join(one_line.split())
    return WorkerError(f"rank {rank} {how}{also}:\n{trace}", rank=rank, traceback=trace,
                       exitcode=exitcode, one_line=one_line, exit_code=exit_code)


def _timed_out(trace: str) -> bool:
    lines = trace.lower().splitlines()
    return "Timed out waiting" in trace or bool(lines and "timed out" in lines[-1])


_STATES = {"stopped": "stopped (SIGSTOP, Ctrl-Z or a debugger)", "running": "still running",
           "sleeping": "still running (waiting)", "disk-sleep": "still running (in I/O)"}

_LIKELY_CAUSE = {
    -signal.SIGKILL: ("\n(SIGKILL comes from outside the process; most often the kernel's out-of-memory "
                      "killer — see `dmesg` — so try fewer workers, a smaller model or batch.)"),
    -signal.SIGABRT: ("\n(SIGABRT: a C++ library aborted, e.g. gloo on a collective whose sizes differ "
                      "between ranks; its reason is in the output below.)"),
    -signal.SIGSEGV: "\n(SIGSEGV: a crash in native code; the output below shows where.)",
}


def _signal_name(exitcode: int | None) -> str:
    if exitcode is not None and exitcode < 0:
        try:
            return f" (signal {signal.Signals(-exitcode).name})"
        except ValueError:
            pass
    return ""


def tail_logs(log_dir: str, ranks, lines: int = 20) -> str:
    """The end of each rank's output, or the part of a fault dump that explains it."""
    out = []
    for r in ranks:
        path = os.path.join(log_dir, f"{r}.log")
        if os.path.isfile(path):
            with open(path, errors="replace") as f:
                text, what = explain_output(f.read(), lines)
            if text:
                out.append(f"\n--- rank {r} output ({what}) ---\n" + "\n".join(text))
    return "".join(out)


_FRAMES_BELOW = ("mgpukit/runtime/launcher.py", "torch/distributed/elastic/", "multiprocessing/")


def explain_output(text: str, lines: int = 20) -> tuple[list[str], str]:
    """(the lines worth showing, what they are) from a rank's output.

    A native abort (gloo's "Received data size doesn't match expected size. Is there a
    distributed collective mismatch in your code?") is printed *before* Python's fault dump,
    whose thread stacks and "Extension modules" list would push it out of a plain tail. So for
    a dump: the lines before it, the fatal line, and the frames of each thread down to the
    launcher's own (the user's code is above it)."""
    all_lines = text.rstrip().splitlines()
    fatal = next((i for i, line in enumerate(all_lines) if line.startswith("Fatal Python error")), None)
    if fatal is None:
        tail = all_lines[-lines:]
        return tail, f"last {len(tail)} lines"
    keep = all_lines[max(0, fatal - lines):fatal + 1]
    skipping = False
    for line in all_lines[fatal + 1:]:
        if line.startswith("Extension modules:"):
            break
        if line.startswith(("Thread ", "Current thread ")):
            skipping = False
            keep += ["", line]
        elif not skipping and any(p in line for p in _FRAMES_BELOW):
            skipping = True  # the launcher and the process machinery below the user's code
        elif not skipping and line.strip():
            keep.append(line)
    return keep, "its native error, and the Python stacks down to the launcher"

