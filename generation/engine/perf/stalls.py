"""The engine's stalls beyond its steps: a MoE engine's fused-kernel compiles mid-serving
(:class:`MoeJit`, with vLLM's tuned tile tables that decide which token counts share a kernel),
the real servers' short pauses (:class:`EnginePauses`) and a data-parallel MoE engine's wait for
its peers (:class:`DpLockstep`).  All are drawn into a step's time by the live engine and the
replay alike; :class:`~.step_model.StepModel` builds the first two from its constants (README:
Fidelity).  Times in seconds."""
from __future__ import annotations

import bisect
import json
import os
from collections import deque

from generation.config.values import ConfigError

# The token counts M that vLLM's tuned fused-MoE configs are keyed by (the JSON files of
# vllm/model_executor/layers/fused_moe/configs/); a step takes the config of the nearest key.
MOE_CONFIG_KEYS = (1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 256, 512, 1024, 1536, 2048, 3072, 4096)


MOE_TILE_FILE = os.path.join(os.path.dirname(__file__), "moe_tile_configs.json")
_moe_tiles_cache: dict | None = None


def moe_tile_table(gpu_name: str, num_experts: int, n: int) -> dict[int, tuple] | None:
    """vLLM's tuned fused-MoE tile configs for ``num_experts`` experts of ``n`` intermediate
    columns per GPU (``moe_intermediate_size / tp``) on ``gpu_name``: ``{M key: (BLOCK_SIZE_M,
    BLOCK_SIZE_N, BLOCK_SIZE_K, GROUP_SIZE_M, num_warps, num_stages)}``, from the compact copy
    in ``moe_tile_configs.json`` (its ``_sources`` name the vLLM files); None where it has none.
    Raises ConfigError when the file cannot be read (a broken install)."""
    global _moe_tiles_cache
    if _moe_tiles_cache is None:
        try:
            with open(MOE_TILE_FILE, encoding="utf-8") as fh:
                _moe_tiles_cache = json.load(fh)
        except (OSError, ValueError) as e:      # a broken install: say which file, not a traceback
            raise ConfigError(f"fused-MoE tile table {MOE_TILE_FILE}: cannot read ({e})", param="gpu")
    table = _moe_tiles_cache.get(gpu_name, {}).get(f"E={num_experts},N={n}")
    return {int(k): tuple(v) for k, v in table.items()} if table else None


# vLLM 0.17 replaced get_default_config's two tiles (M <= E or not) with batch-scaled ones
MOE_BUCKETED_DEFAULTS_FROM = (0, 17, 0)


def default_moe_tile(tokens: int, num_experts: int, version: tuple = (0, 34, 0), fp8: bool = False,
                     block_quant: bool = False) -> tuple:
    """The tile vLLM's ``get_default_config`` (``fused_moe.py``) gives a step of ``tokens`` rows
    where no tuned table exists: ``(BLOCK_SIZE_M, BLOCK_SIZE_N, BLOCK_SIZE_K, GROUP_SIZE_M,
    num_warps, num_stages)`` (None: the kernel's default), read from the 0.15.1, 0.16, 0.17, 0.19,
    0.25 and 0.34 wheels.  Before 0.17: a small tile for ``tokens <= num_experts``, one large
    tile above; ``block_quant`` (FP8 weights in 128 x 128 blocks): one tile.  From 0.17: tiles
    that grow with the batch (BLOCK_SIZE_M 16 / 32 / 64 / 128 at 32 / 96 / 512 rows, ...);
    ``fp8``: per-tensor FP8, its wider K tile.  (0.34's block-quant N tile of 64 below 9 rows,
    whose release was not pinned, is left out: such steps run in CUDA graphs and never compile
    at run time.)"""
    m, e = tokens, num_experts
    if version < MOE_BUCKETED_DEFAULTS_FROM:
        if block_quant:
            return (64, 128, 128, 32, 4, 3)
        return (16, 32, 64, 1, None, None) if m <= e else (64, 64, 32, 8, None, None)
    if block_quant:
        return (16 if m <= 64 else 64, 128, 128, 1 if m <= 16 else 32, 4, 3)
    bm = 16 if m <= 32 else 32 if m <= 96 else 64 if m <= 512 else 128
    return (bm, 64 if m <= 64 else 128, 128 if fp8 or m <= 64 else 64, 16 if m // max(e, 1) > 128 else 1,
            4 if m <= 128 else 8, 4 if m <= 32 else 3)


