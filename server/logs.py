"""The simulator's log lines and gunicorn's: one format (``LOG_FORMAT``), the access log's
(``ACCESS_FORMAT``, uvicorn's fields plus the duration), ``--log-level`` / ``--uvicorn-log-level``.
"""
from __future__ import annotations

import logging
import sys


log = logging.getLogger("vllm_sim")

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s[%(process)d]: %(message)s"
ACCESS_FORMAT = '%(h)s "%(r)s" %(s)s %(B)s %(M)sms'

# ---------------------------------------------------------------------------------------------
# logs
def log_level_name(config) -> str:
    return str(getattr(config, "log_level", "info") or "info").lower()


def configure_logging(config) -> None:
    """One format for the simulator's lines and gunicorn's (``LOG_FORMAT``), on stderr, at
    ``--log-level``."""
    level = getattr(logging, log_level_name(config).upper(), logging.INFO)
    root = logging.getLogger()
    if not any(getattr(h, "_vllm_sim", False) for h in root.handlers):
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter(LOG_FORMAT))
        handler._vllm_sim = True
        root.addHandler(handler)
    root.setLevel(level)
    log.setLevel(level)


def _restyle_gunicorn_logger(glog, config) -> None:
    """Give a gunicorn ``glogging.Logger`` our format and stream (stderr), and turn its access
    log on (default) or off (``--disable-log-requests``)."""
    fmt = logging.Formatter(LOG_FORMAT)
    for lg in (glog.error_log, glog.access_log):
        for h in lg.handlers:
            h.setFormatter(fmt)
            if isinstance(h, logging.StreamHandler) and h.stream is sys.stdout:
                h.setStream(sys.stderr)
    level = getattr(logging, log_level_name(config).upper(), logging.INFO)
    glog.error_log.setLevel(level)
    glog.access_log.setLevel(max(logging.INFO, level))     # access lines are INFO, as uvicorn's
    glog.access_log.disabled = bool(getattr(config, "disable_log_requests", False))


def _gunicorn_logger_class(config):
    from gunicorn import glogging

    class SimLogger(glogging.Logger):
        error_fmt = LOG_FORMAT
        datefmt = None

        def setup(self, cfg):
            super().setup(cfg)
            _restyle_gunicorn_logger(self, config)
            self._own_format = cfg.access_log_format == ACCESS_FORMAT

        def access(self, resp, req, environ, request_time):
            # The line of ACCESS_FORMAT built directly: gunicorn's atoms (every header, a
            # strftime, a case-insensitive wrapper) cost more than the rest of the line.
            if not self.access_log_enabled:
                return
            if not getattr(self, "_own_format", False):
                return super().access(resp, req, environ, request_time)
            log = self.access_log
            if not log.isEnabledFor(logging.INFO):
                return
            status = resp.status
            if isinstance(status, str):
                status = status.split(None, 1)[0]
            sent = getattr(resp, "sent", None)
            try:
                log.info('%s "%s %s %s" %s %s %dms', environ.get("REMOTE_ADDR", "-"), environ["REQUEST_METHOD"],
                         environ["RAW_URI"], environ["SERVER_PROTOCOL"], status, "-" if sent is None else sent,
                         request_time.seconds * 1000 + request_time.microseconds // 1000)
            except Exception:
                import traceback
                self.error(traceback.format_exc())
    return SimLogger


