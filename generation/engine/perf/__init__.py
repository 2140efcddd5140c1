"""The step engine's performance model: how long an engine step takes and how much fits on the
GPU, for one model on one GPU type, with constants fitted to real vLLM runs.

    step_model   ``StepModel`` (step time: roofline terms, CUDA-graph padding, MoE and
                 all-reduce costs, fixed per-step and per-layer costs) and ``Frontend`` (the
                 API server as one serial CPU); ``PerfConstants`` loaded from ``profiles/``
    hardware     GPU peaks, vLLM's batch defaults, the start-up memory profile, KV capacity
    model_arch   a model's architecture from its config.json (or a shipped preset)
    step_time    the earlier roofline with hand-set constants, and measured step tables
    groundtruth  the sim-to-real runs (bench/sim_to_real/) replayed and scored as the peer
                 benchmark scores simulators
    fit          ``python -m generation.engine.perf.fit``: the profiles' constants from the runs

The scheduler (``generation.engine.scheduler``) decides what a step holds; this package decides
how long it takes.  Nothing here keeps state between steps except ``Frontend``.
"""
