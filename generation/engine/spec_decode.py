"""Speculative decoding in step mode: vLLM's ``--speculative-config`` (``-sc``) and its
``--spec-method`` / ``--spec-model`` / ``--spec-tokens`` shorthands, resolved once at start-up.

What the engine does with it, as vLLM V1's scheduler does (vLLM 0.34:
``vllm/v1/core/sched/scheduler.py``, ``vllm/config/speculative.py``):

- a running request that decodes carries ``k`` draft tokens (``num_speculative_tokens``) and is
  scheduled ``1 + k`` tokens (fewer where the step's token budget or ``max_model_len`` cuts its
  drafts); a drafter that reads the target's hidden states (EAGLE, EAGLE-3, MTP) also holds KV
  slots for ``k`` lookahead tokens (``num_lookahead_tokens``);
- the step verifies the drafts: ``A`` of them are accepted, the request emits ``1 + A`` tokens
  (the accepted drafts and the bonus token) in one output, and its computed tokens roll back
  by the ``d - A`` rejected ones;
- with ``num_speculative_tokens_per_batch_size`` (dynamic speculation) a step of ``B``
  requests proposes the drafts its batch-size range gives for the next step (at most ``k``;
  none: no drafter runs);
- ``vllm:spec_decode_*`` count the drafts, draft tokens and accepted tokens (per position too).

**Acceptance.**  The simulator has no draft model and its text is random, so every method
accepts as vLLM's own ``rejection_sample_method: "synthetic"`` does: position ``i`` of a draft
is accepted (with every position before it) with the unconditional probability ``rates[i]``,
from ``synthetic_acceptance_rates`` or ``synthetic_acceptance_length`` (vLLM's minimum-variance
schedule) when the config gives them.  Without them, :data:`DEFAULT_ACCEPTANCE` is the chance
of each position given the one before it: a prior, not a fit (no run with speculative
decoding is in the data), shown in the start-up line; give vLLM's synthetic settings for your
own figures.

**Cost.**  The target model's step prices the ``1 + k`` query tokens of each decode (its
GEMMs, the logits of every position, the drafts' attention); the drafter's work is
:class:`DraftCost`: for a model-based drafter one pass over the step's tokens and ``k - 1``
decode passes of the drafting requests, each timed by the same step model on the drafter's
architecture (EAGLE / MTP: one decoder layer of the target's shape with its LM head;
``draft_model``: the draft model's own, found as the target's is), split over
``draft_tensor_parallel_size`` GPUs.  N-gram and suffix drafters run on the host and are not
timed.  The drafter's weights and KV come out of the KV cache (:func:`drafter_memory`).
"""
from __future__ import annotations

import json
from dataclasses import dataclass, replace

from generation.config.values import ConfigError

DEFAULT_ACCEPTANCE = 0.7        # P(draft position i accepted | position i - 1 was): a prior (module docstring)
MAX_SPEC_TOKENS = 64            # bounds the per-step draws; vLLM has no cap, no real drafter goes near it

# vLLM 0.34's methods (config/speculative.py: SpeculativeMethod), by the drafter's cost here
HOST_METHODS = ("ngram", "ngram_gpu", "suffix")
HEAD_METHODS = ("eagle", "eagle3", "mtp", "dflash", "dspark", "medusa", "mlp_speculator")
MODEL_METHODS = ("draft_model",)
METHODS = HOST_METHODS + HEAD_METHODS + MODEL_METHODS
# SpeculativeConfig's fields (vLLM 0.34): a pydantic config that forbids any other key
FIELDS = frozenset((
    "enforce_eager", "num_speculative_tokens", "model", "method", "custom_method", "draft_tensor_parallel_size",
    "draft_decode_context_parallel_size", "tensor_parallel_size", "quantization", "moe_backend", "attention_backend",
    "kv_cache_dtype", "max_model_len", "revision", "code_revision", "index_share_for_mtp_iteration",
    "disable_eagle_block_drop", "disable_lookahead_block_hashes", "draft_lm_head_quantization",
    "use_local_argmax_reduction", "prompt_lookup_max", "prompt_lookup_min", "parallel_drafting",
    "target_model_config", "target_parallel_config", "num_speculative_tokens_per_batch_size", "draft_model_config",
    "draft_parallel_config", "suffix_decoding_max_tree_depth", "suffix_decoding_max_cached_requests",
    "suffix_decoding_corpus_tokens", "suffix_decoding_max_spec_factor", "suffix_decoding_min_token_prob",
    "draft_load_config", "rejection_sample_method", "synthetic_acceptance_rates", "synthetic_acceptance_length",
    "enable_adaptive_verification", "draft_sample_method", "dspark_draft_topk", "xpress_topc", "speculator_options",
    "fly_window_size", "fly_entropy_threshold", "fly_entropy_top_k"))
