"""What vLLM's engine-operation routes change on the engine (:class:`EngineState`, a base of
:class:`generation.engine.simulator.Simulator`): its sleep tags (``/sleep``, ``/wake_up``), its
scheduler's pause state (``/pause``, ``/sleep``) and whether it refuses new requests
(``/pause``, ``/checkpoint/prepare``)."""
from __future__ import annotations

from .freeze import freeze, thaw
from .weight_versions import DEFAULT_VERSION

UNPAUSED, PAUSED_NEW, PAUSED_ALL = "unpaused", "paused_new", "paused_all"


class EngineState:
    """``sleeping_tags`` (a set, set per instance by the Simulator: asleep while not empty; vLLM's
    executor tags, which a level-0 sleep leaves empty) and ``reject_new_requests`` (vLLM's
    ``EngineCore.reject_new_requests``: set by ``/pause`` or a checkpoint prepare with mode
    ``wait`` or ``abort`` until the resume or restore, never by ``/sleep``; ``Simulator.admit``
    then raises EnginePaused)."""
    reject_new_requests = False
    # vLLM 0.34's scheduler PauseState (``v1/core/sched/interface.py``), set by ``/pause`` and
    # ``/sleep`` (``EngineCore.pause_scheduler``) until ``/resume`` or a full ``/wake_up``:
    # ``paused_new`` (modes abort / wait) queues new requests while those in flight run on,
    # ``paused_all`` (keep) also freezes those in flight (step mode: no step is planned; the
    # default model: generation.engine.freeze).
    pause_state = UNPAUSED
    frozen_at = None          # the default model in PAUSED_ALL: since when (generation.engine.freeze)
    # the last ``record_sleep_state(sleep, level)`` (vLLM's AsyncLLM.sleep / wake_up /
    # release_kv_cache_memory), read by the ``vllm:engine_sleep_state`` gauge
    recorded_sleep = (0, 0)
    # the label of the weights (vLLM's EngineCore._weight_version; generation.engine.weight_versions)
    weight_version = DEFAULT_VERSION

    SLEEP_TAGS = ("weights", "kv_cache")

    @property
    def scheduler_paused(self) -> bool:
        """vLLM's ``is_scheduler_paused`` (the checkpoint's pause aside: blueprints.rl.paused)."""
        return self.pause_state != UNPAUSED

    def pause_scheduler(self, mode: str) -> None:
        """vLLM's ``EngineCore.pause_scheduler`` state change: ``keep`` is PAUSED_ALL, ``abort``
        and ``wait`` PAUSED_NEW.  New requests then wait in the queue (the step engine's, or the
        simulator's) until :meth:`unpause_scheduler`; aborting or draining those in flight is
        the caller's (blueprints.rl.pause_scheduler)."""
        self.pause_state = PAUSED_ALL if mode == "keep" else PAUSED_NEW
        engine = getattr(self, "engine", None)
        if engine is not None:
            engine.set_pause_state(self.pause_state)
        elif self.pause_state == PAUSED_ALL:        # the default model: the running ones stop too
            freeze(self)
        else:                                       # (PAUSED_NEW steps on: after a keep, they go on)
            thaw(self)

    def unpause_scheduler(self) -> None:
        """vLLM's ``set_pause_state(UNPAUSED)``: the requests queued while paused are scheduled."""
        if self.pause_state == UNPAUSED:
            return
        self.pause_state = UNPAUSED
        engine = getattr(self, "engine", None)
        if engine is not None:
            engine.set_pause_state(UNPAUSED)
        else:
            thaw(self)
            self._schedule()

    @property
    def sleeping(self) -> bool:
        """vLLM's ``is_sleeping``: true from ``/sleep`` until every tag is woken again."""
        return bool(self.sleeping_tags)

    @sleeping.setter
    def sleeping(self, value: bool) -> None:
        self.sleeping_tags = set(self.SLEEP_TAGS) if value else set()

    def wake_up(self, tags) -> bool:
        """vLLM's ``Executor.wake_up``: wake ``tags`` (all when empty); a tag that is not asleep
        wakes nothing (vLLM logs a warning).  Returns whether the KV cache was woken.  The tag
        ``scheduling`` is no executor tag: ``EngineCore.wake_up`` drops it, and wakes nothing
        when it was the only one (the scheduler alone resumes, if nothing else sleeps)."""
        if tags:
            tags = [t for t in tags if t != "scheduling"]
            if not tags:
                return False
        asleep = self.sleeping_tags
        if not asleep:
            return False
        if tags and any(t not in asleep for t in tags):
            return False
        woken = set(tags) if tags else set(asleep)
        asleep -= woken
        return "kv_cache" in woken
