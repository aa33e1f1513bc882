"""group.share.max.share.sessions on an in-process broker with real sockets: a third session is refused
with SHARE_SESSION_LIMIT_REACHED, and one closes with its connection, which makes room (Kafka's
testShareSessionEvictedOnConnectionDrop); the evicted member's records go back at once."""

from __future__ import annotations

import asyncio
import time

from odradek.broker.testing import running_broker
from odradek.protocol.errors import ErrorCode
from odradek.protocol.messages import CreateTopicsRequest

from tests.harness.groups import produce
from tests.harness.share import ShareMember, acquired, connect, topic_id


async def test_session_limit_and_eviction_on_disconnect(tmp_path):
    async with running_broker(tmp_path, **{"odradek.share.enabled": "true",
                                           "group.share.max.share.sessions": "2",
                                           "group.share.max.size": "2"}) as kafka:
        admin = await connect(kafka.bootstrap)
        created = await admin.send(CreateTopicsRequest(timeout_ms=5000, validate_only=False, topics=[
            CreateTopicsRequest.CreatableTopic(name="limited", num_partitions=1, replication_factor=1,
                                               assignments=[], configs=[])]), version=7)
        assert created.topics[0].error_code == 0
        tid = await topic_id(admin, "limited")
        a, b, c = [ShareMember(await connect(kafka.bootstrap), "sg", tid) for _ in range(3)]
        assert (await a.fetch()).error_code == 0
        assert (await b.fetch()).error_code == 0
        refused = await c.fetch()
        assert refused.error_code == ErrorCode.SHARE_SESSION_LIMIT_REACHED, refused
        assert refused.acquisition_lock_timeout_ms == 0

        # a holds records when its connection closes: its session ends, its records go back.
        manager = kafka.broker.services.share
        await asyncio.to_thread(produce, kafka.bootstrap, "limited", {0: 3})
        got = await a.fetch(max_wait_ms=5000)
        assert [c_ for *_, c_ in acquired(got)] == [1] and sum(l_ - f + 1 for f, l_, _ in acquired(got)) == 3, got
        await a.conn.close()
        deadline = time.monotonic() + 30
        while len(manager.sessions) != 1:
            assert time.monotonic() < deadline, "a's session outlived its connection"
            await asyncio.sleep(0.02)
        again = await c.fetch()  # room again; a's records are there for c, delivered a second time
        assert again.error_code == 0 and acquired(again) == [(0, 2, 2)], again
        for conn in (admin, b.conn, c.conn):
            await conn.close()