REJECTION_METHODS = ("standard", "synthetic", "block", "fly")


@dataclass(frozen=True)
class SpecDecode:
    """The resolved speculative config: ``method``, ``num_speculative_tokens`` (``k``), the
    per-position unconditional acceptance ``rates`` (``k`` non-increasing values in [0, 1]),
    where they came from (``rates_source``), the draft ``model`` (None for n-gram drafters)
    and ``lookahead``: KV slots held beyond the scheduled tokens (vLLM's
    ``num_lookahead_tokens``: ``k`` for drafters that read the target's hidden states)."""
    method: str
    num_speculative_tokens: int
    rates: tuple
    rates_source: str
    model: str | None = None
    lookahead: int = 0
    per_batch_size: tuple = ()      # num_speculative_tokens_per_batch_size: ((start, end, k), ...), sorted
    draft_tp: int | None = None     # draft_tensor_parallel_size (None: the target's)

    def drafts_by_batch(self, max_batch: int) -> list[int] | None:
        """vLLM's ``build_dynamic_sd_schedule_lookup``: index ``b`` (1 .. ``max_batch``) the drafts
        a step of ``b`` requests proposes for the next, at most ``k``; a gap or the tail carries
        the previous range's forward.  None without a schedule."""
        if not self.per_batch_size:
            return None
        k, ranges = self.num_speculative_tokens, self.per_batch_size
        dense = [0] * (max_batch + 1)
        fill, j = 0, 0
        for b in range(1, max_batch + 1):
            while j < len(ranges) and ranges[j][1] < b:       # past this range: its k fills a gap
                fill = min(k, ranges[j][2])
                j += 1
            dense[b] = min(k, ranges[j][2]) if j < len(ranges) and ranges[j][0] <= b else fill
        return dense

    def accepted(self, u: float, drafts: int) -> int:
        """Draft tokens accepted of ``drafts`` (<= k) for the uniform draw ``u`` in [0, 1):
        position ``i`` is accepted while ``u < rates[i]`` (the rates never rise)."""
        n = 0
        rates = self.rates
        while n < drafts and u < rates[n]:
            n += 1
        return n

    @property
    def mean_acceptance_length(self) -> float:
        """``1 + sum(rates)``: tokens a full draft's step emits on average (vLLM's log line)."""
        return 1.0 + sum(self.rates)

    def summary(self) -> str:
        """The start-up line's part: method, k, where the acceptance comes from."""
        rates = ", ".join(f"{r:.3g}" for r in self.rates)
        ranges = ", ".join(f"{a}-{b}: {n}" for a, b, n in self.per_batch_size)
        return (f"speculative decoding: {self.method}, {self.num_speculative_tokens} draft tokens"
                + (f" (by batch size {ranges})" if ranges else "")
                + f", acceptance per position [{rates}] ({self.rates_source}; mean acceptance length "
                f"{self.mean_acceptance_length:.2f})")


class RequestSpecMetrics:
    """One request's speculative-decoding record, vLLM 0.34's ``RequestSpecDecodeMetrics``
    (``vllm/v1/metrics/stats.py``) under ``--per-request-spec-decode-metrics`` ``summary`` or
    ``detailed``: ``histogram[j]`` counts its verify steps that accepted ``j`` drafts (length
    ``k + 1``), ``num_draft_tokens`` the drafts proposed, and with ``detailed`` the ordered
    per-step accepted and drafted counts.  Made for a request only when the level is not
    ``none`` (the scheduler's ``_verified`` then observes each of its steps)."""
    __slots__ = ("num_spec_tokens", "histogram", "num_draft_tokens", "per_step_accepted", "per_step_drafted")

    def __init__(self, num_spec_tokens: int, detailed: bool = False):
        self.num_spec_tokens = num_spec_tokens
        self.histogram = [0] * (num_spec_tokens + 1)
        self.num_draft_tokens = 0
        self.per_step_accepted = [] if detailed else None
        self.per_step_drafted = [] if detailed else None

    def observe(self, drafts: int, accepted: int) -> None:
        self.histogram[accepted] += 1
        self.num_draft_tokens += drafts
        if self.per_step_accepted is not None:
            self.per_step_accepted.append(accepted)
            self.per_step_drafted.append(drafts)

    def to_dict(self) -> dict:
        """vLLM's ``to_dict``: the answer's ``metrics.speculative_decoding`` (the mean acceptance
        length counts the bonus token; the per-step arrays only when there are any)."""
        steps = sum(self.histogram)
        accepted = sum(j * c for j, c in enumerate(self.histogram))
        out = {"mean_acceptance_length": 1.0 + accepted / steps if steps else 1.0,
               "draft_acceptance_rate": accepted / self.num_draft_tokens if self.num_draft_tokens else 0.0,
               "acceptance_histogram": list(self.histogram), "num_spec_steps": steps,
               "num_accepted_draft_tokens": accepted, "num_draft_tokens": self.num_draft_tokens,
               "num_spec_tokens": self.num_spec_tokens}
        if self.per_step_accepted:
            out["per_step_accepted"] = list(self.per_step_accepted)
            out["per_step_drafted"] = list(self.per_step_drafted)
        return out