def moe_kernel_variant(tokens: int, experts_per_token: int, num_experts: int,
                       tiles: dict[int, tuple] | None = None, default=None) -> tuple:
    """The Triton fused-MoE kernel variant a step of ``tokens`` rows runs: the tile config of
    the nearest M key (vLLM's ``try_get_optimal_moe_config``; a tie takes the smaller), and
    whether ``num_valid_tokens`` (``tokens x top_k``) and ``EM`` (the sorted ids' length,
    ``tokens x top_k + experts x (BLOCK_SIZE_M - 1)``) are multiples of 16: Triton specializes
    integer arguments on it and compiles each specialization apart (vllm#55268).

    ``tiles`` (:func:`moe_tile_table`): the tuned configs, so that keys with the same tile share
    one compiled kernel (GROUP_SIZE_M, the warps and the stages are compile-time constants too);
    without them ``default`` (``tokens -> tile``: :func:`default_moe_tile` for the engine's release
    and weights) gives vLLM's default tile; without either each key of :data:`MOE_CONFIG_KEYS` is
    a kernel of its own, BLOCK_SIZE_M 64."""
    valid = tokens * experts_per_token
    if tiles:
        key = min(tiles, key=lambda k: (abs(k - tokens), k))
        tile = tiles[key]
    elif default is not None:
        tile = default(tokens)
    else:
        key = min(MOE_CONFIG_KEYS, key=lambda k: abs(k - tokens))
        return key, valid % 16 == 0, (valid + num_experts * 63) % 16 == 0
    return tile, valid % 16 == 0, (valid + num_experts * (tile[0] - 1)) % 16 == 0


class MoeJit:
    """One engine's compiled fused-MoE kernel variants, and the stall of compiling a new one.

    vLLM compiles the variants its start-up runs reach: the profile run (``max_num_batched_
    tokens`` rows) and the CUDA-graph captures (every capture size).  A step that runs eagerly
    (more tokens than the largest capture size, or ``--enforce-eager``) with a variant not yet
    compiled JIT-compiles it first: ``t_jit`` seconds of stall, once per variant per engine.
    That is the ~1 s stalls the Mixtral runs of the ground truth show in their first seconds
    (cold prompts of 550-1,100 tokens run eagerly, past the largest graph of 256 that 128
    sequences give; a stall queues arrivals into a larger step, which selects another config:
    the traces show 6-7 stalls of 0.9-1.25 s back to back); vLLM's jit_monitor warns of the same
    ("Triton kernel JIT compilation during inference"; vllm#55268 adds a warm-up of these
    variants).  ``tiles`` (:func:`moe_tile_table`) or, without them, ``default`` (``tokens ->
    tile``: :func:`default_moe_tile`) tells which token counts share a compiled kernel (neither:
    one kernel per key, :func:`moe_kernel_variant`).

    ``stall(tokens)`` -> seconds (0.0 for a compiled variant or a CUDA-graph step); ``stalls``
    counts the compiles so far.  One object per engine: each pod of a fleet compiles its own."""

    __slots__ = ("t_jit", "top_k", "experts", "max_graph", "compiled", "tiles", "stalls", "default")

    def __init__(self, t_jit: float, experts_per_token: int, num_experts: int, graph_sizes: list[int],
                 max_num_batched_tokens: int, tiles: dict[int, tuple] | None = None, default=None):
        self.t_jit, self.top_k, self.experts, self.tiles = t_jit, experts_per_token, num_experts, tiles
        self.default = default
        self.max_graph = graph_sizes[-1] if graph_sizes else 0
        self.compiled = {moe_kernel_variant(n, experts_per_token, num_experts, tiles, default)
                         for n in (*graph_sizes, max_num_batched_tokens) if n > 0}
        self.stalls = 0             # compiles so far (each t_jit seconds)

    def stall(self, tokens: int) -> float:
        if tokens <= self.max_graph:
            return 0.0
        v = moe_kernel_variant(tokens, self.top_k, self.experts, self.tiles, self.default)
        if v in self.compiled:
            return 0.0
        self.compiled.add(v)
        self.stalls += 1
        return self.t_jit


