"""Stored Responses-API answers (vLLM's ``VLLM_ENABLE_RESPONSES_API_STORE=1``), for
``GET /v1/responses/{id}`` and ``POST /v1/responses/{id}/cancel``, the conversations that
``previous_response_id`` continues, and the background responses
(``"background": true``) that run after their request has been answered.

vLLM keeps every ``store``d response in memory when that variable is set (and nothing
otherwise: the routes then answer 404).  Here the store is bounded: the oldest entries go first
beyond :data:`MAX_STORED` objects or :data:`MAX_STORED_BYTES` of their JSON, and the
conversations kept for ``previous_response_id`` likewise beyond :data:`MAX_HISTORY_TOKENS` prompt
tokens or :data:`MAX_STORED_BYTES` of their messages' JSON; a conversation longer than one
request body may be (``--max-request-body-size-mb``) is not kept, and continuing it is a 400
(vLLM keeps it: text the tokenizer drops costs no tokens, so a 3 MB input of spaces was kept
whole, a hundred of them 300 MB, and a chain of them made each small continuing request
tokenize all the earlier inputs).  A background response is stored ``queued`` when its request is
answered, and replaced by its final object (``completed``, ``incomplete``) when it ends, unless
it was cancelled meanwhile; if the server fails it, it reads ``failed`` (vLLM's
``OpenAIServingResponses._run_background_request`` and ``cancel_responses``).  One the server
aborts (abort_requests, checkpoint prepare mode=abort) is not failed: vLLM hands it a last
output with ``finish_reason`` ``abort`` and ``responses_full_generator`` stores it
``completed``, with what it made (a stream: what it streamed, then ``response.completed``).  Running ones are
bounded by admission (``--max-num-seqs`` plus the waiting queue), as any request is.
"""
from __future__ import annotations

import logging
from collections import OrderedDict

import gevent
import gevent.event

from generation.engine.request import ClientDisconnected
from generation.engine.token_schedule import waited
from generation.errors import APIError
from .json_dumps import dumps_any
from .token_stream import answer_aborted

# vLLM's answer to "background": true when responses are not stored (its _validate_create_responses_input)
NO_STORE_FOR_BACKGROUND = ("This vLLM engine does not support `store=True` and therefore does not support the "
                           "background mode. To enable these features, set the environment variable "
                           "`VLLM_ENABLE_RESPONSES_API_STORE=1` when launching the vLLM server.")

MAX_STORED = 10_000
MAX_STORED_BYTES = 256 << 20        # the stored objects' JSON in all (an echoed instructions text can be MBs)
MAX_HISTORY_TOKENS = 16_000_000     # prompt tokens of the conversations kept for previous_response_id
RUNNING = ("queued", "in_progress")      # the statuses a cancel applies to (vLLM's)

log = logging.getLogger("vllm_sim")