def _length_to_rates(length: float, n: int) -> list[float]:
    """vLLM's ``SpeculativeConfig._acceptance_length_to_rates``: a mean acceptance length as
    the minimum-variance per-position rates."""
    drafts = length - 1
    full = int(drafts)
    return ([1.0] * full + [drafts - full] + [0.0] * (n - full - 1))[:n]


def _number(value, name: str, integer: bool = False):
    if isinstance(value, bool) or not isinstance(value, (int, float)) or (integer and not float(value).is_integer()):
        raise ConfigError(f"speculative_config: {name} must be {'an integer' if integer else 'a number'}, got "
                          f"{value!r}", "speculative-config")
    return int(value) if integer else float(value)


def resolve_spec_decode(config, method: str | None = None, model: str | None = None,
                        tokens: int | None = None, tp: int = 1) -> SpecDecode | None:
    """The :class:`SpecDecode` of ``--speculative-config`` (``config``: a dict, a JSON string or
    None) with ``--spec-method`` / ``--spec-model`` / ``--spec-tokens`` merged in, as vLLM's
    ``EngineArgs.create_speculative_config`` merges them; None without any.  Raises ConfigError
    (param ``speculative-config``) with vLLM's messages for what vLLM refuses (``tp``: the
    target's tensor-parallel size, which ``draft_tensor_parallel_size`` must be or 1), and for
    methods the simulator does not model (``extract_hidden_states`` drafts nothing; a custom
    class)."""
    if isinstance(config, str):
        try:
            config = json.loads(config)
        except ValueError as e:
            raise ConfigError(f"speculative_config: not a JSON object ({e})", "speculative-config")
    if config is not None and not isinstance(config, dict):
        raise ConfigError("speculative_config must be a JSON object", "speculative-config")
    spec = dict(config or {})
    for flag, key, value in (("--spec-method", "method", method), ("--spec-model", "model", model),
                             ("--spec-tokens", "num_speculative_tokens", tokens)):
        if value is None:
            continue
        if key in spec:
            raise ConfigError(f"{flag} and --speculative-config['{key}'] are mutually exclusive", flag[2:])
        spec[key] = value
    if config is None and not spec:
        return None
    spec = {str(k).replace("-", "_"): v for k, v in spec.items()}
    extra = sorted(k for k in spec if k not in FIELDS)
    if extra:                               # pydantic's extra_forbidden, as vLLM's start-up shows it
        raise ConfigError(f"speculative_config: {extra[0]}: Extra inputs are not permitted", "speculative-config")
    if spec.get("rejection_sample_method", "standard") not in REJECTION_METHODS:
        raise ConfigError("speculative_config: rejection_sample_method: Input should be 'standard', 'synthetic', "
                          "'block' or 'fly'", "speculative-config")
    if "tensor_parallel_size" in spec:
        raise ConfigError("'tensor_parallel_size' is not a valid argument in the speculative_config. Please pass "
                          "'draft_tensor_parallel_size' instead.", "speculative-config")
    name = spec.get("method")
    draft = spec.get("model")
    if name is not None and not isinstance(name, str) or draft is not None and not isinstance(draft, str):
        raise ConfigError("speculative_config: method and model must be strings", "speculative-config")
    if name is None:                        # vLLM detects it from the draft checkpoint: by its name here
        low = (draft or "").lower()
        name = ("ngram" if low in ("ngram", "[ngram]") else "draft_model" if not draft else
                "eagle3" if "eagle3" in low else "eagle" if "eagle" in low else
                "mtp" if "mtp" in low else "medusa" if "medusa" in low else "draft_model")
    if name == "[ngram]":
        name = "ngram"
    if name.endswith("_mtp"):               # vLLM: "method `x_mtp` is deprecated and replaced with mtp"
        name = "mtp"
    if name not in METHODS:
        raise ConfigError(f"speculative_config: method {name!r} is not modelled here (the simulator models "
                          f"{', '.join(METHODS)})", "speculative-config")
    k = spec.get("num_speculative_tokens")
    if k is None:
        raise ConfigError("num_speculative_tokens must be provided with speculative model unless the draft model "
                          "config contains an n_predict parameter.", "speculative-config")
    k = _number(k, "num_speculative_tokens", integer=True)
    if k <= 0:
        raise ConfigError(f"Expected num_speculative_tokens to be greater than zero ({k}).", "speculative-config")
    if k > MAX_SPEC_TOKENS:
        raise ConfigError(f"speculative_config: num_speculative_tokens {k} is more than the simulator models "
                          f"({MAX_SPEC_TOKENS})", "speculative-config")
    rates_in, length = spec.get("synthetic_acceptance_rates"), spec.get("synthetic_acceptance_length")
    if spec.get("rejection_sample_method", "standard") == "synthetic":
        if (rates_in is None) == (length is None):
            raise ConfigError("rejection_sample_method='synthetic' requires exactly one of synthetic_acceptance_rates "
                              "or synthetic_acceptance_length.", "speculative-config")
        if rates_in is not None:
            if not isinstance(rates_in, list) or len(rates_in) != k:
                raise ConfigError(f"synthetic_acceptance_rates must have length {k}, got {rates_in}.",
                                  "speculative-config")
            rates = [_number(r, "synthetic_acceptance_rates") for r in rates_in]
            if not all(0.0 <= r <= 1.0 for r in rates):
                raise ConfigError(f"synthetic_acceptance_rates entries must be in [0, 1], got {rates_in}.",
                                  "speculative-config")
            if any(rates[i] > rates[i - 1] for i in range(1, k)):
                raise ConfigError(f"synthetic_acceptance_rates must be non-increasing, got {rates_in}.",
                                  "speculative-config")
            source = "synthetic_acceptance_rates"
        else:
            length = _number(length, "synthetic_acceptance_length")
            if not 1.0 <= length <= float(k + 1):
                raise ConfigError(f"synthetic_acceptance_length must be in [1, {k + 1}], got {length}.",
                                  "speculative-config")
            rates, source = _length_to_rates(length, k), f"synthetic_acceptance_length {length:g}"
    elif rates_in is not None or length is not None:
        raise ConfigError("synthetic_acceptance_rates / synthetic_acceptance_length are only valid with "
                          "rejection_sample_method='synthetic'.", "speculative-config")
    else:
        rates = [DEFAULT_ACCEPTANCE ** (i + 1) for i in range(k)]
        source = f"the simulator's prior, {DEFAULT_ACCEPTANCE:g} per position given the one before"
    if name in MODEL_METHODS and not draft:
        raise ConfigError("speculative_config: method draft_model needs the draft model (`model`)",
                          "speculative-config")
    lookahead = k if name in HEAD_METHODS else 0
    per_batch = spec.get("num_speculative_tokens_per_batch_size")
    draft_tp = spec.get("draft_tensor_parallel_size")
    if draft_tp is not None:
        draft_tp = _number(draft_tp, "draft_tensor_parallel_size", integer=True)
        if draft_tp not in (1, tp):
            raise ConfigError(f"speculative_draft_tensor_parallel_size={draft_tp} cannot be other value than 1 or "
                              "target model tensor_parallel_size", "speculative-config")
    return SpecDecode(name, k, tuple(rates), source, draft if name not in HOST_METHODS else None, lookahead,
                      _batch_schedule(per_batch) if per_batch is not None else (), draft_tp)


