"""WSGI entry point: ``gunicorn -k gevent -w 1 'wsgi:app'`` or ``flask --app wsgi run``.

Configuration comes from the YAML file named by ``SIM_CONFIG`` and/or the flags in
``SIM_ARGS`` (same names as ``python app.py``; flags win over the file).

``--data-parallel-size N`` serves the N engines behind this one app, as ``python app.py`` does
(:mod:`server.dp_api`; not a Flask app, so ``flask run`` cannot serve it).

Under gunicorn (:func:`server.serve.attach_to_gunicorn`): more than one worker is refused
(one process is one server; use ``--data-parallel-size``), log lines take the simulator's
format, the start-up summary is logged, and SIGTERM turns ``/health/ready`` to 503.  The full
lifecycle of ``python app.py`` (grace period, clean end of streams, SIGHUP ignored) comes with
``gunicorn -k server.worker.SimWorker -w 1 --no-control-socket 'wsgi:app'``.
"""
from __future__ import annotations

import os
import shlex

from app import create_app
from server.serve import attach_to_gunicorn
from generation.config.cli import load_config
from generation.tokenization.model_config import apply_model_defaults

_argv = shlex.split(os.environ.get("SIM_ARGS", ""))
if os.environ.get("SIM_CONFIG"):
    _argv = ["--config", os.environ["SIM_CONFIG"]] + _argv
_config = load_config(_argv)
apply_model_defaults(_config)           # vLLM: --max-model-len defaults to the model's context length
if _config.data_parallel_size > 1 and not _config.data_parallel_external_lb and _config.data_parallel_rank < 0:
    from server.dp_api import build_data_parallel_api    # vLLM's one endpoint over the ranks (not a Flask app)
    from generation.tokenization.tokenizer_loading import load_tokenizer
    _config.data_parallel_rank = 0
    _tokenizer = load_tokenizer(_config)                  # one for every rank, as the API server's
    app = build_data_parallel_api(_config, lambda rank_config: create_app(rank_config, _tokenizer))
else:
    app = create_app(_config)
attach_to_gunicorn(app, _config)
