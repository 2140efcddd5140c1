"""WSGI entry point: ``gunicorn -k gevent -w 1 'wsgi:app'`` or ``flask --app wsgi run``.

Configuration comes from the YAML file named by ``SIM_CONFIG`` and/or the flags in
``SIM_ARGS`` (same names as ``python app.py``; flags win over the file).
"""
from __future__ import annotations

import os
import shlex

from app import create_app
from generation.config import load_config

_argv = shlex.split(os.environ.get("SIM_ARGS", ""))
if os.environ.get("SIM_CONFIG"):
    _argv = ["--config", os.environ["SIM_CONFIG"]] + _argv
app = create_app(load_config(_argv))
