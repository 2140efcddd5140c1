"""Write this folder's compact copy of the sim-to-real ground truth (run once; its output is committed).

``python bench/sim_to_real/prepare.py [SRC]`` reads the collected data (default
``../shared/sim-to-real/data`` beside the repository) and writes next to this file:

- ``experiments.json``: the 59 experiments' settings, workloads and measured values, as collected;
- ``model_configs/<name>/config.json``: the Hugging Face configs of the collection (those the
  experiments name, and DeepSeek-V2-Lite's, GLM-5.2-FP8's and Qwen3-30B-A3B's, which none of
  these experiments runs: MLA, sparse MLA and a 128-expert MoE for the step model's tests);
- ``traces/*.csv.gz``: the 16 per-request traces (arrival us, input/output tokens, error, E2E s,
  TTFT s), as collected;
- ``peer.csv``: every peer simulator's prediction per (experiment, stage, metric) with the
  measured value, from the peer benchmark's error records (main38 and trainval), reduced to the
  columns the harness prints: ``set, simulator, experiment, stage, metric, predicted, actual``
  (``experiment`` is the name used in ``experiments.json``).

The sources (repositories and commits) are in ``SOURCES.md``.
"""
from __future__ import annotations

import csv
import json
import os
import shutil
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCES_HEADER = """# Sources of bench/sim_to_real/

A compact copy of measured vLLM v0.15.1 runs (and a peer benchmark's published predictions) made
by `prepare.py` from the collection below; every figure is the sources', unchanged. `peer.csv`
keeps the columns the harness prints from the two `error_records` files; `experiments.json`,
`model_configs/` and `traces/` are copied as collected. The collection's own list of sources:

"""


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    src = argv[0] if argv else os.path.join(HERE, "..", "..", "..", "shared", "sim-to-real", "data")
    exps = json.load(open(os.path.join(src, "experiments.json")))
    shutil.copyfile(os.path.join(src, "experiments.json"), os.path.join(HERE, "experiments.json"))
    for name in sorted({e["model_config"] for e in exps} | set(os.listdir(os.path.join(src, "model_configs")))):
        os.makedirs(os.path.join(HERE, "model_configs", name), exist_ok=True)
        shutil.copyfile(os.path.join(src, "model_configs", name, "config.json"),
                        os.path.join(HERE, "model_configs", name, "config.json"))
    os.makedirs(os.path.join(HERE, "traces"), exist_ok=True)
    for e in exps:
        if e.get("trace"):
            shutil.copyfile(os.path.join(src, e["trace"]), os.path.join(HERE, e["trace"]))
    by_folder = {}
    for e in exps:
        for _set, folder in (e.get("peer_folders") or {}).items():
            by_folder[(_set, folder)] = e["name"]
    with open(os.path.join(HERE, "peer.csv"), "w", newline="") as out:
        w = csv.writer(out)
        w.writerow(["set", "simulator", "experiment", "stage", "metric", "predicted", "actual"])
        for _set, fname in (("main38", "error_records_iter36.csv"), ("trainval", "error_records_trainval.csv")):
            for r in csv.DictReader(open(os.path.join(src, "peer", fname))):
                name = by_folder.get((_set, r["experiment_folder"]))
                if name is None:
                    continue
                w.writerow([_set, r["simulator"], name, r["stage_index"], r["metric_name"],
                            f"{float(r['predicted']):.6g}", f"{float(r['actual']):.6g}"])
    with open(os.path.join(src, "SOURCES.md"), encoding="utf-8") as fh:
        listed = fh.read().split("\n", 2)[2]            # the collection's list, without its title
    with open(os.path.join(HERE, "SOURCES.md"), "w", encoding="utf-8") as out:
        out.write(SOURCES_HEADER + listed)
    print(f"wrote {HERE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
