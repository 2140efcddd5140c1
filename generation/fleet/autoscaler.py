"""The autoscaler of a simulated fleet: it reads the pods' metrics at a scrape interval and
scales on thresholds, as llm-d's workload-variant autoscaler (WVA) does with its saturation
analyzer, and as KEDA / HPA rules on the same metrics do.

Every ``scrape_interval`` seconds (Prometheus' 15 s by default) it reads each ready pod's
``vllm:kv_cache_usage_perc`` and queue (``vllm:num_requests_waiting`` and the requests still in
its frontend) and decides (:meth:`Autoscaler.decide`), with WVA's saturation rules
(``configmap-saturation-scaling.yaml``):

- a pod is **saturated** when its KV usage >= ``kv_cache_threshold`` or its queue >=
  ``queue_length_threshold``;
- **scale up** (by ``scale_up_step``) when every pod is saturated, or the non-saturated pods'
  mean spare KV (``kv_cache_threshold - usage``) is below ``kv_spare_trigger``, or their mean
  spare queue (``queue_length_threshold - queue``) below ``queue_spare_trigger``;
- **scale down** by one when no pod is saturated and the same load over one pod fewer would
  still leave the spare triggers met, and this has held for ``scale_down_stabilization``
  seconds (HPA's stabilization window; 300 s by default);
- never below ``min_replicas`` nor above ``max_replicas``; pods still starting count towards
  the replicas (no second scale-up for the same need while one starts).

A new pod is ready ``startup_delay`` seconds after the decision (image pull, weights, CUDA
graphs); a removed pod stops receiving requests and leaves once its requests finished (it
drains).  Defaults are the issue's WVA rules: KV usage above 0.7 or more than 10 waiting.
A user's rules come as YAML (:func:`load_policy`), WVA's key names or these.
"""
from __future__ import annotations

from dataclasses import dataclass, fields


@dataclass
class ScalingPolicy:
    """Thresholds and timings (seconds) of the autoscaler (module docstring)."""
    scrape_interval: float = 15.0
    startup_delay: float = 60.0
    min_replicas: int = 1
    max_replicas: int = 64
    kv_cache_threshold: float = 0.7
    queue_length_threshold: float = 10.0
    kv_spare_trigger: float = 0.1
    queue_spare_trigger: float = 3.0
    scale_up_step: int = 1
    scale_down_stabilization: float = 300.0

    def validate(self) -> "ScalingPolicy":
        """Raises ValueError naming the field (as :func:`setting_name` gives it: its flag and its
        WVA key) for a value no autoscaler can have."""
        for name in ("scrape_interval",):
            # a lower bound: every scrape is an event of the replay until the trace's end, so a
            # nanosecond interval never finishes (Prometheus scrapes every few seconds)
            if not 0.01 <= getattr(self, name) <= 86400:
                raise ValueError(f"autoscaler: {setting_name(name)} must be from 0.01 to 86,400 seconds, "
                                 f"got {getattr(self, name)}")
        for name in ("startup_delay", "scale_down_stabilization", "kv_spare_trigger", "queue_spare_trigger"):
            if not getattr(self, name) >= 0:
                raise ValueError(f"autoscaler: {setting_name(name)} must be >= 0, got {getattr(self, name)}")
        if not 0 < self.kv_cache_threshold <= 1:
            raise ValueError(f"autoscaler: {setting_name('kv_cache_threshold')} must be in (0, 1], got {self.kv_cache_threshold}")
        if not self.queue_length_threshold > 0:
            raise ValueError(f"autoscaler: {setting_name('queue_length_threshold')} must be > 0, got {self.queue_length_threshold}")
        if not 1 <= self.min_replicas <= self.max_replicas:
            raise ValueError(f"autoscaler: need 1 <= {setting_name('min_replicas')} ({self.min_replicas}) <= "
                             f"{setting_name('max_replicas')} ({self.max_replicas})")
        if self.scale_up_step < 1:
            raise ValueError(f"autoscaler: {setting_name('scale_up_step')} must be >= 1, got {self.scale_up_step}")
        return self


# WVA's ConfigMap keys (and HPA's) -> ours
ALIASES = {"kvCacheThreshold": "kv_cache_threshold", "queueLengthThreshold": "queue_length_threshold",
           "kvSpareTrigger": "kv_spare_trigger", "queueSpareTrigger": "queue_spare_trigger",
           "minReplicas": "min_replicas", "maxReplicas": "max_replicas", "scrapeInterval": "scrape_interval",
           "startupDelay": "startup_delay", "scaleUpStep": "scale_up_step",
           "stabilizationWindowSeconds": "scale_down_stabilization",
           "scaleDownStabilization": "scale_down_stabilization"}


