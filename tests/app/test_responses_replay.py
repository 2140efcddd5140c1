"""``GET /v1/responses/{id}?stream=true&starting_after=N``: vLLM 0.34's replay of a background
stream (``responses_background_stream_generator``), generation.adapters.response_store.EventLog."""
import json

import gevent

from support import named_events

STORE = {"VLLM_ENABLE_RESPONSES_API_STORE": "1"}
ASK = {"model": "test-model", "input": "Hi", "max_output_tokens": 6, "ignore_eos": True}


def _sequence_numbers(text: str) -> list:
    return [e[1]["sequence_number"] for e in named_events(text)]


def test_a_finished_background_stream_is_replayed_from_any_event(app_client):
    api = app_client(env=STORE)
    live = api.post("/v1/responses", json={**ASK, "background": True, "stream": True}).text
    events = named_events(live)
    rid = events[-1][1]["response"]["id"]
    assert events[-1][0] == "response.incomplete"
    whole = api.get(f"/v1/responses/{rid}", params={"stream": "true"})
    assert whole.status_code == 200 and whole.headers["Content-Type"].startswith("text/event-stream")
    assert whole.text == live                               # the same events, byte for byte
    tail = api.get(f"/v1/responses/{rid}", params={"stream": "true", "starting_after": "3"}).text
    assert _sequence_numbers(tail) == list(range(4, len(events))) and live.endswith(tail)
    assert api.get(f"/v1/responses/{rid}", params={"stream": "true", "starting_after": "999"}).text == ""
    assert api.get(f"/v1/responses/{rid}").json()["status"] == "incomplete"      # stream=false: the object


def test_a_replay_follows_a_running_stream_to_its_end(app_client):
    api = app_client("--inter-token-latency", "40ms", env=STORE)
    rid = None
    with api.stream("POST", "/v1/responses", json={**ASK, "background": True, "stream": True}) as r:
        for line in r.iter_lines():
            if line.startswith("data:") and '"response.created"' in line:
                rid = json.loads(line[5:])["response"]["id"]
                break
    replay = gevent.spawn(lambda: api.get(f"/v1/responses/{rid}", params={"stream": "true", "starting_after": "0"}))
    text = replay.get(timeout=10).text
    numbers = _sequence_numbers(text)
    assert numbers == list(range(1, numbers[-1] + 1)) and named_events(text)[-1][0] == "response.incomplete"


def test_only_background_streams_are_replayed(app_client):
    api = app_client(env=STORE)
    rid = api.post("/v1/responses", json=ASK).json()["id"]
    r = api.get(f"/v1/responses/{rid}", params={"stream": "true"})
    assert r.status_code == 400 and r.json()["error"]["message"] == f"Unknown response_id: {rid}"
    assert r.json()["error"]["param"] == "response_id"
    assert api.get("/v1/responses/resp_nope", params={"stream": "true"}).status_code == 404


def test_a_cancelled_stream_replays_what_it_sent_and_ends(app_client):
    api = app_client("--inter-token-latency", "50ms", env=STORE)
    with api.stream("POST", "/v1/responses", json={**ASK, "max_output_tokens": 40, "background": True,
                                                  "stream": True}) as r:
        for line in r.iter_lines():
            if line.startswith("data:") and '"response.created"' in line:
                rid = json.loads(line[5:])["response"]["id"]
                break
    gevent.sleep(0.2)
    assert api.post(f"/v1/responses/{rid}/cancel").json()["status"] == "cancelled"
    text = api.get(f"/v1/responses/{rid}", params={"stream": "true"}).text       # ends: vLLM's would wait on
    assert 0 < len(named_events(text)) and "response.completed" not in text