def _batch_schedule(value) -> tuple:
    """``num_speculative_tokens_per_batch_size`` checked and sorted as vLLM's
    ``validate_and_normalize_dynamic_sd_schedule`` does, with its messages: ``(start, end, k)``
    entries, inclusive, positive, non-overlapping, the first from batch size 1."""
    def bad(message):
        return ConfigError(f"speculative_config: {message}", "speculative-config")
    if not isinstance(value, list):
        raise bad("num_speculative_tokens_per_batch_size must be a non-empty list of (range_start, range_end, "
                  "num_speculative_tokens) entries.")
    if not value:
        raise bad("num_speculative_tokens_per_batch_size must not be empty.")
    out = []
    for entry in value:
        if not isinstance(entry, (list, tuple)) or len(entry) != 3:
            raise bad("Each num_speculative_tokens_per_batch_size entry must be a 3-item sequence: (range_start, "
                      "range_end, num_speculative_tokens).")
        start, end, n = (_number(x, "num_speculative_tokens_per_batch_size", integer=True) for x in entry)
        if start <= 0 or end <= 0:
            raise bad(f"Batch-size range ({start}, {end}) must be positive.")
        if start > end:
            raise bad(f"Batch-size range start must be <= end for ({start}, {end}, {n}).")
        if n < 0:
            raise bad("num_speculative_tokens_per_batch_size values must be >= 0.")
        out.append((start, end, n))
    out.sort()
    previous = 0
    for start, end, _ in out:
        if start <= previous:
            raise bad("Batch-size ranges must be non-overlapping and sorted.")
        previous = end
    if out[0][0] != 1:
        raise bad("The first batch-size range must start at 1 so every runtime batch size has a defined schedule.")
    return tuple(out)


