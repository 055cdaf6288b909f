"""No worker, nor anything a worker started, outlives the process that launched it.

A launch ends its workers itself when it returns, fails, times out or is interrupted (the
launcher's `finally`). That is not enough when the *parent* dies without running its
`finally`: SIGKILL, SIGTERM or SIGHUP to a process that keeps their default action (a shell's
`kill`, a closed terminal, a batch scheduler ending a job). Three mechanisms, measured one by
one (`research/probe_orphans.py`: `mgpukit run ddp` killed while training, its processes
counted 5 s later) — each closes a gap the others leave:

1. **A parent-death signal** (Linux `prctl(PR_SET_PDEATHSIG, SIGKILL)`, set first thing in
   every worker): the kernel kills the worker when its parent dies, however it dies, even if
   the worker is stopped or stuck in native code. Alone it leaves the worker's own children
   (a `subprocess` a rank started) running under init. It fires when the *thread* that forked
   the worker ends — `launch` forks from the calling thread and blocks it until the workers
   are gone, so that thread outlives them.
2. **A process group per worker** (`setpgid(0, 0)` in the worker): everything the worker
   starts is in its group, and `killpg` reaches it even after it was re-parented away from the
   worker (which a walk of the process tree cannot). It also keeps the terminal's Ctrl-C
   (sent to the foreground group) for the parent, which ends the workers itself.
3. **A reaper** (`Reaper`): a tiny `/bin/sh` started by the parent in a session of its own,
   deaf to HUP/INT/TERM, blocked reading a pipe only the parent writes. When the parent dies
   — any way at all — the kernel closes the pipe, the read returns, and the reaper kills every
   worker's group, then removes the launch's temporary folder (the workers' logs), which the
   parent's own clean-up never reached. On a normal end the parent writes a line and the
   reaper exits quietly.

Measured alone: (1) ends the workers but not their children; (2) needs a living parent to
call `killpg`; (3) ends both, but only once the reaper is running (a few ms after the fork),
and not if someone kills the reaper itself. Together no process of a launch survived SIGTERM,
SIGKILL or SIGHUP of the parent (`tests/test_lifeline.py`).

4. **A tag in the environment** (`LAUNCH_TAG`): a descendant that detaches itself — `setsid -f`,
   a daemon's double fork: a session and a group of its own, re-parented to init — escapes
   1-3: no group to kill, no parent to die with. Every worker starts with
   ``MGPUKIT_LAUNCH=<pid>-<random>`` in its environment, which whatever it starts inherits;
   at teardown the parent (`kill_tagged`), or the reaper when the parent died, kills every
   process whose environment carries the launch's tag (``/proc/<pid>/environ``). A prctl
   child subreaper (``PR_SET_CHILD_SUBREAPER``) was the other way: it catches the orphans only
   while the parent lives, and makes a notebook's kernel the parent of every orphan of the
   session. The limit, stated in the README: a descendant that replaces its environment
   (``env -i``, ``execve`` with an empty one) carries no tag and escapes (tests/test_detached.py).
"""
from __future__ import annotations

import ctypes
import ctypes.util
import os
import secrets
import signal
import subprocess
import sys

import psutil

PR_SET_PDEATHSIG = 1  # <linux/prctl.h>

LAUNCH_TAG = "MGPUKIT_LAUNCH"  # 4.: in every worker's environment, inherited by what it starts

_REAPER_SCRIPT = ('trap "" HUP INT TERM QUIT; folder=$1; tag=$2; shift 2; '
                  'if read _; then exit 0; fi; '  # a line: the parent ended the launch itself
                  'for g in "$@"; do kill -KILL "-$g" 2>/dev/null; done; '  # EOF: it died
                  'for round in 1 2; do '  # 4.: detached descendants, by their tag (twice: a fork between)
                  f'for f in $(grep -lzx "{LAUNCH_TAG}=$tag" /proc/[0-9]*/environ 2>/dev/null); do '
                  'p=${f#/proc/}; kill -KILL "${p%/environ}" 2>/dev/null; done; done; '
                  'if [ -n "$folder" ]; then rm -rf -- "$folder"; fi; exit 0')  # and its launch folder


