"""The simulated vLLM engine: one process, one queue, one set of counters.

    simulator       ``Simulator``: validation against the context, admission, the waiting
                    queue, running slots, the token stream of each sequence
    request         ``GenerationRequest`` / ``Sequence``: what the adapters hand the engine
    admission       ``check_admission``: vLLM 0.34's ``--max-num-queued-reqs`` / ``-tokens`` (503)
    latency         ``LatencyModel``: TTFT, inter-token latency, jitter, load factor
    token_schedule  ``TokenSchedule``: a stream's tokens at a constant inter-token latency
    stream_interval vLLM's stream interval: which tokens go out together, in either mode
    lora            ``LoraRegistry``: registered adapters and the ``--max-loras`` slots

The step engine (``--latency-calculator step``):

    scheduler       ``Scheduler``: vLLM V1's rules, one step at a time, without a clock
    block_pool      ``BlockPool``: KV blocks shared by reference count, cached until reused
    cpu_tier_v015   ``StoreAtFinishPool``: the pool with vLLM 0.15.1's CPU KV tier (before 0.21)
    step_cache      ``StepPrefixCache``: the pool as the simulator's prefix cache
    step_engine     ``StepEngine``: steps on the real clock, one timer per step
    perf/           the performance model (how long a step takes, how much fits):
        step_model  ``StepModel``: step time with fitted constants, the API-server ``Frontend``
        hardware    GPUs, batch defaults, the memory profile and KV capacity
        model_arch  architectures from config.json, presets
        step_time   the earlier roofline; step_table a measured table instead
        groundtruth real vLLM runs replayed and scored (bench/engine_fidelity.py)
        fit         the constants fitted to real runs (profiles/<gpu>.json)
    step_config     the flags resolved into the engine's settings
    replay          the same scheduler in virtual time (capacity planning)
"""
