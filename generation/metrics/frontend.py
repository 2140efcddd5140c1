"""vLLM's API-server metrics (split from :mod:`generation.metrics.recorder`, whose
:class:`~generation.metrics.recorder.MetricsRecorder` mixes them in): the frontend's admission
rejections (``vllm:admission_rejections``), vLLM 0.34's render duration
(``vllm/renderers/metrics.py``), tool-parser invocations (``vllm/parser/metrics.py``) and
sleep-mode operations (``vllm/entrypoints/serve/dev/sleep/metrics.py``) and RL weight-transfer
operations (``vllm/entrypoints/rl/online/metrics.py``)."""
from __future__ import annotations

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from .series import FastCounter, LabelledHistogram

# vllm:request_render_duration_seconds (vllm/renderers/metrics.py)
RENDER_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)
# vllm:sleep_mode_operation_duration_seconds (vllm/entrypoints/serve/dev/sleep/metrics.py)
SLEEP_OP_BUCKETS = (0.01, 0.1, 1, 10, 30, 60, 120, 300, 600)
# vllm:tool_call_parser_invocations' label values (vllm/parser/metrics.py), every combination made at start
PARSER_MODES = ("streaming", "non_streaming")
PARSER_OUTCOMES = ("tool_call", "no_tool_call")
PARSER_REQUEST_TYPES = ("chat_completions", "responses", "other")