def _prctl():
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    except OSError:
        return None
    fn = libc.prctl
    fn.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
    return fn


def die_with_parent(parent_pid: int) -> None:
    """In a freshly forked worker: own process group, killed when the parent dies (1., 2.)."""
    try:
        os.setpgid(0, 0)
    except OSError:  # already a group or session leader: nothing to do
        pass
    prctl = _prctl()
    if prctl is not None:
        prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent_pid:  # the parent died before the signal was armed
        os._exit(1)


def own_group(pid: int) -> None:
    """The parent's half of `die_with_parent`: put worker `pid` in its own group now, so no
    teardown can run between the fork and the worker's own `setpgid`."""
    try:
        os.setpgid(pid, pid)
    except OSError:  # it did it already, or it is gone
        pass


def kill_groups(pids) -> None:
    """SIGKILL the process group of each worker in `pids` (the worker and what it started)."""
    for pid in pids:
        try:
            os.killpg(pid, signal.SIGKILL)
        except OSError:  # no such group (nothing of it is left), or not ours
            pass


def launch_tag() -> str:
    """A value of `LAUNCH_TAG` no other launch has: this process's pid and 48 random bits."""
    return f"{os.getpid()}-{secrets.token_hex(6)}"


def kill_tagged(tag: str, *, rounds: int = 3) -> list[int]:
    """SIGKILL every process (but this one) whose environment has ``LAUNCH_TAG=tag`` — what a
    launch's workers started, detached or not (4.) — and wait for them; repeated while new ones
    appear (a daemon may fork between the scan and the kill). Returns the pids killed."""
    killed = []
    for _ in range(rounds):
        found = []
        for pid in _carriers(tag):
            try:
                proc = psutil.Process(pid)
                proc.kill()
                found.append(proc)
            except psutil.Error:  # gone already
                continue
        if not found:
            break
        psutil.wait_procs(found, timeout=5)
        killed += [p.pid for p in found]
    return killed


def _carriers(tag: str) -> list[int]:
    """Pids (but this one) whose environment holds ``LAUNCH_TAG=tag``: read from /proc directly
    on Linux (a few ms for a few hundred processes; psutil's parsed dicts took 80), else psutil."""
    me, entry = os.getpid(), f"{LAUNCH_TAG}={tag}".encode()
    if os.path.isdir("/proc/self"):
        pids = []
        for name in os.listdir("/proc"):
            if not name.isdigit() or int(name) == me:
                continue
            try:
                with open(f"/proc/{name}/environ", "rb") as f:
                    if entry in f.read().split(b"\0"):
                        pids.append(int(name))
            except OSError:  # gone, or not ours to read
                continue
        return pids
    out = []
    for proc in psutil.process_iter():
        try:
            if proc.pid != me and proc.environ().get(LAUNCH_TAG) == tag:
                out.append(proc.pid)
        except (psutil.Error, OSError):
            continue
    return out


class Reaper:
    """A process that kills the workers' groups if this process dies before it disarms it (3.)."""

    def __init__(self, pids, *, remove: str | None = None, tag: str | None = None):
        """`remove`: a folder to delete after the kill (the launch's logs under the temp dir);
        `tag`: the launch's `LAUNCH_TAG` value, whose carriers are killed too (4.)."""
        self._proc = None
        try:
            self._proc = subprocess.Popen(["/bin/sh", "-c", _REAPER_SCRIPT, "mgpukit-reaper", remove or "",
                                           tag or "-", *map(str, pids)],
                                          stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                          stderr=subprocess.DEVNULL, start_new_session=True,
                                          close_fds=True)
        except OSError:  # no /bin/sh: 1. and 2. still hold
            self._proc = None

    def disarm(self) -> None:
        """The launch ended its workers itself: let the reaper exit without killing anything."""
        if self._proc is None:
            return
        try:
            self._proc.stdin.write(b"done\n")
            self._proc.stdin.close()
        except OSError:
            pass
        try:
            self._proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()

