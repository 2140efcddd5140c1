"""The board a node's data-parallel ranks share their steps on (step mode, a MoE model): each
rank a row of ``(start, end, own time)`` of the step it runs (seconds on ``time.monotonic``,
which every process of the machine shares), in a small file mapped into every rank's memory.
A rank reads its peers' rows when it plans a step and waits out the longest step a peer is
running (:class:`generation.engine.perf.stalls.DpLockstep`), as vLLM's DP ranks of a MoE model
step together.

Rank 0 creates the file before it starts the other ranks (:func:`create_board`, from
``server.ranks``; it holds a shared lock on it for its life, and a later server removes the
boards no process holds, those of servers killed before they could) and names it in the environment (:data:`BOARD_ENV`); each rank
maps it when its engine starts (:func:`attach_board`).  Rows are written without a lock: a reader that meets a row
half written sees a step that is not running, or the one before, for one plan."""
from __future__ import annotations

import atexit
import fcntl
import glob
import mmap
import os
import tempfile

import numpy as np

BOARD_ENV = "VLLM_SIM_DP_BOARD"
ROW = 3                     # float64 values a rank: start, end, own time


def create_board(ranks: int) -> str | None:
    """A zeroed board for ``ranks`` local ranks, in ``/dev/shm`` where there is one; its path is
    set in :data:`BOARD_ENV` (the ranks started after inherit it) and removed at exit.  None,
    with a warning, where no folder can be written (a read-only file system): the ranks then
    draw their local peers as they draw the other nodes'."""
    folder = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None
    _remove_orphans(folder or tempfile.gettempdir())
    try:
        fd, path = tempfile.mkstemp(prefix=f"vllm-sim-dp-{os.getpid()}-", dir=folder)
        os.write(fd, bytes(8 * ROW * ranks))
        fcntl.flock(fd, fcntl.LOCK_SH)      # held for the process's life: the board is in use
        _HELD.append(fd)
    except OSError as e:
        import logging
        logging.getLogger("vllm_sim").warning("data parallel: no board for the ranks' lockstep (%s); each rank draws "
                                              "its peers' steps from its own", e)
        return None
    os.environ[BOARD_ENV] = path

    def remove():
        try:
            os.unlink(path)
        except OSError:
            pass
    atexit.register(remove)
    return path


_HELD: list = []     # the descriptors whose shared locks mark this process's board in use


def _remove_orphans(folder: str) -> None:
    """Remove the boards of servers that were killed before they could (SIGKILL): no process
    holds a lock on them (a lock, not a process id, so that a server in another PID namespace
    sharing the folder keeps its board)."""
    for path in glob.glob(os.path.join(folder, "vllm-sim-dp-*")):
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:             # held: a live server's
            continue
        else:
            try:
                os.unlink(path)
            except OSError:
                pass
        finally:
            os.close(fd)


def attach_board(ranks: int) -> np.ndarray | None:
    """The board named in :data:`BOARD_ENV` as a ``(ranks, 3)`` float64 array over the mapped
    file, or None without one (a single process, a replay) or when it cannot be mapped (a
    board of another size: then each rank draws its peers from its own steps)."""
    path = os.environ.get(BOARD_ENV)
    if not path:
        return None
    try:
        with open(path, "r+b") as fh:
            if os.fstat(fh.fileno()).st_size != 8 * ROW * ranks:
                return None
            mem = mmap.mmap(fh.fileno(), 8 * ROW * ranks)
    except (OSError, ValueError):
        return None
    return np.ndarray((ranks, ROW), dtype=np.float64, buffer=mem)