class ResponseStore:
    """``response id -> response object`` (the JSON dict as returned), oldest dropped first;
    ``tasks``: ``response id -> (greenlet, sequences)`` of the background responses running."""

    def __init__(self, limit: int = MAX_STORED, history_tokens: int = MAX_HISTORY_TOKENS,
                 limit_bytes: int = MAX_STORED_BYTES, conversation_bytes: int = 4 << 20):
        self.limit = limit
        self.limit_bytes = limit_bytes
        self.conversation_bytes = conversation_bytes      # the request body limit
        self.items: OrderedDict[str, dict] = OrderedDict()
        self.sizes: dict[str, int] = {}                 # response id -> its JSON's bytes
        self.total_bytes = 0
        self.tasks: dict[str, tuple] = {}
        # response id -> EventLog of a background stream, for GET ?stream=true (vLLM's event_store),
        # oldest finished ones dropped first past ``limit_bytes`` of their events in all
        self.streams: OrderedDict[str, EventLog] = OrderedDict()
        self.stream_bytes = 0
        # response id -> (the chat messages its prompt was made of or None when too long, their
        # prompt tokens, their JSON's bytes): vLLM's msg_store, oldest dropped first past ``limit``
        # entries, ``history_tokens`` or ``limit_bytes`` in all
        self.history: OrderedDict[str, tuple] = OrderedDict()
        self.history_limit = history_tokens
        self.history_total = 0
        self.history_bytes = 0

    def remember(self, response_id: str, messages: list, tokens: int) -> None:
        """Keep ``messages`` (``tokens`` prompt tokens) as ``response_id``'s conversation; past
        :attr:`conversation_bytes` of JSON only its size, which :meth:`messages_of` refuses."""
        size = _json_size(messages)
        kept = messages if size <= self.conversation_bytes else None
        old = self.history.pop(response_id, None)
        if old is not None:
            self.history_total -= old[1]
            self.history_bytes -= old[2] if old[0] is not None else 0
        self.history[response_id] = (kept, tokens, size)
        self.history_total += tokens
        self.history_bytes += size if kept is not None else 0
        while self.history and (len(self.history) > self.limit or self.history_total > self.history_limit
                                or self.history_bytes > self.limit_bytes):
            gone = self.history.popitem(last=False)[1]
            self.history_total -= gone[1]
            self.history_bytes -= gone[2] if gone[0] is not None else 0

    def messages_of(self, response_id: str) -> list:
        """The conversation kept for ``response_id`` (empty when it was dropped).  Raises
        APIError (400, ``previous_response_id``) for one too long to be kept."""
        kept = self.history.get(response_id)
        if kept is None:
            return []
        if kept[0] is None:
            raise APIError(f"The conversation of previous_response_id '{response_id}' holds {kept[2]} bytes, more "
                           f"than the {self.conversation_bytes} one request may send (--max-request-body-size-mb): "
                           "the simulator does not keep it to continue.", 400, "previous_response_id",
                           "invalid_request_error")
        return kept[0]

    def put(self, response: dict) -> None:
        """Keep ``response`` (replacing an object of its id), the oldest dropped beyond
        :attr:`limit` objects or :attr:`limit_bytes` of their JSON in all."""
        rid = response["id"]
        size = _json_size(response)
        self.total_bytes += size - self.sizes.get(rid, 0)
        self.sizes[rid] = size
        self.items[rid] = response
        self.items.move_to_end(rid)
        while len(self.items) > 1 and (len(self.items) > self.limit or self.total_bytes > self.limit_bytes):
            old, _ = self.items.popitem(last=False)
            self.total_bytes -= self.sizes.pop(old)
            self._drop_stream(old)

    def put_final(self, response: dict) -> None:
        """Store a finished response, unless its background run was cancelled meanwhile (vLLM
        keeps the cancelled object)."""
        old = self.items.get(response["id"])
        if old is None or old.get("status") != "cancelled":
            self.put(response)

    def get(self, response_id: str) -> dict | None:
        return self.items.get(response_id)

    def run_in_background(self, sim, seqs, queued: dict, finish) -> None:
        """Store ``queued`` and run ``seqs`` (admitted) to their end in a greenlet of their own,
        then ``finish(seqs)``, which stores the final object (:meth:`put_final`).  A cancel
        (:meth:`cancel`) aborts them; a failure marks the stored object ``failed``."""
        rid = queued["id"]
        self.put(queued)

        def run():
            try:
                try:
                    sim.complete(seqs)
                except ClientDisconnected:
                    if not seqs[0].request.aborted_by_server:
                        raise
                    answer_aborted(seqs)    # vLLM's abort output: what it made, finish_reason "abort"
                finish(seqs)
            except Exception as e:          # noqa: BLE001 - a cancel ends here too (ClientDisconnected)
                self._failed(rid, e)
                sim.cancel(seqs, "error")
            finally:
                self.tasks.pop(rid, None)

        self.tasks[rid] = (gevent.spawn(run), seqs, sim)

    def _failed(self, rid: str, exc: BaseException) -> bool:
        """A background run of ``rid`` ended with ``exc``: a cancel (its object already reads
        ``cancelled``: False), else a failure, which its stored object now reads (True)."""
        found = self.items.get(rid)
        if found is None or found.get("status") not in RUNNING:
            return False
        log.warning("background response %s failed: %r", rid, exc)
        self.put({**found, "status": "failed"})
        return True

    def stream_in_background(self, sim, seqs, queued: dict, body_iter, error_frame):
        """A streaming background request: store ``queued``, let a greenlet of its own drain
        ``body_iter`` (the SSE body, which stores the final object at its end) into an
        :class:`EventLog`, and return the client's body, which follows it (:meth:`replay`).  The
        client leaving does not stop the response (vLLM runs it as a task apart from the
        connection); a cancel (:meth:`cancel`) does, and ends the client's stream.  The log is
        kept for ``GET /v1/responses/{id}?stream=true`` (vLLM's ``event_store``).
        ``error_frame(exc) -> bytes`` renders a failure in-band."""
        rid = queued["id"]
        self.put(queued)
        log_ = EventLog()
        self._drop_stream(rid)
        self.streams[rid] = log_

        def add(data: bytes) -> None:
            added = log_.add(data)
            if self.streams.get(rid) is log_:     # not once dropped (its object evicted): no more counted
                self.stream_bytes += added
                self._bound_streams()

        def produce():
            # no hub drives this body: its deadlines and token schedules are waited for here
            try:
                for item in body_iter:
                    if item.__class__ is bytes:
                        if item:
                            add(item)
                        continue
                    try:
                        for data in waited(sim, seqs[0], item):
                            if data:
                                add(data)
                    except ClientDisconnected:  # the server aborted it: the body writes its end
                        if not seqs[0].request.aborted_by_server:
                            raise
            except Exception as e:          # noqa: BLE001 - a cancel ends here too (ClientDisconnected)
                if self._failed(rid, e):
                    add(error_frame(e))
                sim.cancel(seqs, "error")
            finally:
                body_iter.close()       # (a wait here that raised left it suspended)
                log_.finish()
                self.tasks.pop(rid, None)

        self.tasks[rid] = (gevent.spawn(produce), seqs, sim)
        return log_.follow(0, error_frame)

    def replay(self, response_id: str, starting_after: int | None):
        """``GET /v1/responses/{id}?stream=true`` (vLLM's ``responses_background_stream_generator``):
        the background stream's events after the ``starting_after``-th (its ``sequence_number``;
        None: from the first), then the new ones as they come, until it ends.  vLLM waits on
        after a stream that ended without ``response.completed`` / ``response.incomplete`` (a
        cancel, a failure): here it ends.  Raises APIError (400, ``response_id``) for a response
        that was not a background stream, as vLLM's generator raises ``Unknown response_id``
        (there once its 200 has gone out)."""
        log_ = self.streams.get(response_id)
        if log_ is None:
            raise APIError(f"Unknown response_id: {response_id}", 400, "response_id", "BadRequestError")
        return log_.follow(0 if starting_after is None else max(starting_after + 1, 0))

    def _drop_stream(self, response_id: str) -> None:
        gone = self.streams.pop(response_id, None)
        if gone is not None:
            self.stream_bytes -= gone.size

    def _bound_streams(self) -> None:
        """The oldest finished logs go first past :attr:`limit_bytes` in all (a running one stays:
        its client reads it, and admission bounds the running ones)."""
        if self.stream_bytes <= self.limit_bytes:
            return
        for rid in [r for r, lg in self.streams.items() if lg.done]:
            self._drop_stream(rid)
            if self.stream_bytes <= self.limit_bytes:
                return

    def cancel(self, sim, response_id: str) -> dict | None:
        """Cancel a running background response: its stored object reads ``cancelled`` (the
        rest as it was), its sequences are aborted.  None when it is not running (vLLM's
        ``Cannot cancel a synchronous response.``)."""
        found = self.items.get(response_id)
        if found is None or found.get("status") not in RUNNING:
            return None
        cancelled = {**found, "status": "cancelled"}
        self.put(cancelled)
        task = self.tasks.pop(response_id, None)
        if task is not None:
            task[2].cancel(task[1], "abort")    # on the engine that runs it (one store over DP engines)
        return cancelled


