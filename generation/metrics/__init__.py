"""vLLM's Prometheus metrics.

    recorder           ``MetricsRecorder``: the ``vllm:*`` series, with vLLM's names, labels, buckets
    scrape             its collectors read at scrape time (scheduler state, LoRA, cache config)
    frontend           its API-server families (admission, render duration, tool parser, sleep mode)
    http               the HTTP middleware's ``http_*`` families (prometheus-fastapi-instrumentator's)
    series             the hot-path histogram and counter types
    fake_metrics       ``FakeMetricsCollector``: ``--fake-metrics`` values exported instead
    fake_metrics_spec  parsing and generators of the ``--fake-metrics`` option
    buckets            histogram bucket boundaries shared by both
"""
