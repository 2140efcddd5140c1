"""The metrics' hot-path series (split from :mod:`generation.metrics.recorder`, which re-exports
them): :class:`FastHistogram`, a single-series histogram whose ``observe`` is one ``bisect`` and
two additions, exported through prometheus_client's custom-collector API or as prebuilt text,
and :class:`FastCounter`, a plain value."""
from __future__ import annotations

import bisect
import time

from prometheus_client.core import HistogramMetricFamily
from prometheus_client.samples import Sample
from prometheus_client.utils import floatToGoString


class FastHistogram:
    """A single-series histogram for hot paths, exported through prometheus_client's
    custom-collector API.  Not thread-safe by design: the simulator is one gevent thread."""

    def __init__(self, name: str, documentation: str, buckets, labels: dict, created: float | None = None):
        self.name = name
        self.documentation = documentation
        self.bounds = [float(b) for b in buckets]
        self.counts = [0] * (len(self.bounds) + 1)
        self.sum = 0.0
        self.labels = labels
        # unix time the series was made: prometheus_client's <name>_created sample, which vLLM's
        # /metrics carries for every counter and histogram series (one API server process:
        # prometheus_client's default registry, its created series not disabled)
        self.created = time.time() if created is None else created

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.bounds, value)] += 1
        self.sum += value

    def observe_n(self, value: float, n: int) -> None:
        """``n`` observations of the same value."""
        self.counts[bisect.bisect_left(self.bounds, value)] += n
        self.sum += value * n

    def alias(self, name: str, documentation: str) -> "FastHistogram":
        """The same observations exported under a second name (vLLM's deprecated aliases)."""
        other = FastHistogram(name, documentation, (), self.labels)
        other.source = self
        return other

    source = None

    def describe(self):
        return [HistogramMetricFamily(self.name, self.documentation, labels=list(self.labels))]

    def render_into(self, out: list, head: bool = True, created: bool = True) -> None:
        """Append this histogram's text exposition (what ``generate_latest`` prints for
        :meth:`collect`) to ``out``, from label strings built once: a scrape stays cheap.
        ``head``: the family's HELP and TYPE lines first; ``created``: its ``_created`` gauge
        after (:class:`LabelledHistogram` writes those once for all its series)."""
        pre = self.__dict__.get("_prefixes")
        src = self.source or self
        if pre is None or len(pre[0]) != len(src.counts):
            pre = self._prefixes = self._build_prefixes(src.bounds)
        buckets, count_prefix, sum_prefix, head_text, created_head, created_line = pre
        if head:
            out.append(head_text)
        acc = 0
        for prefix, c in zip(buckets, src.counts):
            acc += c
            out.append(prefix + _fmt_count(acc))
        out.append(count_prefix + _fmt_count(acc))
        out.append(sum_prefix + floatToGoString(src.sum) + "\n")
        if created:
            out.append(created_head)
            out.append(created_line)

    def _build_prefixes(self, bounds):
        def labels(extra=None):
            items = dict(self.labels)
            if extra:
                items.update(extra)
            return ",".join(f'{k}="{_escape(str(v))}"' for k, v in sorted(items.items()))
        doc = self.documentation.replace("\\", r"\\").replace("\n", r"\n")
        head = f"# HELP {self.name} {doc}\n# TYPE {self.name} histogram\n"
        buckets = [f"{self.name}_bucket{{{labels({'le': floatToGoString(b)})}}} "
                   for b in list(bounds) + [float("inf")]]
        created_head = f"# HELP {self.name}_created {doc}\n# TYPE {self.name}_created gauge\n"
        created_line = f"{self.name}_created{{{labels()}}} {floatToGoString((self.source or self).created)}\n"
        return (buckets, f"{self.name}_count{{{labels()}}} ", f"{self.name}_sum{{{labels()}}} ", head,
                created_head, created_line)

    def add_to(self, fam) -> None:
        """Add this series' samples (buckets, count, sum, created) to family ``fam``."""
        src = self.source or self
        cum, acc = [], 0
        for b, c in zip(src.bounds + [float("inf")], src.counts):
            acc += c
            cum.append((floatToGoString(b), acc))
        fam.add_metric(list(self.labels.values()), cum, src.sum)
        fam.samples.append(Sample(self.name + "_created", dict(self.labels), src.created))

    def collect(self):
        fam = HistogramMetricFamily(self.name, self.documentation, labels=list(self.labels))
        self.add_to(fam)
        yield fam


