"""The scheduler's units (:mod:`generation.engine.scheduler`): one sequence as the scheduler
sees it (:class:`EngineRequest`, vLLM's ``Request``) and one step's plan with the aggregates the
step-time model reads (:class:`StepPlan`).  Token counts are tokens; times the caller's clock
(seconds)."""
from __future__ import annotations


class EngineRequest:
    """One sequence in the scheduler (vLLM's ``Request``): ``prompt_len`` and ``output_len`` in
    tokens; ``num_computed`` tokens have KV, ``num_output`` tokens were emitted; ``blocks`` held.
    Times are the caller's clock (seconds).  ``seq`` is the caller's object (a
    :class:`~generation.engine.request.Sequence` on the server, None in a replay)."""
    __slots__ = ("seq", "prompt_len", "output_len", "num_computed", "num_output", "blocks", "lora", "arrival",
                 "queued_at", "first_scheduled", "first_token", "last_token", "finished_at", "preemptions", "state",
                 "kv_ready_at", "prefix_hit", "notify", "cached_tokens", "reloaded_tokens", "group", "prefix_len",
                 "stored", "prev_token", "block_ids", "block_hashes", "num_cached_blocks", "priority", "cpu_stored",
                 "offload", "new_tokens", "spec_metrics")

    WAITING, RUNNING, DONE, ABORTED = "waiting", "running", "done", "aborted"

    def __init__(self, prompt_len: int, output_len: int, *, seq=None, lora=None, arrival: float = 0.0,
                 kv_ready_at: float = 0.0, group=None, prefix_len: int = 0, priority: int = 0):
        self.seq = seq
        self.prompt_len = max(int(prompt_len), 1)
        self.output_len = max(int(output_len), 1)      # vLLM samples at least one token
        self.num_computed = 0
        self.num_output = 0
        self.blocks = 0
        self.lora = lora
        self.arrival = arrival
        self.queued_at = arrival
        self.first_scheduled = None
        self.first_token = None
        self.last_token = None
        self.finished_at = None
        self.preemptions = 0
        self.state = self.WAITING
        self.kv_ready_at = kv_ready_at       # remote prefill: not schedulable before (KV transfer)
        self.prefix_hit = None               # callable(req) -> tokens whose KV comes from another pod (P/D), or None
        self.notify = None                   # set by the caller: called when tokens were emitted
        self.cached_tokens = 0               # prefix-cache hit of the first scheduling
        self.reloaded_tokens = 0             # of those, found in the CPU tier (vLLM: the connector's)
        self.group = group                   # replay: shared-prefix group
        self.prefix_len = prefix_len         # replay: tokens of the group's shared prefix
        self.stored = False                  # its prompt blocks were offered to the prefix cache
        self.prev_token = None               # when the token before the last one was emitted
        self.block_ids: list = []            # the blocks held, in token order (len == blocks)
        self.block_hashes = None             # hashes of the prompt's full blocks (None: not cached)
        self.num_cached_blocks = 0           # leading blocks that are named by their hashes
        self.cpu_stored = 0                  # leading prompt blocks offered to the CPU tier
        self.offload = None                  # vLLM 0.15.1's CPU tier: its stores there (cpu_tier_v015)
        self.priority = priority             # lower runs first (the priority policy)
        self.new_tokens = 1                  # tokens its last step emitted (1 + accepted drafts)
        self.spec_metrics = None             # its RequestSpecMetrics (--per-request-spec-decode-metrics), else None

    @property
    def num_tokens(self) -> int:
        """Tokens known so far: the prompt and the tokens generated (what a recompute prefills)."""
        return self.prompt_len + self.num_output

    @property
    def finished(self) -> bool:
        return self.state == self.DONE


class StepPlan:
    """What one engine step runs: ``scheduled`` ``[(request, new tokens)]`` in batch order, the
    requests ``preempted`` while planning it, and the step-time aggregates (docs/engine-model.md
    section 3): ``num_decode`` (D), ``decode_context`` (C_dec, tokens), ``num_chunks``,
    ``prefill_tokens`` (sum n_i), ``prefill_pairs`` (sum n_i (p_i + n_i / 2)), ``prefill_context``
    (sum p_i), ``prefill_sq`` (sum n_i^2: with ``prefill_pairs``, vLLM's sum of tokens x context
    for ``--enable-mfu-metrics``), and ``kv_reload_tokens``: tokens whose KV the step reloads from the CPU tier (prefix
    hits there of the requests it admits; 0 without a CPU tier), already counted in their
    requests' computed tokens (so in ``prefill_context``)."""
    __slots__ = ("scheduled", "preempted", "num_decode", "decode_context", "num_chunks", "prefill_tokens",
                 "prefill_pairs", "prefill_context", "prefill_sq", "start", "end", "chunks", "kv_reload_tokens",
                 "group", "spec_tokens", "spec_pairs", "accepted")

    def __init__(self):
        self.scheduled: list = []
        self.chunks: list = []              # requests computing prompt tokens (blocks to cache)
        self.preempted: list = []
        self.num_decode = 0
        self.decode_context = 0
        self.num_chunks = 0
        self.prefill_tokens = 0
        self.prefill_pairs = 0.0
        self.prefill_context = 0
        self.prefill_sq = 0
        self.kv_reload_tokens = 0
        self.group = None                   # a group step's count of decoding requests (fast_decode), not in scheduled
        self.spec_tokens = 0                # draft tokens its decodes verify (speculative decoding)
        self.spec_pairs = 0.0               # their queries' attention pairs
        self.accepted = 0                   # tokens emitted beyond one per request (accepted drafts)
        self.start = 0.0
        self.end = 0.0

    @property
    def num_tokens(self) -> int:
        """Tokens through the network in this step (T = D + sum n_i + the drafts verified)."""
        return self.num_decode + self.prefill_tokens + self.spec_tokens

    def add(self, req: EngineRequest, n: int) -> None:
        self.scheduled.append((req, n))
        c = req.num_computed
        if n == 1 and req.num_output and c == req.num_tokens - 1:
            self.num_decode += 1
            self.decode_context += c + 1
        else:
            self.num_chunks += 1
            self.chunks.append(req)
            self.prefill_tokens += n
            self.prefill_pairs += n * (c + n / 2)
            self.prefill_context += c
            self.prefill_sq += n * n
