"""The H100 profile's ``m_half`` (GEMM rows at half of ``eta_f``): a grid over the training runs'
residual RMS (log ratios, the fit's objective at ``--scale 0.3``), the other constants kept.

    PYTHONPATH=. python bench/fit_m_half.py [--values 0,16,48,72,80,84,88,96,128]

Prints one line per value; the profile takes the minimum (80: 0.1047, against 0.1319 at 0).
Each value is one evaluation of the fit's objective (~20 s with 2 processes)."""
import argparse
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def main() -> int:
    import numpy as np
    from generation.engine.perf import fit, groundtruth as gt
    from generation.engine.perf.step_model import load_constants
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--values", default="0,16,48,72,80,84,88,96,128")
    p.add_argument("--jobs", type=int, default=2)
    args = p.parse_args()
    runs = fit.training_runs(gt.load_experiments(None), "H100", "train")
    fit.FREE = ("m_half",)
    obj = fit.Objective(runs, load_constants("H100")[0], 0.3, None, args.jobs)
    best = None
    for v in (float(x) for x in args.values.split(",")):
        r = obj(np.array([math.log(max(v, 1e-9))]))
        rms = float(np.sqrt(np.mean(r ** 2)))
        print(f"m_half {v:6g}: residual RMS {rms:.4f}  (load {os.getloadavg()[0]:.1f})", flush=True)
        best = min(best or (rms, v), (rms, v))
    print(f"minimum: m_half {best[1]:g} (RMS {best[0]:.4f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
