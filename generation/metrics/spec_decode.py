"""vLLM's speculative-decoding families (``vllm:spec_decode_*``), as vLLM 0.34's
``SpecDecodingProm`` (``vllm/v1/spec_decode/metrics.py``) exports them with a speculative config:

- ``vllm:spec_decode_num_drafts_total``: drafts verified (one per request and step that had any);
- ``vllm:spec_decode_num_draft_tokens_total``: draft tokens verified;
- ``vllm:spec_decode_num_accepted_tokens_total``: draft tokens accepted;
- ``vllm:spec_decode_num_accepted_tokens_per_pos_total``: accepted at each draft position
  (label ``position``, ``0 .. k - 1``), every series made at start-up.

Each with ``model_name`` and ``engine``; registered before the KV connector's and the
scheduler's families, as vLLM's ``PrometheusStatLogger`` builds them.  The counts are the step
engine's scheduler's (:class:`~generation.engine.scheduler.Scheduler`: ``spec_counts``,
``spec_per_pos``), read at scrape time; without step mode the series stay 0 (nothing is
drafted).  ``_created`` is the start-up time, as vLLM's counters have it."""
from __future__ import annotations

import time

from prometheus_client.core import CounterMetricFamily

FAMILIES = (("vllm:spec_decode_num_drafts", "Number of spec decoding drafts."),
            ("vllm:spec_decode_num_draft_tokens", "Number of draft tokens."),
            ("vllm:spec_decode_num_accepted_tokens", "Number of accepted tokens."))
PER_POS = ("vllm:spec_decode_num_accepted_tokens_per_pos", "Accepted tokens per draft position.")


class SpecDecodeMetrics:
    """The families of one engine: ``labels`` ``{"model_name": ..., "engine": ...}``,
    ``positions`` the draft length ``k``; :attr:`source` (the step engine's scheduler, set when
    it is built) holds the counts."""

    def __init__(self, labels: dict, positions: int):
        self.labels = dict(labels)
        self.positions = positions
        self.source = None
        self.created = time.time()

    def collect(self):
        names, values = list(self.labels), list(self.labels.values())
        src = self.source
        counts = src.spec_counts if src is not None else (0, 0, 0)
        for (name, doc), value in zip(FAMILIES, counts):
            fam = CounterMetricFamily(name, doc, labels=names)
            fam.add_metric(values, value, self.created)
            yield fam
        fam = CounterMetricFamily(PER_POS[0], PER_POS[1], labels=names + ["position"])
        per_pos = src.spec_per_pos if src is not None else ()
        for pos in range(self.positions):
            fam.add_metric(values + [str(pos)], per_pos[pos] if pos < len(per_pos) else 0, self.created)
        yield fam
