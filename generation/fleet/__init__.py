"""A fleet of simulated vLLM pods in virtual time, above the engine: N pods on one clock
behind a router (:mod:`.routing`) and an autoscaler (:mod:`.autoscaler`), each pod the
replay's own stepper with the server's scheduler, KV block pool and step model
(:mod:`.replay`); traces (:mod:`.traces`); the capacity planner (:mod:`.planner`).
``python -m generation.fleet {replay,plan,merge,trace}`` (:mod:`.cli`)."""