def head_arch(arch, spec: SpecDecode | None = None):
    """A draft head's architecture (EAGLE, EAGLE-3, MTP, Medusa): one decoder layer of the
    target's ``arch`` and its LM head, over EAGLE-3's draft vocabulary where its config gives
    one (:func:`draft_vocab_of`)."""
    vocab = draft_vocab_of(spec) or arch.vocab_size
    return replace(arch, num_layers=1, dense_layers=min(arch.dense_layers, 1), vocab_size=vocab)


def draft_vocab_of(spec: SpecDecode | None) -> int | None:
    """An EAGLE-3 head's ``draft_vocab_size`` (its LM head's rows: 32,000 in the usual Llama-3
    heads against the target's 128,256), read from the head's config.json where one is found as
    the target's is (a local directory, the Hugging Face cache); else None, and the head takes
    the target's vocabulary, as vLLM's ``llama_eagle3.py`` does for a config without one."""
    if spec is None or spec.method != "eagle3" or not spec.model:
        return None
    from .perf.model_arch import resolve_arch
    try:
        found = resolve_arch(spec.model)
        with open(found[1], encoding="utf-8") as fh:
            raw = json.load(fh)
    except (TypeError, OSError, ValueError):       # none found, a preset, an unreadable file
        return None
    vocab = raw.get("draft_vocab_size") if isinstance(raw, dict) else None
    return vocab if isinstance(vocab, int) and not isinstance(vocab, bool) and vocab > 0 else None


class DraftCost:
    """The drafter's GPU time per engine step (module docstring), from ``step_model`` (the
    target's :class:`~generation.engine.perf.step_model.StepModel`) and ``spec``; ``draft_arch``:
    the draft model's architecture for ``draft_model`` (else the target's first layer is the
    head).  :meth:`time` is 0.0 for host drafters."""

    def __init__(self, spec: SpecDecode, step_model, draft_arch=None):
        from .perf.step_model import StepModel
        self.spec = spec
        self.model = None
        c = getattr(step_model, "constants", None)
        if spec.method in HOST_METHODS or c is None:        # host drafters; a legacy step-time model
            return
        arch = step_model.arch
        if spec.method in MODEL_METHODS:
            if draft_arch is None:
                raise ConfigError(f"speculative_config: no config.json for the draft model {spec.model!r} here "
                                  "and no preset of it", "speculative-config")
            head = draft_arch
        else:                               # one decoder layer of the target's shape and its LM head
            head = head_arch(arch, spec)
        # the drafter runs inside the step: no per-step host work, no pauses of its own
        quiet = replace(c, t0=0.0, t_seq=0.0, pause_rate=0.0, t_jit=0.0)
        tp = spec.draft_tp or step_model.tp
        self.model = StepModel(step_model.gpu, head, tp=tp, constants=quiet, enforce_eager=step_model.enforce_eager,
                               cudagraph_capture_sizes=step_model.graph_sizes or None,
                               async_scheduling=step_model.async_scheduling, dp=step_model.dp,
                               ep=step_model.ep > 1, dcp=draft_dcp(getattr(step_model, "dcp", 1), tp))

    def time(self, plan, drafts: int | None = None) -> float:
        """Seconds the drafter adds to a step of ``plan`` (a StepPlan) that proposes ``drafts``
        tokens a request (default ``k``; 0: the drafter does not run): one pass over its tokens,
        then ``drafts - 1`` passes of one token for each request that drafts (its decodes and
        the prefills it completes)."""
        m = self.model
        if drafts is None:
            drafts = self.spec.num_speculative_tokens
        if m is None or not drafts:
            return 0.0
        t = m.step_time(plan.num_decode, plan.decode_context, plan.num_chunks, plan.prefill_tokens,
                        plan.prefill_pairs, plan.prefill_context, spec_tokens=plan.spec_tokens,
                        spec_pairs=plan.spec_pairs)
        rows = plan.num_decode + plan.num_chunks
        if rows and drafts > 1:
            context = plan.decode_context + plan.spec_tokens + plan.prefill_context + plan.prefill_tokens
            t += (drafts - 1) * m.step_time(rows, context, 0, 0, 0.0, 0)
        return t


