"""A traced real vLLM run beside its replay, request by request: where the step engine's timing
departs from the real server's, not only by how much.

    python bench/trace_compare.py                                   # the 16 traced runs
    python bench/trace_compare.py --names 20260218-130541-mixtral-8x7b-v0-1-tp2-general --seed 1
    python bench/trace_compare.py --json out.json

The traced runs (``../shared/sim-to-real/data/traces/``, 16 vLLM v0.15.1 runs on H100) give every
request's arrival, prompt length, TTFT and E2E.  The replay (generation/engine/perf/groundtruth.py,
as ``bench/engine_fidelity.py`` runs it) sends the same requests at the same arrivals, so the two
can be matched one to one.  Per experiment it prints:

- **windows**: per ``--window`` seconds of arrivals, the median TTFT and the mean decode time
  (E2E - TTFT) of both, and the decode error.  A drift shows where the step time is off (a load
  level, the first seconds' compile stalls) while the whole-run means agree;
- **episodes**: runs of requests whose TTFT is over ``--episode-factor`` x the real stage's median
  (arrivals less than a second apart, at least three requests): start, end, count and deepest
  TTFT, real beside replay.  At ``max_num_seqs`` running the waiting requests queue for a slot; an
  episode that both have but with fewer or shallower requests in the replay moves the TTFT p99;
- **block-aligned prompts**: per stage, the TTFT median of prompts whose length is a multiple of
  the block size against the others, and, for the aligned ones, by how long before the arrival
  the previous request with the same prompt (inference-perf cycles 100 prompts) finished.  vLLM's
  prefix cache stops one block short of a fully cached prompt (the last token is recomputed);
  with the CPU KV tier (the OffloadingConnector) that block can be found on the CPU and loaded
  asynchronously, which defers the request by the load's round trip;
- **late requests**: those whose real TTFT exceeds the replay's by more than 15 ms (past the first
  stage's first minute, which compile stalls own), and how much longer than usual the requests
  decoding all through their wait took on the real server: a few ms or more means the whole
  server paused then (a pause the replay does not have), about 0 that the request alone waited.

Prints the machine's load beside the wall time.  ``--json`` writes every table.
"""
from __future__ import annotations

import argparse
import bisect
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from generation.engine.perf import groundtruth as gt          # noqa: E402

BLOCK_SIZE = 16                   # the traced runs' --block-size
PROMPT_CYCLE = 100                # inference-perf's 10 x 10 shared-prefix prompts, cycled in order
EPISODE_GAP_S = 1.0               # arrivals closer than this join one episode
EPISODE_MIN = 3                   # requests in the smallest episode reported
LATE_S = 0.015                    # a real TTFT this much over the replay's is a late request
WARM_S = 60.0                     # the first stage's first seconds (compile stalls) are left out of it
# how long before the arrival the previous same-prompt request finished (s; negative: still running)
PREDECESSOR_BANDS = ((-1e9, 0.0), (0.0, 1.0), (1.0, 2.0), (2.0, 5.0), (5.0, 1e9))


def real_rows(exp: dict, path: str | None = None) -> list[tuple]:
    """The trace's successful requests as ``(index, arrival s, ttft s, e2e s, prompt tokens)``,
    arrivals from the first request's (:func:`~generation.engine.perf.groundtruth.trace_times`)."""
    return gt.trace_times(exp, path)


def replay_rows(exp: dict, real: list[tuple], seed: int = 0, path: str | None = None) -> list[tuple]:
    """The replay's outcome of each of ``real``'s requests, in the same shape (matched by arrival
    order: the replay sends the trace's arrivals).  Raises ValueError when one of them timed out
    in the replay (no outcome to set beside the real one)."""
    sim = gt.simulate(exp, None, seed=seed, path=path)
    out = sorted(sim.outcomes, key=lambda o: o.arrival)        # one per trace row, in arrival order
    t0 = out[0].arrival
    rows = []
    for r in real:
        o = out[r[0]]
        if o.failed:
            raise ValueError(f"{exp['name']}: request {r[0]} timed out in the replay")
        rows.append((r[0], o.arrival - t0, o.ttft, o.e2e, r[4]))
    return rows


