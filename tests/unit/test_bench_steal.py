"""bench/steal.py (the hypervisor's steal beside the timing benches' figures) and the lag samples
the server writes for bench/engine_emission_lag.py (``VLLM_SIM_LAG_SAMPLES``).  Unit tier."""
from __future__ import annotations

import importlib.util
import os
import sys
import time

import pytest

from generation.metrics.series import SampledHistogram

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")


def _bench(name):
    spec = importlib.util.spec_from_file_location(name, os.path.join(ROOT, "bench", f"{name}.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


steal = _bench("steal")


def test_near_steal_looks_over_the_wait_and_a_margin():
    events = [(100.0, 0.01)]
    assert steal.near_steal(100.003, 0.005, events, margin=0.0) is True     # stolen while it waited
    assert steal.near_steal(99.999, 0.005, events, margin=0.0) is False     # over before the steal
    assert steal.near_steal(99.999, 0.005, events, margin=0.002) is True    # within the margin
    assert steal.near_steal(100.5, 0.005, events) is False
    assert steal.near_steal(100.5, 0.005, []) is False


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc/stat")
def test_steal_ticks_reads_proc_stat_and_the_sampler_stops():
    cpu = sorted(os.sched_getaffinity(0))[0]
    assert steal.steal_ticks(cpu) >= 0 and steal.steal_ticks(None) >= steal.steal_ticks(cpu)
    s = steal.StealSampler(cpu, period=0.001).start()
    time.sleep(0.02)
    s.stop()
    assert s.total_s >= 0.0 and all(dt > 0 for _, dt in s.events)


def test_run_delay_ns_reads_the_second_field_and_zero_when_unreadable(tmp_path):
    f = tmp_path / "schedstat"

    def run_delay(text: str) -> int:
        f.write_text(text)
        fd = os.open(f, os.O_RDONLY)
        try:
            return steal.run_delay_ns(fd)
        finally:
            os.close(fd)
    assert run_delay("123456 7890 42\n") == 7890
    assert run_delay("") == 0


@pytest.mark.skipif(not os.path.exists(f"/proc/{os.getpid()}/schedstat"), reason="schedstat")
def test_the_sampler_sees_a_process_wait_while_another_task_holds_its_cpu():
    """Two spinning processes on one CPU: each waits about half the time, in the scheduler's
    slices (ms), which the sampler of one of them records as waits."""
    import subprocess
    cpu = sorted(os.sched_getaffinity(0))[-1]
    spin = [sys.executable, "-c", "import os,time\nos.sched_setaffinity(0,{%d})\nt=time.time()\n"
            "while time.time()-t<0.6: pass" % cpu]
    a, b = subprocess.Popen(spin), subprocess.Popen(spin)
    try:
        time.sleep(0.1)
        s = steal.StealSampler(None, period=0.001, pid=a.pid, wait_threshold=0.0002).start()
        time.sleep(0.3)
        s.stop()
    finally:
        a.wait()
        b.wait()
    assert s.waits and s.waited_s > 0.03 and all(w > 0.0002 for _, w in s.waits)
    assert steal.StealSampler(None, pid=None).waits == []


def test_lag_samples_are_written_with_their_wall_clock(tmp_path):
    path = tmp_path / "lags.txt"
    h = SampledHistogram(str(path), "lag", "doc", (0.001, 0.01), {})
    before = time.time()
    h.observe(0.002)
    h.observe_n(0.0005, 3)
    h.dump(str(path))
    rows = [line.split() for line in path.read_text().splitlines()]
    assert [(float(v), int(n)) for v, n, _ in rows] == [(0.002, 1), (0.0005, 3)]
    assert all(before <= float(t) <= time.time() for _, _, t in rows)
    lag = _bench("engine_emission_lag")
    p50, p99, p999, lags, walls = lag.exact_lags(path, 1, 3)        # the observe_n's three
    assert lags == [0.0005] * 3 and len(walls) == 3 and p99 == 0.0005


def test_clear_of_steal_keeps_the_spans_no_steal_came_near():
    events = [(100.0, 0.01), (100.5, 0.01)]
    spans = [(99.90, 99.92), (99.99, 100.01), (100.2, 100.22), (100.49, 100.6), (101.0, 101.02)]
    assert steal.clear_of_steal(spans, events, margin=0.0) == [True, False, True, False, True]
    assert steal.clear_of_steal(spans, events, margin=0.09) == [False, False, True, False, True]
    assert steal.clear_of_steal(spans, events) == [steal.near_steal(b, b - a, events) is False for a, b in spans]
    assert steal.clear_of_steal(spans, []) == [True] * 5


def test_pauses_reports_the_gaps_of_a_spinning_clock(monkeypatch):
    ticks = iter([0.0, 0.0001, 0.0002, 0.0102, 0.0103, 0.02, 0.03])
    monkeypatch.setattr(steal.time, "monotonic", lambda: next(ticks))
    assert steal.pauses(0.025) == [(pytest.approx(0.0102), pytest.approx(0.01)), (pytest.approx(0.02), pytest.approx(0.0097)),
                                   (pytest.approx(0.03), pytest.approx(0.01))]     # it spins past the end once


def test_the_cpu_probe_times_its_loop_on_the_given_core_and_puts_the_affinity_back():
    sys.path.insert(0, os.path.join(ROOT, "bench"))      # timing_fidelity imports its siblings
    try:
        fidelity = _bench("timing_fidelity")
    finally:
        sys.path.remove(os.path.join(ROOT, "bench"))
    before = os.sched_getaffinity(0)
    cpu = sorted(before)[0]
    assert 0.0 < fidelity.cpu_probe(cpu) < 1000.0 and 0.0 < fidelity.cpu_probe(None) < 1000.0
    assert os.sched_getaffinity(0) == before
