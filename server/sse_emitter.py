"""Streams that wait between writes, driven from the event loop instead of their greenlet
(issue 13: accurate timing up to the stack's limit).

A real-time stream (TTFT, inter-token latency) used to cost, per token, a timer, a
:class:`gevent.hub.Waiter`, two greenlet switches and the walk through gunicorn's write layers:
about 15 us of Python next to the ~15 us ``send`` itself, so one core saturated near 24k
chunks/s.  A :class:`HubEmitter` takes over a stream at its first deadline: the request's
greenlet parks, and a libev timer callback in the hub resumes the stream's generator when each
deadline is reached (never earlier: the loop's cached clock is refreshed and the deadline
re-checked), frames the bytes as gunicorn would (``chunked``) and hands them to the kernel with
one non-blocking ``send``.

A :class:`~generation.engine.token_schedule.TokenSchedule` (a constant inter-token latency) is emitted from
one repeating libev timer: per token, one callback renders the chunk, records its latencies and
sends it, without resuming the engine's and the renderer's generators (about half the Python
of a token).  libev keeps the timer on the absolute schedule; a tick that finds nothing due
(the loop fell more than a whole inter-token latency behind, or float rounding) re-aligns it.

The greenlet takes the stream back whenever the hub cannot go on without blocking:

* the socket's buffer is full (a slow reader): the unsent bytes are returned, the greenlet
  sends them with a blocking ``sendall`` and drives the rest of the stream itself;
* the stream ends, fails, or its client goes (``Simulator.cancel`` wakes the emitter through
  ``seq.event``, the generator then raises ClientDisconnected): the outcome is returned.

Only a gunicorn response on a plain TCP socket whose headers are already out is taken over
(:func:`usable_response`); TLS sockets, other WSGI servers and the in-process test client keep
the greenlet-driven path (:meth:`generation.engine.simulator.Simulator.sleep_until`).
"""
from __future__ import annotations

from time import monotonic

from gevent.hub import Waiter, get_hub
from gevent.socket import socket as PlainSocket

from blueprints.streaming import WRITE_KEY
from generation.engine.request import ClientDisconnected
from generation.engine.token_schedule import TokenSchedule

from .arrivals import waiting_count
from .gunicorn_tuning import end_with_next_write
from .listening import BURST_WAITING
from .loop_turns import DEADLINE_PRIORITY, EndTurns, IdleWork

FINISH_WITHIN = 0.02              # s: a stream's end waits at most this (or one ITL) for an idle loop


def usable_response(environ: dict):
    """``(gunicorn Response, OS socket)`` when the stream can be emitted from the hub, else
    None: gunicorn's response (found through the ``write`` its ``start_response`` returned)
    on a plain (not TLS) socket, with its headers sent, or not yet sent at all (a stream set
    up in a burst: they leave with its first chunk, :meth:`HubEmitter._send`).  The socket
    decides, not ``wsgi.url_scheme``: behind a TLS-terminating proxy the scheme says https on
    plain TCP."""
    write = environ.get(WRITE_KEY)
    resp = getattr(write, "__self__", None)
    sock = environ.get("gunicorn.socket")
    if resp is None or sock is None or (sock.__class__ is not PlainSocket and hasattr(sock, "do_handshake")):
        return None                 # an SSL socket (asked only of others than gevent's plain one:
                                    # its __getattr__ raises inside the hasattr, ~1 us, issue 32)
    raw = getattr(sock, "_sock", None)          # gevent's socket wraps a non-blocking OS socket
    if raw is None or getattr(resp, "sock", None) is not sock:
        return None
    if getattr(resp, "headers_sent", False) and "_held_headers" in vars(resp):
        return None                 # held by a flush that did not send them: not ours to send
    if not getattr(resp, "headers_sent", True) and not getattr(type(resp), "_headers_with_body", False):
        return None                 # gunicorn's own send_headers would write from the hub
    return resp, raw


def in_burst() -> bool:
    """Whether a burst of arrivals waits its turn (:mod:`server.arrivals`): a stream set up now
    sends its headers with its first chunk (:data:`blueprints.streaming.HEADERS_LATER_KEY`)."""
    return waiting_count() >= BURST_WAITING


