"""A peer whose host name does not resolve (a Docker peer whose container went away): the connect attempts
fail with NodeUnavailable, one WARN names the host and the cause, and nothing is left for the event loop
to report as "Future exception was never retrieved ... gaierror" (uvloop's create_connection, cancelled
while it resolves a name, left one: MagicStack/uvloop#437)."""

from __future__ import annotations

import asyncio
import gc

import pytest
import structlog
import uvloop

from odradek.broker import node_client
from odradek.broker.node_client import NodeConnection, NodeUnavailable

HOST = "nosuchhost.invalid"  # RFC 2606: never resolves


def test_an_unresolvable_peer_is_one_warning_and_no_unretrieved_future(monkeypatch):
    monkeypatch.setattr(node_client, "_unresolved", {})
    loop_errors: list[str] = []

    async def main() -> None:
        loop = asyncio.get_running_loop()
        loop.set_exception_handler(lambda _loop, context: loop_errors.append(context.get("message", "")))
        for _ in range(3):  # attempts cancelled while the name is being resolved (a connect timeout, a stop)
            conn = NodeConnection(2, HOST, 9092, backoff_s=0.0)
            task = loop.create_task(conn.request(None, 0, timeout_s=1))
            await asyncio.sleep(0)
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        for _ in range(3):  # and attempts that run to the resolver's answer
            with pytest.raises(NodeUnavailable, match=HOST):
                await NodeConnection(2, HOST, 9092, backoff_s=0.0).request(None, 0, timeout_s=5)
        await asyncio.sleep(0.5)  # the cancelled resolutions finish in the resolver's threads
        gc.collect()
        await asyncio.sleep(0)

    with structlog.testing.capture_logs() as logs:
        uvloop.run(main())
    gc.collect()
    assert not [m for m in loop_errors if "never retrieved" in m]
    warnings = [e for e in logs if e["event"] == "peer host name does not resolve"]
    assert len(warnings) == 1
    assert warnings[0]["log_level"] == "warning" and warnings[0]["host"] == HOST and warnings[0]["node"] == 2
    assert warnings[0]["error"]