class FrontendMetrics:
    """The frontend's families of :class:`~generation.metrics.recorder.MetricsRecorder` (its
    ``config``, ``model_name`` and ``admission_rejections``)."""

    def _init_frontend(self, config) -> None:
        from generation.config.vllm_versions import exposes, flag_given
        # vllm:request_render_duration_seconds{model_name, request_type}: registered by vLLM at
        # its first observation, a series per request type ("chat", "completion") at its first
        self.render_duration = LabelledHistogram(
            "vllm:request_render_duration_seconds",
            "Time spent rendering a request, including chat templating, tokenization, and multimodal "
            "preprocessing.", RENDER_BUCKETS, {"model_name": self.model_name}, "request_type") \
            if exposes(config, "vllm:request_render_duration_seconds") else None
        # vllm:tool_call_parser_invocations{model_name, mode, outcome, request_type}: with
        # --tool-call-parser, every combination at 0 from the start (MetricsRecorder.parsed)
        self.parser_calls = {(m, o, t): FastCounter() for m in PARSER_MODES for o in PARSER_OUTCOMES
                             for t in PARSER_REQUEST_TYPES} \
            if flag_given(config, "tool-call-parser") and exposes(config, "vllm:tool_call_parser_invocations") \
            else None
        # vLLM 0.34's sleep-mode operation metrics (dev mode's /sleep, /wake_up,
        # /release_kv_cache_memory): registered at the first operation (sleep_operation)
        self.sleep_ops = None
        self.shown_sleep_ops = exposes(config, "vllm:sleep_mode_operation_duration_seconds")
        self.weight_ops = None      # the RL weight routes' (weight_operation), made at the first too
        # what tool_parser_type asks: non-streaming answers reach the parser with auto tools; and
        # chat's hides_metadata: vLLM has a tool parser with both flags
        self.auto_tool_choice = flag_given(config, "enable-auto-tool-choice")
        self.tool_parser = flag_given(config, "tool-call-parser")

    def refused(self, error, reason: str = "max_num_queued_reqs"):
        """Count a request refused by a queue limit (vLLM 0.34's
        ``vllm:admission_rejections{reason}``: ``max_num_queued_reqs`` for the waiting queue's
        429 and ``--max-num-queued-reqs``, ``max_num_queued_tokens``); returns ``error`` (what
        the caller raises)."""
        self.admission_rejections[reason].inc()
        return error

    def rendered(self, request_type: str, seconds: float) -> None:
        """A request rendered (chat templating and tokenization) in ``seconds``:
        ``vllm:request_render_duration_seconds{request_type}``, ``"chat"`` or ``"completion"``,
        as vLLM 0.34's ``OnlineRenderer.render_chat`` / ``render_completion`` observe it once a
        render succeeds (vllm/renderers/online_renderer.py)."""
        h = self.render_duration
        if h is not None:
            h.child(request_type).observe(seconds)

    def parsed(self, seq) -> None:
        """vLLM's tool parser ran over sequence ``seq``'s output (``--tool-call-parser``; the
        request's ``tool_parser``: its request type when the parser parses it, see
        :func:`generation.adapters.base.tool_parser_type`): ``vllm:tool_call_parser_invocations``
        once for a non-streaming choice, once per streamed output of a stream (vLLM's parser
        runs per delta: vllm/parser/abstract_parser.py ``extract_tool_calls`` and
        ``extract_tool_calls_streaming``), from the output that ends the reasoning span on when
        the answer has one; outcome ``tool_call`` for an answer with tool calls (every delta of
        it: the simulated answer has nothing around its calls)."""
        req = seq.request
        n = len(seq.pieces)
        called = "tool_call" if seq.tool_calls else "no_tool_call"
        if not req.stream:
            self.parser_calls[("non_streaming", called, req.tool_parser)].value += 1
            return
        if not n:
            return                  # vLLM sends an output without tokens unparsed
        # the request's stream interval, clamped up to --stream-interval (generation.engine.stream_interval.effective)
        interval = self.config.stream_interval
        if req.stream_interval is not None and req.stream_interval > interval:
            interval = req.stream_interval

        def output(k):              # the stream's output carrying token k (the first goes alone)
            return 0 if k == 0 else 1 + (k - 1) // interval
        first = 0
        span = seq.reasoning_span
        if span is not None:
            r1, c0 = span[1], span[2]
            if c0 == r1:            # cut inside the reasoning: the end marker never came
                return
            first = output(c0 - 1)
        self.parser_calls[("streaming", called, req.tool_parser)].value += output(n - 1) + 1 - first

    def sleep_operation(self, operation: str, seconds: float) -> None:
        """A dev-mode sleep-mode operation (``sleep``, ``release_kv_cache_memory``, ``wake``)
        took ``seconds``: vLLM 0.34's ``vllm:sleep_mode_operation_duration_seconds`` and
        ``vllm:sleep_mode_operations_in_flight`` (``serve/dev/sleep/metrics.py``), both made at
        the first operation, a series per operation at its first."""
        if not self.shown_sleep_ops:
            return
        ops = self.sleep_ops
        if ops is None:
            ops = self.sleep_ops = LabelledHistogram(
                "vllm:sleep_mode_operation_duration_seconds", "Duration of one sleep-mode operation.",
                SLEEP_OP_BUCKETS, {}, "operation")
        ops.child(operation).observe(seconds)

    def weight_operation(self, operation: str, seconds: float) -> None:
        """An RL weight-transfer operation (``init``, ``shutdown``, ``start``, ``start_draft``,
        ``update``, ``finish``: blueprints.rl_weights) took ``seconds``: vLLM 0.34's
        ``vllm:rl_weight_update_operation_duration_seconds`` and
        ``vllm:rl_weight_update_operations_in_flight`` (``WeightOperationMetrics``), made at the
        first operation, a series per operation at its first."""
        ops = self.weight_ops
        if ops is None:
            ops = self.weight_ops = LabelledHistogram(
                "vllm:rl_weight_update_operation_duration_seconds", "Duration of one weight-transfer operation.",
                SLEEP_OP_BUCKETS, {}, "operation")
        ops.child(operation).observe(seconds)

    def _collect_sleep_ops(self):
        """The sleep-mode and weight-transfer operations' families, once made."""
        for ops, gauge, doc in ((self.sleep_ops, "vllm:sleep_mode_operations_in_flight",
                                 "Sleep-mode operations currently awaited."),
                                (self.weight_ops, "vllm:rl_weight_update_operations_in_flight",
                                 "Weight-transfer operations currently awaited.")):
            if ops is None:
                continue
            yield from ops.collect()
            # the operations are instant here: none is ever in flight at a scrape
            fam = GaugeMetricFamily(gauge, doc, labels=["operation"])
            for operation in ops.children:
                fam.add_metric([operation], 0)
            yield fam

    def _parser_family(self, created: float):
        """``vllm:tool_call_parser_invocations`` (nothing without ``--tool-call-parser``)."""
        if self.parser_calls is None:
            return
        fam = CounterMetricFamily("vllm:tool_call_parser_invocations",
                                  "Total number of ToolParser invocations. Non-streaming increments once per "
                                  "choice; streaming increments once per delta.",
                                  labels=["model_name", "mode", "outcome", "request_type"])
        for (mode, outcome, rtype), c in self.parser_calls.items():
            fam.add_metric([self.model_name, mode, outcome, rtype], c.value, created)
        yield fam