def windows(real: list[tuple], ours: list[tuple], width: float) -> list[dict]:
    """Per ``width`` seconds of arrivals: ``ttft_real`` / ``ttft_ours`` (median, ms),
    ``decode_real`` / ``decode_ours`` (mean E2E - TTFT, ms) and ``decode_err`` (%)."""
    out = []
    end = max(r[1] for r in real)
    lo = 0.0
    while lo <= end:
        sel = [(r, o) for r, o in zip(real, ours) if lo <= r[1] < lo + width]
        if sel:
            dr = statistics.fmean(1e3 * (r[3] - r[2]) for r, _ in sel)
            do = statistics.fmean(1e3 * (o[3] - o[2]) for _, o in sel)
            out.append({"start": lo, "n": len(sel),
                        "ttft_real": statistics.median(1e3 * r[2] for r, _ in sel),
                        "ttft_ours": statistics.median(1e3 * o[2] for _, o in sel),
                        "decode_real": dr, "decode_ours": do, "decode_err": 100.0 * (do / dr - 1.0)})
        lo += width
    return out


def episodes(rows: list[tuple], threshold_s: float, lo: float = 0.0, hi: float = float("inf")) -> list[dict]:
    """Runs of requests arriving in ``[lo, hi)`` with TTFT over ``threshold_s``, arrivals less
    than :data:`EPISODE_GAP_S` apart, of at least :data:`EPISODE_MIN` requests: ``start`` /
    ``end`` (s), ``n`` and ``max_ttft`` (ms)."""
    runs: list[dict] = []
    cur = None
    for r in rows:
        if not (lo <= r[1] < hi) or r[2] <= threshold_s:
            continue
        if cur is not None and r[1] - cur["end"] < EPISODE_GAP_S:
            cur["end"] = r[1]
            cur["n"] += 1
            cur["max_ttft"] = max(cur["max_ttft"], 1e3 * r[2])
        else:
            cur = {"start": r[1], "end": r[1], "n": 1, "max_ttft": 1e3 * r[2]}
            runs.append(cur)
    return [c for c in runs if c["n"] >= EPISODE_MIN]


def aligned_split(rows: list[tuple], lo: float, hi: float, block_size: int = BLOCK_SIZE) -> dict:
    """TTFT medians (ms) of the requests arriving in ``[lo, hi)`` whose prompt is a whole number
    of blocks (``aligned``) and of the others (``other``), with their counts; and the aligned
    ones' medians by :data:`PREDECESSOR_BANDS` (``by_predecessor``: how long before the arrival
    the previous request with the same prompt finished)."""
    by_index = {r[0]: r for r in rows}
    al = [r for r in rows if lo <= r[1] < hi and r[4] % block_size == 0]
    other = [r for r in rows if lo <= r[1] < hi and r[4] % block_size]
    bands = []
    for a, b in PREDECESSOR_BANDS:
        sel = []
        for r in al:
            p = by_index.get(r[0] - PROMPT_CYCLE)
            if p is not None and a <= r[1] - (p[1] + p[3]) < b:
                sel.append(1e3 * r[2])
        bands.append({"band_s": [a, b], "n": len(sel), "ttft": statistics.median(sel) if sel else None})
    med = (lambda v: statistics.median(1e3 * r[2] for r in v) if v else None)
    return {"aligned_n": len(al), "aligned": med(al), "other_n": len(other), "other": med(other),
            "by_predecessor": bands}


def late_requests(real: list[tuple], ours: list[tuple], lo: float, hi: float, late_s: float = LATE_S) -> dict:
    """The requests arriving in ``[lo, hi)`` whose real TTFT exceeds the replay's by more than
    ``late_s``: their count (``n``, of ``total``) and median excess (``excess_ms``); and
    ``others_ms``, for the requests decoding all through each one's wait, the median of their
    decode time's real-minus-replay difference less the run's median difference (a few ms or
    more: the whole server paused then, not only the late request)."""
    pairs = [(r, o) for r, o in zip(real, ours) if lo <= r[1] < hi]
    late = [(r, o) for r, o in pairs if r[2] - o[2] > late_s]
    base = statistics.median((r[3] - r[2]) - (o[3] - o[2]) for r, o in pairs) if pairs else 0.0
    starts = sorted((r[1] + r[2], r[1] + r[3], (r[3] - r[2]) - (o[3] - o[2])) for r, o in zip(real, ours))
    firsts = [x[0] for x in starts]
    longest = max((b - a for a, b, _ in starts), default=0.0)    # no decode began earlier than this
    shifts = []
    for r, _ in late:
        end = bisect.bisect_left(firsts, r[1])              # decoding before the late request arrived
        begin = bisect.bisect_left(firsts, r[1] - longest)
        through = [d for a, b, d in starts[begin:end] if b > r[1] + r[2]]
        if through:
            shifts.append(statistics.median(through) - base)
    return {"n": len(late), "total": len(pairs),
            "excess_ms": 1e3 * statistics.median(r[2] - o[2] for r, o in late) if late else None,
            "others_ms": 1e3 * statistics.median(shifts) if shifts else None}