# the settings the fleet's command line sets too
FLAGS = {"scrape_interval": "--scrape-interval", "startup_delay": "--startup-delay", "min_replicas": "--min-pods",
         "max_replicas": "--max-pods"}


def setting_name(field: str) -> str:
    """How an error names a :class:`ScalingPolicy` field: its flag where the command line has
    one, and its WVA key (``--startup-delay / startupDelay``)."""
    key = next(k for k, v in ALIASES.items() if v == field)
    return f"{FLAGS[field]} / {key}" if field in FLAGS else key


def load_policy(path: str | None = None, **overrides) -> ScalingPolicy:
    """A :class:`ScalingPolicy` from a YAML file (flat, or under ``autoscaler``; keys as the
    dataclass or WVA's camelCase, e.g. ``kvCacheThreshold: 0.8``), then ``overrides`` (None
    values ignored).  Raises ValueError naming the file or the key."""
    values = {}
    if path:
        import yaml
        try:
            with open(path, encoding="utf-8") as f:
                data = yaml.safe_load(f) or {}
        except OSError as e:
            raise ValueError(f"--autoscaler-config {path}: cannot read ({e.strerror or e})") from None
        except yaml.YAMLError as e:
            raise ValueError(f"--autoscaler-config {path}: not YAML ({e})") from None
        if isinstance(data, dict) and isinstance(data.get("autoscaler"), dict):
            data = data["autoscaler"]
        if not isinstance(data, dict):
            raise ValueError(f"--autoscaler-config {path}: a mapping of thresholds, not {type(data).__name__}")
        names = {f.name: f.type for f in fields(ScalingPolicy)}
        for k, v in data.items():
            key = ALIASES.get(k, k)
            if key not in names:
                raise ValueError(f"--autoscaler-config {path}: unknown key {k!r} (WVA's keys: "
                                 f"{', '.join(k for k in ALIASES if k != 'scaleDownStabilization')}; or "
                                 f"{', '.join(sorted(names))})")
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                raise ValueError(f"--autoscaler-config {path}: {k} must be a number, got {v!r}")
            values[key] = int(v) if key in ("min_replicas", "max_replicas", "scale_up_step") else float(v)
    values.update({k: v for k, v in overrides.items() if v is not None})
    return ScalingPolicy(**values).validate()


class Autoscaler:
    """WVA's saturation rules over scraped metrics (module docstring).  :meth:`decide` returns
    the replica change: +k, -1 or 0; ``decisions`` lists ``(time, metrics, change, reason)``."""

    def __init__(self, policy: ScalingPolicy | None = None):
        self.policy = (policy or ScalingPolicy()).validate()
        self.calm_since = None          # since when a scale-down has been safe
        self.decisions: list = []

    def decide(self, now: float, metrics: list[tuple[float, float]], replicas: int) -> int:
        """``metrics``: ``(kv usage 0..1, queue)`` of each ready pod at this scrape;
        ``replicas``: the pods counted (ready and starting, not draining)."""
        p = self.policy
        change, reason = 0, "steady"
        if not metrics:
            reason = "no ready pod"
        else:
            ok = [(kv, q) for kv, q in metrics if kv < p.kv_cache_threshold and q < p.queue_length_threshold]
            spare_kv = sum(p.kv_cache_threshold - kv for kv, _ in ok) / len(ok) if ok else 0.0
            spare_q = sum(p.queue_length_threshold - q for _, q in ok) / len(ok) if ok else 0.0
            if not ok or spare_kv < p.kv_spare_trigger or spare_q < p.queue_spare_trigger:
                self.calm_since = None
                if replicas < p.max_replicas:
                    change = min(p.scale_up_step, p.max_replicas - replicas)
                    reason = ("all saturated" if not ok else
                              f"spare kv {spare_kv:.2f} < {p.kv_spare_trigger}" if spare_kv < p.kv_spare_trigger
                              else f"spare queue {spare_q:.1f} < {p.queue_spare_trigger}")
                else:
                    reason = "saturated at max_replicas"
            elif len(ok) == len(metrics) and replicas > p.min_replicas and len(metrics) > 1:
                n = len(metrics) - 1       # the same load over one pod fewer
                kv_after = sum(kv for kv, _ in metrics) / n
                q_after = sum(q for _, q in metrics) / n
                safe = (kv_after < p.kv_cache_threshold - p.kv_spare_trigger
                        and q_after < p.queue_length_threshold - p.queue_spare_trigger)
                if safe:
                    if self.calm_since is None:
                        self.calm_since = now
                    if now - self.calm_since >= p.scale_down_stabilization:
                        change, reason = -1, "spare capacity"
                        self.calm_since = None
                    else:
                        reason = "stabilizing"
                else:
                    self.calm_since = None
            else:
                self.calm_since = None
        self.decisions.append((now, list(metrics), change, reason))
        return change