def spec_step_time(step_time, plan, draft: DraftCost | None, drafts: int | None = None) -> float:
    """Seconds of a step of ``plan`` with speculative decoding: the target's (its drafts'
    tokens included, :meth:`~generation.engine.perf.step_model.StepModel.step_time`) plus the
    drafter's (``draft``, proposing ``drafts`` tokens a request for the next step)."""
    t = step_time.step_time(plan.num_decode, plan.decode_context, plan.num_chunks, plan.prefill_tokens,
                            plan.prefill_pairs, plan.prefill_context, spec_tokens=plan.spec_tokens,
                            spec_pairs=plan.spec_pairs)
    return t + draft.time(plan, drafts) if draft is not None else t


def draft_arch_of(spec: SpecDecode | None):
    """The draft model's architecture for ``draft_model`` (found as the target's is: a local
    config.json, the Hugging Face cache, a preset), else None."""
    if spec is None or spec.method not in MODEL_METHODS:
        return None
    from .perf.model_arch import resolve_arch
    found = resolve_arch(spec.model or "")
    return found[0] if found else None


def drafter_memory(spec: SpecDecode, arch, draft_arch, tp: int, kv_cache_dtype: str,
                   quantization: str, dcp: int = 1) -> tuple[float, int]:
    """``(weight bytes, KV bytes per token)`` one GPU gives the drafter, which vLLM's start-up
    profile takes from the KV cache: a head's one decoder layer (its own KV layer; EAGLE-3's own
    LM head at its draft vocabulary, :func:`draft_vocab_of`), or
    the draft model's weights and KV; ``(0, 0)`` for host drafters.  Raises ConfigError for a
    ``draft_model`` whose architecture is unknown.  ``dcp``: the target's decode context
    parallelism, which the drafter's KV takes too (:func:`draft_dcp`)."""
    from .perf.hardware import kv_bytes_per_token, linear_weight_bytes, weight_bytes_per_gpu
    if spec.method in HOST_METHODS:
        return 0.0, 0
    tp = spec.draft_tp or tp                    # draft_tensor_parallel_size 1: the drafter whole on a GPU
    dcp = draft_dcp(dcp, tp)
    if spec.method in MODEL_METHODS:
        if draft_arch is None:
            raise ConfigError(f"speculative_config: no config.json for the draft model {spec.model!r} here "
                              "and no preset of it", "speculative-config")
        return weight_bytes_per_gpu(draft_arch, "", tp), kv_bytes_per_token(draft_arch, kv_cache_dtype, tp, dcp)
    head = head_arch(arch, spec)
    weights = head.n_lin_total / tp * linear_weight_bytes(arch, quantization)
    if spec.method == "eagle3":
        weights += head.n_head / tp * arch.dtype_bytes
    return weights, kv_bytes_per_token(head, kv_cache_dtype, tp, dcp)


def draft_dcp(dcp: int, draft_tp: int) -> int:
    """The drafter's decode context parallelism: the target's, as vLLM's draft config takes it by
    default, where it divides the drafter's tensor-parallel size (else 1: a replicated cache)."""
    return dcp if dcp > 1 and draft_tp % dcp == 0 else 1


def blocks_with_drafter(blocks: int, block_size: int, kv_per_token: int, drafter: tuple[float, int]) -> int:
    """The KV blocks left once the drafter's memory (:func:`drafter_memory`) comes out of the
    memory that held ``blocks`` blocks of ``block_size`` tokens at ``kv_per_token`` bytes: its
    weights leave less, and each block holds the drafter's KV too."""
    weights, draft_kv = drafter
    if not (weights or draft_kv):
        return blocks
    memory = blocks * block_size * kv_per_token - weights
    return max(int(memory // (block_size * (kv_per_token + draft_kv))), 0)