MAX_PAUSE_DRAWS = 1000          # EnginePauses.stall: pauses drawn one by one in a step, at most


class EnginePauses:
    """The real servers' pauses: in the traced runs about 1-4% of requests, isolated ones at light
    load included, take 15-40 ms longer to their first token than the same request in a replay
    with the same arrivals, which puts the measured TTFT p99 at 1.33x its p90 where a replay
    without pauses gives 1.09x (bench/sim_to_real, README: Fidelity).  They read as host-side
    hiccups of the engine or the API server (a garbage collection, a descheduled thread), not as
    load: they hit light and heavy stages alike.

    Modelled as a Poisson process of ``rate`` pauses per second, each holding the engine for
    ``length`` seconds: a step running when one begins ends ``length`` later, and a step planned
    during one lasts the rest of it longer.  ``rng`` (a seeded ``random.Random``) draws the
    gaps, so a replay is repeatable; the first pause is drawn from the first step's start (the
    server's clock is ``time.monotonic``, a replay's starts at 0).  Both constants are fitted
    on the traced runs' TTFT p99 (``python -m generation.engine.perf.fit --pauses``)."""
    __slots__ = ("rate", "length", "rng", "next")

    def __init__(self, rate: float, length: float, rng):
        self.rate, self.length, self.rng = rate, length, rng
        self.next = None            # when the next pause begins (seconds on the engine's clock)

    def stall(self, start: float, dt: float) -> float:
        """Seconds a step of ``dt`` seconds planned at ``start`` lasts longer for the pauses."""
        nxt = self.next
        if nxt is None:
            nxt = start + self.rng.expovariate(self.rate)
        extra = 0.0
        if nxt < start + dt:
            draw, rate, length = self.rng.expovariate, self.rate, self.length
            if nxt + length <= start:               # over while the engine was idle: the process
                nxt = start - length + draw(rate)   # is memoryless, so draw afresh (O(1) after any idle)
            if nxt < start:                         # the step was planned during one
                extra = nxt + length - start
                nxt += draw(rate)
            end = start + dt
            if (end - nxt) * rate > MAX_PAUSE_DRAWS:  # a step of hours (a GPU described a million
                extra += length * (end - nxt) * rate  # times too slow): the expected pauses, not each
                nxt = end + draw(rate)
            while nxt < end:                        # one begins while the step runs
                extra += length
                nxt += draw(rate)
        self.next = nxt
        return extra


