"""Data-parallel ranks with ``--data-parallel-external-lb``: ``--data-parallel-size N`` runs N
engines, one process each, on consecutive ports (vLLM's external load balancing: each rank its
own endpoint).  Without the flag they share one endpoint in one process (:mod:`server.dp_api`).
"""
from __future__ import annotations

import atexit
import signal
import sys



# ---------------------------------------------------------------------------------------------
# data-parallel ranks
def start_data_parallel_ranks(config, argv: list[str], script: str) -> list:
    """``--data-parallel-size N``: ranks 1..N-1 are separate simulator processes (own queue, KV
    cache, metrics) on ports ``port+1 .. port+N-1``, as vLLM's data-parallel engines; this
    process is rank 0.  Children die with this process (PR_SET_PDEATHSIG).  Returns
    ``[(rank, Popen)]``."""
    import subprocess

    def die_with_parent():
        try:
            import ctypes
            ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)   # PR_SET_PDEATHSIG
        except OSError:
            pass

    from generation.engine.dp_board import create_board
    create_board(config.data_parallel_size)     # the ranks' steps, for a MoE model's lockstep (inherited)
    procs = []
    for rank in range(1, config.data_parallel_size):
        args = [sys.executable, script, *argv, "--port", str(config.port + rank),
                "--data-parallel-rank", str(rank), "--data-parallel-external-lb"]
        if getattr(config, "data_parallel_multi_port_external_lb", False):     # a supervised rank: its own layout
            args.append("--no-data-parallel-multi-port-external-lb")
        procs.append((rank, subprocess.Popen(args, preexec_fn=die_with_parent)))

    def stop():
        for _, p in procs:
            if p.poll() is None:
                p.terminate()
    atexit.register(stop)
    return procs