def _json_size(value) -> int:
    """Bytes of ``value``'s JSON as the answer writes it (:func:`dumps_any`: an integer past 64
    bits or a client's value nested past 255 levels, which orjson refuses, included; its
    ``repr`` here raised RecursionError on a value some 990 levels deep, a 500)."""
    return len(dumps_any(value))


def previous_messages(store, response_id: str) -> list:
    """``previous_response_id``'s conversation as chat messages, put before the new input (vLLM's
    ``construct_input_messages``): the stored response's messages but system ones (instructions
    do not carry over), then each of its output messages' texts as an assistant message (its
    reasoning and tool calls are not carried, as vLLM's are not).  Raises vLLM's 404 when it is
    not stored (always, without ``VLLM_ENABLE_RESPONSES_API_STORE=1``), a 400 when its
    conversation was too long to keep (:meth:`ResponseStore.messages_of`)."""
    prev = store.get(response_id) if store is not None else None
    if prev is None:
        raise not_found(response_id)
    out = [m for m in store.messages_of(response_id) if m.get("role") != "system"]
    for item in prev.get("output") or ():
        if item.get("type") == "message":
            out.extend({"role": "assistant", "content": part.get("text", "")} for part in item.get("content") or ())
    return out


def not_found(response_id: str) -> APIError:
    """vLLM's ``_make_not_found_error``."""
    return APIError(f"Response with id '{response_id}' not found.", 404, "response_id", "invalid_request_error")