def end_with_last_bytes(environ: dict) -> bool:
    """:data:`blueprints.streaming.END_WITH_KEY`: the response's next non-empty write carries the
    chunked body's end (:func:`server.gunicorn_tuning.end_with_next_write`)."""
    resp = getattr(environ.get(WRITE_KEY), "__self__", None)
    return resp is not None and end_with_next_write(resp)


_ERROR = object()
DONE = "done"                     # EngineRequest.DONE


class StepSends:
    """Step mode: each running stream's next chunk, rendered and framed while the engine steps,
    sent in one pass when the step ends (:meth:`presend`, the engine's ``presend`` hook, called
    before the next step is planned).  Per stream that pass is a dict lookup, a check that the
    step emitted exactly the expected token and the non-blocking ``send``; the rest (the lag
    and byte counts, a slow reader, rendering the next chunk) is the stream's own
    :meth:`HubEmitter._step_tick` afterwards.  One per engine."""

    def __init__(self, engine):
        # EngineRequest -> (socket send, framed chunk, HubEmitter, num_output after it, the schedule's last token?)
        self.ready: dict = {}
        engine.presend = self.presend
        due = getattr(engine, "end_timer_due", None)
        if due is not None:           # stream ends and other idle work keep clear of the step's end
            IdleWork.of(get_hub().loop).guard_with(due)

    @classmethod
    def of(cls, engine) -> "StepSends":
        hook = engine.presend
        sends = getattr(hook, "__self__", None)
        return sends if isinstance(sends, cls) else cls(engine)

    def presend(self, emitted) -> list:
        """Send the chunks rendered ahead for ``emitted`` (a step's requests, in order); returns
        them in the order their streams' ticks should run: first those that had nothing sent
        here (a first token, several tokens, a chunk not foreseen), whose bytes wait for their
        tick, then those sent, whose ticks only count and render ahead (issue 32: a first
        token's lag was the whole step's bookkeeping after every other stream's tick)."""
        ready = self.ready
        if not ready:
            return emitted
        pop = ready.pop
        order: list = []
        sent: list = []
        for req in emitted:
            pre = pop(req, None)
            if pre is None:
                order.append(req)
                continue
            send, data, emitter, expect, last = pre
            if req.num_output != expect or (req.state == DONE and not last):
                order.append(req)       # not the one token foreseen: the stream's tick renders what came
                continue
            try:
                n = send(data)
            except BlockingIOError:
                n = 0
            except OSError:
                n = -1
            emitter.presented = (n, monotonic(), data)
            sent.append(req)
        order += sent
        return order


