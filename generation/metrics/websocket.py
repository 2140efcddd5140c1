"""vLLM 0.34's WebSocket families (``vllm/entrypoints/serve/middleware/register.py`` adds
``WebSocketMetricsMiddleware`` from ``entrypoints/speech_to_text/realtime/metrics.py`` when the
model serves the realtime task), observed by :class:`server.websocket.WebSocketRoutes`:

    vllm:websocket_connections_active             gauge      no labels
    vllm:websocket_connections_total              counter    no labels (with its _created)
    vllm:websocket_connection_duration_seconds    histogram  no labels, :data:`DURATION_BUCKETS`

A connection counts from its accept (the 101) to the end of its session; prometheus_client's
objects in vLLM, a scrape-time collector here (the simulator's registry holds no
prometheus_client metric objects)."""
from __future__ import annotations

from bisect import bisect_left

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.samples import Sample
from prometheus_client.utils import floatToGoString

DURATION_BUCKETS = (0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800)
ACTIVE = "vllm:websocket_connections_active"
TOTAL = "vllm:websocket_connections_total"
DURATION = "vllm:websocket_connection_duration_seconds"


class WebSocketMetrics:
    """The three families; ``created``: their series' ``_created`` (unix seconds)."""

    def __init__(self, created: float):
        self.created = created
        self.shown = True
        self.active = 0
        self.total = 0
        self.counts = [0] * (len(DURATION_BUCKETS) + 1)      # per bucket, +Inf last (not cumulative)
        self.sum = 0.0
        self._bounds = [float(b) for b in DURATION_BUCKETS]

    def opened(self) -> None:
        self.active += 1
        self.total += 1

    def closed(self, seconds: float) -> None:
        self.active -= 1
        self.counts[bisect_left(self._bounds, seconds)] += 1     # le: the first bound >= seconds
        self.sum += seconds

    def render_into(self, out: list) -> None:
        """The families' exposition text appended to ``out`` (``MetricsRecorder.render``)."""
        if self.shown:
            from prometheus_client import generate_latest
            out.append(generate_latest(self).decode())

    def collect(self):
        if not self.shown:
            return
        yield GaugeMetricFamily(ACTIVE, "Number of currently active WebSocket connections.", value=self.active)
        yield CounterMetricFamily(TOTAL, "Total number of WebSocket connections.", value=self.total,
                                  created=self.created)
        buckets, running = [], 0
        for bound, n in zip((*self._bounds, float("inf")), self.counts):
            running += n
            buckets.append((floatToGoString(bound), running))
        fam = HistogramMetricFamily(DURATION, "Duration of WebSocket connections in seconds.", buckets=buckets,
                                    sum_value=self.sum)
        fam.samples.append(Sample(DURATION + "_created", {}, self.created))
        yield fam


def websocket_metrics(config, created: float, *registries) -> WebSocketMetrics:
    """The families of ``config``'s server, registered in ``registries``: a generation model's
    (vLLM's realtime route and its middleware come with the model's realtime task; every
    generation model has the audio routes here), from the release that has them
    (``generation.config.vllm_versions.METRICS_SINCE``); otherwise an object that collects
    nothing (its counts are still kept)."""
    from generation.config.vllm_versions import exposes
    metrics = WebSocketMetrics(created)
    metrics.shown = not getattr(config, "pooling_kind", None) and exposes(config, ACTIVE)
    for r in registries:
        r.register(metrics)
    return metrics
