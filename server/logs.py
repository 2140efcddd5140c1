"""The simulator's log lines and gunicorn's: one format (``LOG_FORMAT``), the access log's
(``ACCESS_FORMAT``, uvicorn's fields plus the duration), ``--log-level`` / ``--uvicorn-log-level``.
"""
from __future__ import annotations

import logging
import os
import sys
import time


log = logging.getLogger("vllm_sim")

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s[%(process)d]: %(message)s"
ACCESS_FORMAT = '%(h)s "%(r)s" %(s)s %(B)s %(M)sms'
ACCESS_LINE = '%s "%s %s %s" %s %s %dms'      # ACCESS_FORMAT's line, built by SimLogger.access

# ---------------------------------------------------------------------------------------------
# logs
TRACE = 5           # uvicorn's TRACE_LOG_LEVEL: below DEBUG (logging has no such name: it fell back to INFO)
logging.addLevelName(TRACE, "TRACE")


def log_level_name(config) -> str:
    return str(getattr(config, "log_level", "info") or "info").lower()


def log_level(config) -> int:
    """``--log-level`` as a logging level: uvicorn's names, ``trace`` the most verbose."""
    name = log_level_name(config)
    return TRACE if name == "trace" else getattr(logging, name.upper(), logging.INFO)


def configure_logging(config) -> None:
    """One format for the simulator's lines and gunicorn's (``LOG_FORMAT``), on stderr, at
    ``--log-level``."""
    level = log_level(config)
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
    level = log_level(config)
    glog.error_log.setLevel(level)
    glog.access_log.setLevel(max(logging.INFO, level))     # access lines are INFO, as uvicorn's
    glog.access_log.disabled = bool(getattr(config, "disable_log_requests", False))
    for f in [f for f in glog.access_log.filters if isinstance(f, AccessPathFilter)]:
        glog.access_log.removeFilter(f)
    excluded = AccessPathFilter.paths(config)
    if excluded:
        glog.access_log.addFilter(AccessPathFilter(excluded))


class AccessPathFilter(logging.Filter):
    """``--disable-access-log-for-endpoints /health,/metrics``: no access line for those paths,
    matched exactly without the query, as vLLM's ``UvicornAccessLogFilter``
    (``vllm/logging_utils/uvicorn_logging.py``).  Reads the path from the simulator's line
    (``ACCESS_LINE``'s third argument, the raw URI) or from gunicorn's atoms (``U``) when
    another ``--access-logformat`` is in use."""

    def __init__(self, excluded: frozenset):
        super().__init__()
        self.excluded = excluded

    @staticmethod
    def paths(config) -> frozenset:
        text = getattr(config, "disable_access_log_for_endpoints", "") or ""
        return frozenset(p.strip() for p in text.split(",") if p.strip())

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        if isinstance(args, tuple) and len(args) >= 3 and isinstance(args[2], str):
            from urllib.parse import urlsplit
            return urlsplit(args[2]).path not in self.excluded
        if isinstance(args, dict) and isinstance(args.get("U"), str):
            return args["U"] not in self.excluded
        return True


class LeanAccessLine:
    """An access line written the way ``logger.info(line)`` would write it, without the logging
    machinery: with the configuration :func:`_restyle_gunicorn_logger` gives the access log (one
    stream handler, ``LOG_FORMAT``, no filter), the record, the caller lookup, the formatter and
    the time formatting cost about 15 us per request, some 10% of a short request's CPU (issue
    32), for one line.  The date and time to the second are formatted once a second.

    :meth:`of` returns None for any other configuration (a handler or filter a user added, another
    format, a propagating logger): those go through ``logging`` as before."""

    __slots__ = ("logger", "handler", "second", "stamp")

    @classmethod
    def of(cls, logger: logging.Logger) -> "LeanAccessLine | None":
        handlers = logger.handlers
        if (len(handlers) != 1 or logger.filters or logger.propagate or type(handlers[0]) is not logging.StreamHandler):
            return None
        h = handlers[0]
        f = h.formatter
        if (h.filters or h.level > logging.INFO or type(f) is not logging.Formatter or f._fmt != LOG_FORMAT
                or f.datefmt is not None or f.converter is not time.localtime
                or f.default_time_format != "%Y-%m-%d %H:%M:%S" or f.default_msec_format != "%s,%03d"):
            return None
        return cls(logger, h)

    def __init__(self, logger: logging.Logger, handler: logging.StreamHandler):
        self.logger, self.handler = logger, handler
        self.second, self.stamp = -1, ""

    def write(self, message: str) -> bool:
        """Write ``message``'s line (the caller checked the level); False where the handler set
        has changed since (the caller then logs through ``logging``)."""
        logger, h = self.logger, self.handler
        handlers = logger.handlers
        if len(handlers) != 1 or handlers[0] is not h or logger.disabled:
            return False
        now = time.time()
        second = int(now)
        if second != self.second:
            self.second, self.stamp = second, time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(now))
        line = "%s,%03d INFO %s[%d]: %s\n" % (self.stamp, (now - second) * 1000, logger.name, os.getpid(), message)
        try:
            stream = h.stream
            stream.write(line)
            stream.flush()
        except Exception:                   # as StreamHandler.emit: the handler reports it
            h.handleError(logging.makeLogRecord({"msg": message, "levelno": logging.INFO, "name": logger.name}))
        return True


def _gunicorn_logger_class(config):
    from gunicorn import glogging

    class SimLogger(glogging.Logger):
        error_fmt = LOG_FORMAT
        datefmt = None

        def setup(self, cfg):
            super().setup(cfg)
            _restyle_gunicorn_logger(self, config)
            self._own_format = cfg.access_log_format == ACCESS_FORMAT
            self._lean = LeanAccessLine.of(self.access_log)

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
            args = (environ.get("REMOTE_ADDR", "-"), environ["REQUEST_METHOD"], environ["RAW_URI"],
                    environ["SERVER_PROTOCOL"], status, "-" if sent is None else sent,
                    request_time.seconds * 1000 + request_time.microseconds // 1000)
            lean = getattr(self, "_lean", None)
            if lean is not None and lean.write(ACCESS_LINE % args):
                return
            try:
                log.info(ACCESS_LINE, *args)
            except Exception:
                import traceback
                self.error(traceback.format_exc())
    return SimLogger


