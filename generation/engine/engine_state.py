"""What vLLM's engine-operation routes change on the engine (:class:`EngineState`, a base of
:class:`generation.engine.simulator.Simulator`): its sleep tags and level (``/sleep``,
``/wake_up``) and whether it refuses new requests (``/checkpoint/prepare``)."""
from __future__ import annotations


class EngineState:
    """``sleeping_tags`` (a set, set per instance by the Simulator: asleep while not empty),
    ``sleep_level`` (the last ``/sleep`` level) and ``reject_new_requests`` (vLLM's
    ``EngineCore.reject_new_requests``: set by a checkpoint prepare with mode ``wait`` or
    ``abort``, cleared by the restore; ``Simulator.admit`` then raises EnginePaused)."""
    sleep_level = 1
    reject_new_requests = False
    scheduler_paused = False        # dev mode's POST /pause until /resume (blueprints.rl)

    SLEEP_TAGS = ("weights", "kv_cache")

    @property
    def sleeping(self) -> bool:
        """vLLM's ``is_sleeping``: true from ``/sleep`` until every tag is woken again."""
        return bool(self.sleeping_tags)

    @sleeping.setter
    def sleeping(self, value: bool) -> None:
        self.sleeping_tags = set(self.SLEEP_TAGS) if value else set()

    def wake_up(self, tags) -> bool:
        """vLLM's ``Executor.wake_up``: wake ``tags`` (all when empty); a tag that is not asleep
        wakes nothing (vLLM logs a warning).  Returns whether the KV cache was woken."""
        asleep = self.sleeping_tags
        if not asleep:
            return False
        if tags and any(t not in asleep for t in tags):
            return False
        woken = set(tags) if tags else set(asleep)
        asleep -= woken
        return "kv_cache" in woken
