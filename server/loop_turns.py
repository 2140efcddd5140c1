"""Work the hub's event loop does in bounded slices, between the tokens that fall due (issue 32).

A burst of streams opened together ends together, and a cohort's per-stream work (headers held
back in the burst, the rendering of each last token, the ends) would otherwise run in one loop
turn and hold every other stream's due token until it is done.  :class:`IdleWork` runs such work
only in idle turns (nothing due), :data:`END_BUDGET` of it a turn; :class:`EndTurns` bounds the
ends that their timers force in a busy turn.  Used by :mod:`server.sse_emitter`.
"""
from __future__ import annotations

from collections import OrderedDict, deque
from time import monotonic

END_BUDGET = 0.001                # s of stream ends per loop turn (idle, or forced: EndTurns)
GUARD_MARGIN = 0.0003             # s: idle work stops this long before a step engine's end timer (~2 ends)
# libev priority of a deadline's timer (each token of a varying latency, and the first token of a
# stream whose schedule does not start at token 0), below the token schedules' (0): in a loop turn
# where both fall due, the running streams' next tokens go first.  A burst's first tokens fall due
# within ~10 ms and took ~26 ms of the core; in deadline order the early streams' second tokens
# waited behind the rest of them (their first gap up to +16 ms).  (A constant-ITL stream's first
# token is now token 0 of its schedule, Simulator.run's first_in_schedule: a tick like the others.)
# Above the arrival turns and the idle work (the lowest).
DEADLINE_PRIORITY = -1


class PerLoop:
    """One instance per event loop: ``of(loop)`` (each subclass keeps its own ``_of``)."""
    _of: dict = {}

    @classmethod
    def of(cls, loop):
        one = cls._of.get(loop)
        if one is None:
            one = cls._of[loop] = cls(loop)
        return one


class IdleWork(PerLoop):
    """Work a stream can leave until the loop has nothing else to do: a libev idle watcher that runs
    the queued calls, at most :data:`END_BUDGET` of them per idle turn, so that a cohort of streams
    does not hold other streams' due tokens.  Three kinds: a stream's end
    (:meth:`~server.sse_emitter.HubEmitter._finish`: a cohort ending together), the headers of a
    stream set up in a burst (:meth:`~server.sse_emitter.HubEmitter._send_head`: they go out before
    its first token is due, not with it, where the first tokens of the burst's streams fall due
    together) and the chunk of a token schedule's last token
    (:meth:`~server.sse_emitter.HubEmitter._render_last`: rendered ahead, not in the tick where the
    cohort's last tokens fall due together).  A call whose work was already done is a no-op, and a
    stream that leaves the hub takes its calls out (:meth:`discard`): the queue holds at most three
    calls per stream in the hub, however long a flood of arrivals keeps the loop from an idle turn.
    One per event loop."""
    _of: dict = {}

    def __init__(self, loop):
        self.loop = loop
        self.waiting: OrderedDict = OrderedDict()     # bound method -> None, first queued first
        self.idle = None
        # the one step engine's next hard deadline (``monotonic`` s, or inf): idle work stops
        # short of it (:meth:`guard_with`); False once a second engine asked (a fleet process)
        self.deadline = None

    def guard_with(self, deadline) -> None:
        """Stop idle turns :data:`GUARD_MARGIN` before ``deadline()`` (a step engine's end timer:
        :meth:`generation.engine.step_engine.StepEngine.end_timer_due`), so that a cohort's ends
        do not hold the step whose tokens are due (issue 32: a step's sends began up to 1.7 ms
        late after a turn of ends).  Only while one engine runs on this loop: a fleet's pods'
        deadlines would leave idle work no room."""
        if self.deadline is None:
            self.deadline = deadline
        elif self.deadline is not False and self.deadline != deadline:
            self.deadline = False

    def add(self, call) -> None:
        self.waiting[call] = None
        if self.idle is None:
            idle = self.idle = self.loop.idle()
            # libev runs an idle watcher only while nothing of its priority or above is pending:
            # at the lowest, not while the arrival turns' timer (server.arrivals) lets a burst in
            idle.priority = self.loop.MINPRI
            idle.start(self._turn)

    def discard(self, call) -> None:
        """Forget ``call`` (queued or not)."""
        self.waiting.pop(call, None)

    def _turn(self) -> None:
        waiting = self.waiting
        pop = waiting.popitem
        start = monotonic()
        limit = start + END_BUDGET
        if self.deadline:
            due = self.deadline() - GUARD_MARGIN
            if due <= start:
                return                  # the step's end comes first (its timer is due within the margin)
            if due < limit:
                limit = due
        while waiting:
            pop(last=False)[0]()
            if monotonic() >= limit:
                break
        if not waiting:
            self.idle.close()
            self.idle = None


class EndTurns(PerLoop):
    """Bounds the stream ends their timers force in one event-loop turn to :data:`END_BUDGET`.

    A stream's end waits for an idle turn (:class:`IdleWork`) but at most ``FINISH_WITHIN``: then
    its timer runs it (:meth:`~server.sse_emitter.HubEmitter._finish_due`).  Streams opened together
    end together, ~0.1 ms an end, and libev runs every timer that fell due before a loop turn in
    that turn: at the end of a burst of 1,000 streams, turns of 20-60 ms of ends ran while the later
    streams' last tokens fell due, and each waited for the turn's end (their last gaps over 25 ms in
    124 to 409 of the 1,000 streams in some runs, issue 32).  So a turn's forced ends stop once they
    took the budget; the rest wait, in order, for a timer of :data:`DEADLINE_PRIORITY` that runs the
    next budget's worth in the next turn, after the tokens that fell due in between (an idle turn
    may still end them first).  One per event loop."""
    _of: dict = {}

    def __init__(self, loop):
        self.loop = loop
        self.turn = -1                 # the loop.iteration whose forced ends began at ``start``
        self.start = 0.0
        self.waiting: deque = deque()  # ends deferred to later turns, first due first
        self.timer = None

    def admit(self, now: float) -> bool:
        """Whether an end due at ``now`` may run in this loop turn (no deferred end waits and
        the turn's budget is not spent)."""
        if self.waiting:
            return False
        turn = self.loop.iteration
        if turn != self.turn:
            self.turn, self.start = turn, now
            return True
        return now - self.start < END_BUDGET

    def defer(self, call) -> None:
        """Run ``call()`` in a later turn, after the calls deferred before it."""
        self.waiting.append(call)
        if self.timer is None:
            self._arm()

    def _arm(self) -> None:
        timer = self.timer = self.loop.timer(0.0)
        timer.priority = DEADLINE_PRIORITY
        timer.start(self._run)

    def _run(self) -> None:
        timer, self.timer = self.timer, None
        timer.close()
        waiting = self.waiting
        now = monotonic()
        turn = self.loop.iteration
        if turn != self.turn:
            self.turn, self.start = turn, now
        start = self.start
        while waiting and now - start < END_BUDGET:
            waiting.popleft()()
            now = monotonic()
        if waiting:
            self._arm()
