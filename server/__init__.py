"""The runtime that serves the WSGI app: gunicorn's gevent worker run in-process, TLS, logs,
lifecycle, data-parallel ranks, and the hub-driven SSE emitter.  It knows nothing of the
routes (``blueprints/``) and imports no Flask; ``blueprints`` use only its emitter.

``python app.py`` runs one :class:`server.worker.SimWorker` in its own process, without
gunicorn's arbiter: one process is one vLLM engine (its queue, KV cache and counters), as
vLLM's own server is one process.  There is therefore no fork, no control socket (several
servers on one host never share one), and no reload: SIGHUP is logged and ignored instead of
starting a second engine beside the draining one (issue 12).
``gunicorn -k server.worker.SimWorker -w 1 wsgi:app`` uses the same worker under gunicorn's
arbiter.  A port already in use is one line and exit code 1.

Modules:
    serve          ``serve()`` for ``python app.py``, ``attach_to_gunicorn()``, the start-up summary
    worker         ``SimWorker``: signals, serving, drain
    lifecycle      the shutdown grace, ``ServerShuttingDown``, which connections a drain serves
    listening      bind, accept batching, TLS handshake time limit, the open-files limit
    tls            certificate files and self-signed certificates
    logs           log and access-log formats, gunicorn's logger
    auth           ``--api-key`` (a WSGI middleware before routing)
    wsgi_layers    ``--log-http``, the chunked-body limit, the body deadline, the shared request rules
    ranks          ``--data-parallel-size``: ranks 1..N-1 as child processes
    sse_emitter    streams driven from the event loop (``HubEmitter``)
    arrivals       requests on open keep-alive connections take turns with due tokens
    unfinished     connections whose request has not arrived give way to new ones on a full pool
    gunicorn_tuning  gunicorn's per-request work trimmed (headers with the first body bytes)
"""