FOLLOW_BYTES = 1 << 16        # a follower's piece: the events joined at most this much past one


class EventLog:
    """A background stream's SSE events in order (``events[k]``: the one with ``sequence_number``
    k), for its client and its replays: :meth:`add` splits the body's bytes into whole events,
    :meth:`follow` yields from an index on, waiting for more until :meth:`finish`.  Each change
    sets the current ``changed`` event and replaces it, so that no follower misses one."""

    __slots__ = ("events", "partial", "size", "done", "changed")

    def __init__(self):
        self.events: list = []
        self.partial = b""          # an event's start whose end has not come yet
        self.size = 0
        self.done = False
        self.changed = gevent.event.Event()

    def add(self, data: bytes) -> int:
        """Append ``data``'s whole events; returns the bytes added."""
        parts = (self.partial + data).split(b"\n\n")
        self.partial = parts.pop()
        self.events.extend(p + b"\n\n" for p in parts)
        self.size += len(data)
        self._changed()
        return len(data)

    def finish(self) -> None:
        if self.partial:
            self.events.append(self.partial)
            self.partial = b""
        self.done = True
        self._changed()

    def _changed(self) -> None:
        old, self.changed = self.changed, gevent.event.Event()
        old.set()

    def follow(self, start: int, error_frame=None):
        """The events from ``start`` on, as they come, joined up to :data:`FOLLOW_BYTES` a piece:
        a follower holds no copy of the whole log (a replay of a long stream that its client does
        not read held one, a few MB per connection, and a hundred of them took the hub seconds).
        An APIError thrown into its wait (the shutdown grace over: server.lifecycle's
        ServerShuttingDown) ends it, with ``error_frame(err)`` when given, as other streams end
        then (it escaped to gunicorn: a traceback, and a body cut mid-chunk)."""
        i = start
        events = self.events
        while True:
            changed = self.changed
            n = len(events)
            if i < n:
                j, size = i, 0
                while j < n and size < FOLLOW_BYTES:
                    size += len(events[j])
                    j += 1
                out = events[i] if j == i + 1 else b"".join(events[i:j])
                i = j
                yield out
                continue
            if self.done:
                return
            try:
                changed.wait()
            except APIError as e:
                if error_frame is not None:
                    yield error_frame(e)
                return