class LabelledHistogram:
    """A histogram family whose series are made on first use, one per value of its last label
    (prometheus_client's ``Histogram(...).labels(...)`` made lazily, as vLLM's render-duration
    and sleep-mode histograms): each a :class:`FastHistogram`; no series, no family in the
    exposition until the first (:meth:`child`).  ``labels``: the fixed labels' values (a dict,
    possibly empty); ``label``: the name of the varying one."""

    def __init__(self, name: str, documentation: str, buckets, labels: dict, label: str):
        self.name = name
        self.documentation = documentation
        self.buckets = buckets
        self.fixed = labels
        self.label = label
        self.children: dict = {}

    def child(self, value: str) -> FastHistogram:
        h = self.children.get(value)
        if h is None:
            h = self.children[value] = FastHistogram(self.name, self.documentation, self.buckets,
                                                     {**self.fixed, self.label: value})
        return h

    def observe(self, value: str, seconds: float) -> None:
        self.child(value).observe(seconds)

    def describe(self):
        return []           # the family exists only once a series does: collect decides

    def collect(self):
        if not self.children:
            return
        fam = HistogramMetricFamily(self.name, self.documentation, labels=[*self.fixed, self.label])
        for h in self.children.values():
            h.add_to(fam)
        yield fam

    def render_into(self, out: list) -> None:
        """As ``generate_latest`` prints :meth:`collect`: every series, then one ``_created``
        gauge family with each series' line."""
        children = list(self.children.values())
        if not children:
            return
        for i, h in enumerate(children):
            h.render_into(out, head=i == 0, created=False)
        out.append(children[0]._prefixes[4])
        out.extend(h._prefixes[5] for h in children)


def _escape(value: str) -> str:
    return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r'\"')


_COUNTS = [floatToGoString(float(i)) + "\n" for i in range(1024)]


def _fmt_count(n: int) -> str:
    return _COUNTS[n] if n < 1024 else floatToGoString(float(n)) + "\n"


class FastCounter:
    """A counter value; exported by :class:`MetricsRecorder`'s collector."""
    __slots__ = ("value",)

    def __init__(self):
        self.value = 0

    def inc(self, amount=1) -> None:
        self.value += amount


class SampledHistogram(FastHistogram):
    """A :class:`FastHistogram` that also keeps every observation, in order, as ``(value,
    times, at)`` (``at``: the wall clock of the call, ``time.time()``), and writes them to
    ``path`` when the process exits (one ``value times at`` line each): exact percentiles for a
    bench (``VLLM_SIM_LAG_SAMPLES``, ``bench/engine_emission_lag.py``) where the exported buckets
    are coarse, and when each was observed, to set beside the machine's own stalls (the
    hypervisor's steal).  24 bytes per observation call."""

    def __init__(self, path: str, name: str, documentation: str, buckets, labels: dict):
        super().__init__(name, documentation, buckets, labels)
        from array import array
        import atexit
        from time import time
        self.values, self.times, self.at, self._clock = array("d"), array("q"), array("d"), time
        atexit.register(self.dump, path)

    def observe(self, value: float) -> None:
        FastHistogram.observe(self, value)
        self.values.append(value)
        self.times.append(1)
        self.at.append(self._clock())

    def observe_n(self, value: float, n: int) -> None:
        FastHistogram.observe_n(self, value, n)
        self.values.append(value)
        self.times.append(n)
        self.at.append(self._clock())

    def dump(self, path: str) -> None:
        with open(path, "w") as fh:
            fh.writelines(f"{v!r} {n} {t!r}\n" for v, n, t in zip(self.values, self.times, self.at))
