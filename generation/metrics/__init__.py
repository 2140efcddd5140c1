"""vLLM's Prometheus metrics.

    recorder           ``MetricsRecorder``: the ``vllm:*`` series, with vLLM's names, labels, buckets
    fake_metrics       ``FakeMetricsCollector``: ``--fake-metrics`` values exported instead
    fake_metrics_spec  parsing and generators of the ``--fake-metrics`` option
    buckets            histogram bucket boundaries shared by both
"""