def compare(exp: dict, *, seed: int = 0, width: float = 100.0, factor: float = 2.5,
            path: str | None = None) -> dict:
    """Every table of the module docstring for one traced experiment."""
    real = real_rows(exp, path)
    ours = replay_rows(exp, real, seed, path)
    out = {"name": exp["name"], "windows": windows(real, ours, width), "stages": []}
    t = 0.0
    for k, s in enumerate(exp["stages"]):
        lo, hi = t, t + s["duration"]
        t = hi
        med = statistics.median(r[2] for r in real if lo <= r[1] < hi)
        out["stages"].append({
            "stage": k, "threshold_ms": 1e3 * factor * med,
            "episodes_real": episodes(real, factor * med, lo, hi),
            "episodes_ours": episodes(ours, factor * med, lo, hi),
            "aligned_real": aligned_split(real, lo, hi), "aligned_ours": aligned_split(ours, lo, hi),
            "late": late_requests(real, ours, lo + (WARM_S if k == 0 else 0.0), hi)})
    return out


def _ms(v):
    return "   -" if v is None else "%4.0f" % v


def _band(band) -> str:
    a, b = band
    return "running:" if a < -1e8 else ">%gs:" % a if b > 1e8 else "%g-%gs:" % (a, b)


def print_comparison(c: dict) -> None:
    print(f"\n## {c['name']}")
    print("  window   n  TTFT p50 real/ours (ms)   decode real/ours (ms)   error")
    for w in c["windows"]:
        print("  %5.0f %5d  %6.1f / %6.1f          %7.0f / %7.0f   %+5.1f%%"
              % (w["start"], w["n"], w["ttft_real"], w["ttft_ours"], w["decode_real"], w["decode_ours"], w["decode_err"]))
    for s in c["stages"]:
        print("  stage %d, episodes over %.0f ms:" % (s["stage"], s["threshold_ms"]))
        for label in ("real", "ours"):
            eps = s["episodes_" + label]
            text = ", ".join("%.1f-%.1f s n %d max %.0f" % (e["start"], e["end"], e["n"], e["max_ttft"]) for e in eps)
            print("    %s: %s" % (label, text or "none"))
        for label in ("real", "ours"):
            a = s["aligned_" + label]
            bands = " ".join("%s %s (n %d)" % (_band(b["band_s"]), _ms(b["ttft"]).strip(), b["n"])
                             for b in a["by_predecessor"] if b["n"])
            print("    %s block-aligned prompts: n %d TTFT p50 %s ms, others %s ms; the aligned by when the same "
                  "prompt's previous request finished: %s" % (label, a["aligned_n"], _ms(a["aligned"]).strip(),
                                                               _ms(a["other"]).strip(), bands))


        late = s["late"]
        if late["n"]:
            print("    late in the real run (TTFT over the replay's by more than %.0f ms%s): %d of %d, by %.0f ms "
                  "(median); the requests decoding all through their wait: %s ms against the stage's median "
                  "real-minus-replay decode time"
                  % (1e3 * LATE_S, ", after the first %.0f s" % WARM_S if s["stage"] == 0 else "", late["n"],
                     late["total"], late["excess_ms"], "-" if late["others_ms"] is None else "%+.0f" % late["others_ms"]))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--names", default="", help="comma-separated traced experiments (default: all 16)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--window", type=float, default=100.0, help="seconds of arrivals per window")
    ap.add_argument("--episode-factor", type=float, default=2.5,
                    help="an episode's TTFT threshold, times the real stage's median")
    ap.add_argument("--json", default="")
    args = ap.parse_args(argv)
    exps = [e for e in gt.load_experiments() if e.get("trace")]
    if args.names:
        want = set(args.names.split(","))
        exps = [e for e in exps if e["name"] in want]
        if len(exps) != len(want):
            ap.error("not a traced experiment: " + ", ".join(sorted(want - {e["name"] for e in exps})))
    t = time.perf_counter()
    out = []
    for exp in exps:
        try:
            c = compare(exp, seed=args.seed, width=args.window, factor=args.episode_factor)
        except ValueError as e:          # a request the replay timed out: no one-to-one match
            print(f"\n## {exp['name']}: skipped ({e})")
            continue
        print_comparison(c)
        out.append(c)
    print("\n%d traced runs in %.0f s, load average %.2f" % (len(out), time.perf_counter() - t, os.getloadavg()[0]))
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(out, fh, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