class HubEmitter:
    """Emits one sequence's stream from timer callbacks in the hub until it ends or needs its
    greenlet back.  ``body_iter`` yields ``bytes`` (one write each), ``float`` deadlines
    (``time.monotonic`` seconds) and :class:`~generation.engine.token_schedule.TokenSchedule` s, as
    :meth:`generation.engine.simulator.Simulator.run` with ``deadlines``.
    """

    def __init__(self, seq, body_iter, resp, raw):
        self.seq = seq
        self.body_iter = body_iter
        self.resp = resp
        self.raw = raw
        self.chunked = bool(resp.chunked)
        self.head = not resp.headers_sent      # the headers leave with the first chunk
        self.loop = get_hub().loop
        self.waiter = Waiter()
        self.timer = None
        self.finishing = False        # its end waits in the IdleWork (see _finish_later)
        self.last = None              # (k, chunk): the schedule's last token, rendered in an idle turn
        self.deadline = 0.0
        self.schedule = None          # the TokenSchedule being emitted, if any
        self.active = False           # False once the greenlet has the stream back: late wake-ups are ignored
        self.sends = None             # step mode: the engine's StepSends
        self.pre = None               # step mode: (token index, its chunk) rendered ahead
        self.presented = None         # step mode: (bytes sent or -1, when, framed chunk) by StepSends

    def run(self, item) -> tuple:
        """Called by the request's greenlet with the ``float`` deadline or the TokenSchedule it
        met first; returns when the greenlet must go on: ``("done", None)``,
        ``("pending", (unsent bytes, what comes next: the TokenSchedule to finish, a deadline, an
        exception to raise, or None))`` or
        ``("error", exception)``."""
        self.seq.event = self              # Simulator.cancel wakes us through .switch
        self.active = True
        if item.__class__ is float:
            self._arm(item)
        else:
            self._start_schedule(item)
        if self.head and self.active:      # held in a burst: out once the loop is idle
            IdleWork.of(self.loop).add(self._send_head)
        try:
            return self.waiter.get()
        finally:
            self.active = False
            self._stop_timer()
            self._unhook()
            idle = IdleWork.of(self.loop)
            idle.discard(self._send_head)
            idle.discard(self._finish)
            idle.discard(self._render_last)
            if self.seq.event is self:
                self.seq.event = None

    def switch(self, _=None) -> None:
        """Simulator.cancel: resume the stream now (it raises ClientDisconnected)."""
        if not self.active:
            return
        self._stop_timer()
        self._unhook()
        self._emit()

    def retime(self, delta) -> None:
        """A keep pause of the default model (generation.engine.freeze): stop (``delta`` None), or
        go on ``delta`` seconds later than planned (a schedule's ``first`` has already moved)."""
        if not self.active or self.finishing:
            return
        self._stop_timer()
        if delta is not None:
            if self.schedule is not None:
                self._start_schedule(self.schedule)
            else:
                self._arm(self.deadline + delta)

    def _start_schedule(self, schedule: TokenSchedule) -> None:
        self.schedule = schedule
        if schedule.engine is not None:          # step mode: the engine's step end calls us
            if self.sends is None:
                self.sends = StepSends.of(schedule.engine)
            schedule.seq.engine_req.notify = self._step_tick
            self._step_tick()
            return
        loop = self.loop
        loop.update_now()           # libev counts ``after`` from its cached clock: refresh it
        # (+1 us: libev read its clock just before this monotonic(); a timer due a hair early
        # would find nothing due and be re-armed)
        after = schedule.deadline(schedule.next) - monotonic() + 1e-6
        timer = self.timer = loop.timer(after if after > 0.0 else 0.0, schedule.itl)
        timer.start(self._tick)
        if self.last is None and schedule.stop - schedule.next > 1 and getattr(schedule.render, "pure", False):
            IdleWork.of(loop).add(self._render_last)

    def _render_last(self) -> None:
        """Render the schedule's last token ahead (an :class:`IdleWork` call), for its tick to
        send as it sends any other token.  That chunk carries the finish reason and renders on
        the slow path (~7 us more than a plain token's): the streams of a burst have their last
        tokens due in the same ~20 ms and had the loop ~35% busier there than in any other
        tick, enough to hold their last tokens 5-10 ms (their last gap over 25 ms in up to half
        of the 1,000 streams, issue 32).  Only a renderer that says ``pure`` (its chunk depends
        on the token alone, :meth:`generation.adapters.base.PieceChunks.renderer`) is asked
        ahead of time."""
        schedule = self.schedule
        if schedule is None or not self.active or self.last is not None:
            return
        k = schedule.stop - 1
        if schedule.next >= k:                  # due next: its tick renders it
            return
        try:
            self.last = (k, schedule.render(k))
        except BaseException:       # noqa: BLE001 - its tick renders it again and hands the error back
            pass

    def _render_due(self):
        """The schedule's due bytes, or the ``_ERROR`` marker once a renderer bug is handed back."""
        try:
            schedule, ahead = self.schedule, self.last
            data = schedule.due(monotonic(), ahead)
            if ahead is not None and schedule.next > ahead[0]:     # (a late tick caught up to the last token)
                self.last = None
            return data
        except BaseException as e:     # noqa: BLE001 - a renderer bug: handed to the greenlet
            self._hand_back(("error", e))
            return _ERROR

    def _tick(self) -> None:
        if not self.active:
            return
        schedule = self.schedule
        # The usual tick, inline: exactly one token due, not the schedule's last, latencies not
        # swapped.  What TokenSchedule.due does for it (the same times, the same observations
        # after the render), without its calls and loops: ~1 us of a token's ~15 (issue 32).
        k = schedule.next
        first, start, itl = schedule.first, schedule.start, schedule.itl
        at = first + (k - start) * itl
        now = monotonic()
        if (at <= now < first + (k + 1 - start) * itl
                and schedule.latency.config.__dict__ is schedule.config_values):
            final = k + 1 >= schedule.stop
            ahead = self.last
            if not final or (ahead is not None and ahead[0] == k):    # the last: rendered in an idle turn
                if final:
                    data, self.last = ahead[1], None
                else:
                    try:
                        data = schedule.render(k)
                    except BaseException as e:     # noqa: BLE001 - a renderer bug: handed to the greenlet
                        self._hand_back(("error", e))
                        return
                schedule.next = k + 1
                schedule.lag(now - at)
                if k:
                    schedule.itl_obs(now - schedule.prev)
                else:                   # a schedule from token 0: the first token
                    schedule.first_token(now)
                schedule.prev = now
                if data and not self._send(data):
                    return
                if final:
                    self._schedule_done(schedule)
                return
        data = self._render_due()
        if data is _ERROR:
            return
        if data is None:
            self._stop_timer()
            if schedule.next >= schedule.stop:     # cut short (a latency change): the generator goes on
                self.schedule = None
                self._emit()
            else:                                  # nothing due yet: back on the schedule
                self._start_schedule(schedule)
            return
        if data and not self._send(data):       # b"": tokens that send nothing (reasoning markers)
            return
        if schedule.next >= schedule.stop:
            self._schedule_done(schedule)

    def _schedule_done(self, schedule: TokenSchedule) -> None:
        """Its last token went out: the stream's end follows (:meth:`_finish_later`)."""
        self.schedule = None
        if 0.0 < schedule.itl <= FINISH_WITHIN and self.timer is not None:
            self._finish_later(schedule.itl, repeating=True)
        else:
            self._stop_timer()
            self._finish_later(min(schedule.itl, FINISH_WITHIN))

    def _step_tick(self, req=None) -> None:
        """Step mode: the engine emitted tokens of this sequence (or the schedule just began).
        Called for every stream of a step from the step's timer callback
        (:meth:`~generation.engine.step_engine.StepEngine._end_step`): the chunks of the
        sequence's new tokens are rendered in one pass and written with one non-blocking
        ``send``; their emission lag is observed once the kernel has them (the tokens of one
        write share one lag: when the send returned, minus their step's end)."""
        if not self.active:
            return
        schedule = self.schedule
        if req is None:                   # the schedule's start, not a step
            req = schedule.seq.engine_req
        presented = self.presented
        if presented is not None:         # StepSends sent the chunk rendered ahead (one token)
            self.presented = None
            sent, at, data = presented
            k, chunk = self.pre
            self.pre = None
            schedule.next = k + 1
            self.resp.sent += len(chunk)
            schedule.lag_n(at - req.last_token, 1)
            if sent != len(data):
                if sent < 0:
                    self._hand_back(("error", ClientDisconnected()))
                else:
                    self._hand_back(("pending", (memoryview(data)[sent:], schedule)))
                return
        else:
            k0 = schedule.next
            try:
                data = self._emitted(schedule, req)
            except BaseException as e:     # noqa: BLE001 - a renderer bug: handed to the greenlet
                self._hand_back(("error", e))
                return
            if data is not None:
                # b"": tokens that send nothing (hidden reasoning): an empty write would end the chunking
                sent = self._send(data) if data else True
                # once the kernel took what it could (after a hand-back: once the greenlet waits)
                schedule.lag_n(monotonic() - req.last_token, schedule.next - k0)
                if not sent:
                    return
        if schedule.start == schedule.stop:       # the wait for the first token
            if req.num_output or req.state == req.DONE:
                self._unhook()
                self._emit()
        elif schedule.next >= schedule.stop:
            self._unhook()
            self._finish_later(FINISH_WITHIN)
        elif self.chunked and schedule.interval == 1 and not schedule.group:   # (groups are not foreseen:
            # a stream interval's, a step's accepted drafts)
            self._render_ahead(schedule, req)

    def _emitted(self, schedule: TokenSchedule, req):
        """:meth:`TokenSchedule.emitted`, with the chunk rendered ahead used for its token (a
        renderer is called once per token)."""
        pre = self.pre
        if pre is None:
            return schedule.emitted()
        k0 = schedule.next
        seq = schedule.seq
        avail = len(seq.pieces) if req.state == DONE else req.num_output
        if avail > schedule.stop:
            avail = schedule.stop
        if avail <= k0:
            return None
        self.pre = None
        render = schedule.render
        data = pre[1] if pre[0] == k0 else render(k0)
        if avail > k0 + 1:
            data = b"".join([data, *[render(k) for k in range(k0 + 1, avail)]])
        schedule.next = avail
        return data

    def _render_ahead(self, schedule: TokenSchedule, req) -> None:
        """Render and frame the chunk of the stream's next token while the engine steps, for
        :class:`StepSends` to send when the step that emits it ends.  The last token's chunk
        carries the finish; it is rendered ahead only from a renderer that says ``pure`` (its
        bytes depend on the token alone, :meth:`generation.adapters.base.PieceChunks.renderer`)
        and when it is the sequence's last piece."""
        k = schedule.next
        if self.pre is not None or self.head:
            return
        last = k + 1 >= schedule.stop or k + 1 >= len(schedule.seq.pieces)
        if last and not (k + 1 == schedule.stop == len(schedule.seq.pieces) and getattr(schedule.render, "pure", False)):
            return
        try:
            chunk = schedule.render(k)
        except BaseException as e:     # noqa: BLE001 - a renderer bug: handed to the greenlet
            self._hand_back(("error", e))
            return
        self.pre = (k, chunk)
        if chunk:                      # b"" (hidden reasoning) goes the usual way: nothing to write
            self.sends.ready[req] = (self.raw.send, b"%X\r\n%s\r\n" % (len(chunk), chunk), self, k + 1, last)

    def _unhook(self) -> None:
        schedule = self.schedule
        if schedule is not None and schedule.engine is not None:
            req = schedule.seq.engine_req
            if req.notify == self._step_tick:
                req.notify = None
            if self.sends is not None:
                self.sends.ready.pop(req, None)
        self.schedule = None
        self.presented = None

    def _finish_later(self, within: float, repeating: bool = False) -> None:
        """The schedule is done.  The rest of the stream (the engine's bookkeeping, the final
        chunks, the greenlet's teardown: about 0.1 ms) runs once the loop has nothing due, at
        most ``within`` seconds later: streams opened together end in the same tick, and each
        end would otherwise delay the last token of every stream after it.  ``repeating``: the
        schedule's repeating timer (its interval ``within``) is still running, and its next
        tick is the end's (no timer made and started per stream in the last-token wave)."""
        self.finishing = True
        IdleWork.of(self.loop).add(self._finish)
        if repeating:
            self.timer.callback = self._finish_due
            return
        timer = self.timer = self.loop.timer(within)
        timer.start(self._finish_due)

    def _finish_due(self) -> None:
        """The end's timer: the end now, or in a later loop turn when this one's forced ends
        took their budget (:class:`EndTurns`); an idle turn may still come first."""
        if not self.finishing:
            return
        turns = EndTurns.of(self.loop)
        if turns.admit(monotonic()):
            self._finish()
            return
        timer, self.timer = self.timer, None        # (a repeating one would tick again)
        if timer is not None:
            timer.close()
        turns.defer(self._finish)

    def _finish(self) -> None:
        if not self.finishing:         # already ended (the idle turn or the timer came first)
            return
        self._stop_timer()
        if self.active:
            self._emit()

    def _arm(self, deadline: float) -> None:
        self.deadline = deadline
        self.loop.update_now()
        timer = self.timer = self.loop.timer(max(0.0, deadline - monotonic()))
        timer.priority = DEADLINE_PRIORITY
        timer.start(self._due)

    def _stop_timer(self) -> None:
        self.finishing = False
        timer, self.timer = self.timer, None
        if timer is not None:
            timer.close()

    def _due(self) -> None:
        if not self.active:
            return
        self._stop_timer()
        self.loop.update_now()
        if monotonic() < self.deadline:         # libev's clock lags the real one: never early
            self._arm(self.deadline)
            return
        self._emit()

    def _emit(self) -> None:
        held = None                    # bytes sent once the next item is known: the last carry the end
        try:
            for item in self.body_iter:
                if held is not None:
                    if not self._send(held, then=item):
                        return
                    held = None
                cls = item.__class__
                if cls is float:
                    self._arm(item)
                    return
                if cls is TokenSchedule:
                    self._start_schedule(item)
                    return
                if item:
                    held = item
        except BaseException as e:     # noqa: BLE001 - handed to the greenlet, which raises it
            if held is None or self._send(held, then=e):
                self._hand_back(("error", e))
            return
        if held is not None and not self._send(held, self.chunked and end_with_next_write(self.resp)):
            return
        self._hand_back(("done", None))

    def _send(self, item: bytes, last: bool = False, then=None) -> bool:
        """Frame and send ``item``; ``last``: with the chunked body's end (the response's
        ``close`` then sends nothing).  ``then``: what ``body_iter`` gave after ``item`` (bytes,
        a deadline, a TokenSchedule or an exception), handed back with the unsent bytes when
        the socket is full."""
        if last:
            self.resp.last_write, self.resp.ended = False, True
            data = b"%X\r\n%s\r\n0\r\n\r\n" % (len(item), item)
        else:
            data = b"%X\r\n%s\r\n" % (len(item), item) if self.chunked else item
        if self.head:
            data = self._take_head() + data
        try:
            sent = self.raw.send(data)
        except BlockingIOError:
            sent = 0
        except OSError:
            self._hand_back(("error", ClientDisconnected()))
            return False
        self.resp.sent += len(item)             # gunicorn's count (the access log's bytes)
        if sent < len(data):
            rest = memoryview(data)[sent:]
            if then is None:
                then = self.schedule
            elif then.__class__ is bytes:       # the greenlet writes it after the rest
                if then:                        # (an empty chunk would end the body)
                    self.resp.sent += len(then)
                    rest = bytes(rest) + (b"%X\r\n%s\r\n" % (len(then), then) if self.chunked else then)
                then = None
            self._hand_back(("pending", (rest, then)))
            return False
        return True

    def _take_head(self) -> bytes:
        """The held headers' bytes, for the next write (gunicorn_tuning's ``send_headers`` holds
        them in the response); the stream has no head left to send."""
        self.head = False
        resp = self.resp
        resp.send_headers()
        return resp.__dict__.pop("_held_headers", b"")

    def _send_head(self) -> None:
        """The held headers, sent while the stream waits for its first token (an :class:`IdleWork`
        call); a no-op once they went out with a chunk or the greenlet has the stream."""
        if not self.head or not self.active:
            return
        data = self._take_head()
        try:
            sent = self.raw.send(data)
        except OSError as e:              # BlockingIOError too: a full buffer, nothing sent
            if e.__class__ is not BlockingIOError:
                self._hand_back(("error", ClientDisconnected()))
                return
            sent = 0
        if sent < len(data):              # a full socket buffer before the body: the greenlet waits
            self._hand_back(("pending", (memoryview(data)[sent:],
                                         self.schedule if self.schedule is not None else self.deadline)))

    def _hand_back(self, outcome: tuple) -> None:
        self.active = False
        self._stop_timer()
        if self.pre is not None:
            self._keep_rendered()
        self.waiter.switch(outcome)

    def _keep_rendered(self) -> None:
        """The greenlet takes the stream back with a chunk rendered ahead and not sent: its
        schedule's renderer returns that chunk for its token instead of rendering it again."""
        (k, chunk), self.pre = self.pre, None
        schedule = self.schedule
        if schedule is None or schedule.render is None:
            return
        render = schedule.render

        def render_once(j: int) -> bytes:
            if j == k:
                schedule.render = render
                return chunk
            return render(j)
        schedule.render = render_once