class DpLockstep:
    """A data-parallel MoE engine's steps in lockstep with its ``ranks - 1`` peers: vLLM 0.34 runs
    a MoE model's DP ranks as ``DPEngineCoreProc`` (``v1/engine/core.py``: for MoE models only),
    whose forward passes meet in every MoE layer's exchange and run with the token count padded
    to the largest rank's (``coordinate_batch_across_dp``); an idle rank runs dummy batches while
    any peer has work.  So a step lasts as long as the busiest rank's: each rank's decodes wait
    out every peer's prompt chunks, and a large group stalls on some rank's prefill most steps.

    The peers are not simulated; under the load model the MoE terms already take (every replica
    carries this one's load, :func:`~.hardware.moe_group_terms`), each peer has work with the
    share of the time this rank had work over its last :data:`WINDOW` steps (``busy``; an idle
    peer's dummy batch waits for the others and adds nothing), and its step is then a draw from
    this rank's own steps in the window.  A step takes the larger of its own time and the peers'
    maximum, whose distribution ``(1 - busy + busy F(x))^(ranks - 1)`` is drawn at once as an
    order statistic of the sorted window (one uniform a step, from the seeded ``rng``).  A MoE
    kernel's compile (:class:`MoeJit`) is added after: each peer compiles the same variants about
    when this rank does, once, so the window holding the stall would draw it again and again.

    The server's ranks of one node see each other (:meth:`attach`, a board of
    :mod:`generation.engine.dp_board`): a step waits for the longest step a local peer is running
    (its own time, as the peer planned it), so a router's imbalance between them shows, and a rank
    that was idle joins when their running step ends (its dummy batches ran in step with it);
    only the ranks of other nodes are drawn."""
    __slots__ = ("ranks", "exponent", "rng", "recent", "ordered", "busy_time", "board", "index", "waits", "waited")
    WINDOW = 256        # steps: about the last second or two of a busy engine

    def __init__(self, ranks: int, rng):
        self.ranks = ranks
        self.exponent = 1.0 / (ranks - 1)   # 0: no peer drawn
        self.rng = rng
        self.recent: deque = deque()        # (own time, start, lockstep time) of the window's steps
        self.ordered: list = []             # their own times, sorted
        self.busy_time = 0.0                # the window's lockstep times, summed
        self.board = None                   # the local ranks' steps (dp_board), this rank's row index
        self.index = 0
        self.waits, self.waited = 0, 0.0    # steps that waited for a peer, and the seconds they added

    def attach(self, board, index: int) -> None:
        """Read the local peers' steps from ``board`` (a ``(local ranks, 3)`` array: start, end,
        own time) and write this rank's to its row ``index``; only the other nodes' ranks are
        drawn from here on."""
        remote = self.ranks - len(board)
        self.board, self.index = board, index
        self.exponent = 1.0 / remote if remote > 0 else 0.0

    def step(self, dt: float, start: float, joining: bool = False) -> float:
        """The lockstep length of a step this rank alone would take ``dt`` seconds for, planned at
        ``start`` (s, the engine's clock); ``dt`` joins the window.  ``joining``: the rank was idle
        (its requests arrived while it ran dummy batches): it starts when the group's running step
        ends (a local peer's end from the board; the drawn peers' step, their maximum as above, is
        met at a uniform point of it: a longer step is no likelier to be met, which makes the
        wait a little short)."""
        ordered, recent = self.ordered, self.recent
        wait = peer = 0.0
        board = self.board
        if board is not None:               # the local peers' steps running now
            running = (board[:, 0] <= start) & (start < board[:, 1])
            running[self.index] = False
            if running.any():
                if joining:
                    wait = float(board[running, 1].max()) - start
                else:
                    peer = float(board[running, 2].max())
        n = len(ordered)
        if n and self.exponent:
            span = start - recent[0][1]             # from the window's first step to this one
            busy = min(1.0, self.busy_time / span) if span > 0 else 1.0
            rand = self.rng.random
            top = rand() ** self.exponent - (1.0 - busy)     # the peers' max: a dummy below 0
            if top > 0:
                drawn = ordered[min(n - 1, int(n * top / busy))]
                if joining:                 # met at a uniform point of the group's running step
                    wait = max(wait, rand() * drawn)
                else:
                    peer = max(peer, drawn)
        out = wait + (peer if peer > dt else dt)
        if n == self.WINDOW:
            old, _, held = recent.popleft()
            del ordered[bisect.bisect_left(ordered, old)]
            self.busy_time -= held
        recent.append((dt, start, out))
        bisect.insort(ordered, dt)
        self.busy_time += out
        if board is not None:
            board[self.index] = (start, start + out, dt)
        if out > dt:
            self.waits += 1
            self.waited += out - dt
        return out


def dp_lockstep(step_time, rng) -> DpLockstep | None:
    """A new engine's :class:`DpLockstep` for ``step_time`` (a StepModel of a MoE model under
    data parallelism, ``dp``: the whole deployment's ranks), else None (a dense model's DP ranks
    are independent engines in vLLM)."""
    ranks = getattr(step_time, "dp", 1)
    arch = getattr(step_time, "arch", None)
    if ranks > 1 and arch is not None and arch.is_moe:
        return DpLockstep(ranks, rng)
    return None
