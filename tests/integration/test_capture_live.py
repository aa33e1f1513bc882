"""The capture harness against the installed clients, live: what they send now still round-trips, and
still matches the committed vectors (a client upgrade that changes versions shows up here first;
regenerate with `python -m tests.capture`).

Each client runs for a couple of seconds per phase against tests.capture's loopback server.
"""

from __future__ import annotations

import struct

import pytest

from odradek.protocol.connection import RequestReceived, ServerConnection
from tests import capture
from tests.harness.vectors import NAME, REQUIRED, TRAILING, VECTORS_DIR, reframe


@pytest.fixture(scope="module", params=capture.available_clients())
def captured(request):
    frames, problems = capture.capture(request.param, seconds=2.0)
    return request.param, frames, problems


def test_capture_runs_cleanly(captured):
    client, frames, problems = captured
    assert not problems, problems
    apis = {capture.vector_name(f, 0).split("_request_")[0] for f in frames}
    assert REQUIRED <= apis, f"{client} did not get through bootstrap, produce and fetch: {sorted(apis)}"


def test_every_live_frame_round_trips(captured):
    client, frames, _ = captured
    conn = ServerConnection(supported=capture.ACCEPTED)
    for frame in frames:
        (event,) = conn.receive_data(frame)
        assert isinstance(event, RequestReceived)
        trailing = capture.trailing_bytes(frame)
        if trailing:
            api = capture.vector_name(frame, 0).split("_request_")[0]
            assert TRAILING.get((client, api, event.header.api_version)) == trailing
            body = frame[4 : len(frame) - len(trailing)]
            frame = struct.pack(">i", len(body)) + body
        assert reframe(event.header, event.request) == frame


def test_live_versions_match_the_committed_vectors(captured):
    client, frames, _ = captured
    committed: dict[str, set[int]] = {}
    for path in (VECTORS_DIR / client).glob("*.bin"):
        m = NAME.fullmatch(path.name)
        committed.setdefault(m["api"], set()).add(int(m["version"]))
    if not committed:
        pytest.skip(f"no committed vectors for {client}")
    for name in capture.select(frames):
        api, version = NAME.fullmatch(name)["api"], int(NAME.fullmatch(name)["version"])
        # A phase cut short on a loaded machine may miss an API; one that was sent must not differ.
        assert version in committed.get(api, {version}), (
            f"{client} now sends {api} v{version}, vectors have {sorted(committed.get(api, ()))}: "
            "regenerate with `python -m tests.capture`"
        )
    first = struct.unpack_from(">h", frames[0], 4)[0]
    assert first == 18, "a client opens with ApiVersions"
