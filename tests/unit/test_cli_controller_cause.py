"""The command line explains a timed-out command that needs the controller (client/cli `_within_timeout`):
when a broker says the controller quorum has no leader, the error says so in its words and names `odradek
cluster quorum`; otherwise, and for commands that do not need the controller, the timeout reads as before.
The broker is a stand-in (`quorum_without_leader`); test_quorum_loss.py runs the real thing."""

from __future__ import annotations

import argparse
import asyncio

import pytest

from odradek.client import cli
from odradek.client.cli import topics
from odradek.client.errors import KafkaError, KafkaTimeoutError
from odradek.protocol.errors import ErrorCode

SAID = "no controller quorum leader: node 1 (epoch 3) last knew node 2, 12 s ago"


class StandIn:
    def __init__(self, says: str | None) -> None:
        self.says, self.asked, self.closed = says, [], False

    async def quorum_without_leader(self, *, timeout_s: float) -> str | None:
        self.asked.append(timeout_s)
        return self.says

    async def close(self) -> None:
        self.closed = True


def run(monkeypatch, handler, command, says: str | None, timeout: float = 0.2) -> StandIn:
    admin = StandIn(says)
    monkeypatch.setattr(cli, "admin_for", lambda args: admin)
    args = argparse.Namespace(handler=handler, timeout=timeout, command="topic", action="create",
                              bootstrap_server="localhost:9")
    asyncio.run(cli._within_timeout(args, command()))
    return admin


async def forever() -> int:
    await asyncio.sleep(3600)
    return 0


def test_a_controller_command_past_its_timeout_names_the_leaderless_quorum(monkeypatch):
    with pytest.raises(KafkaTimeoutError) as e:
        run(monkeypatch, topics.topic_create, forever, SAID)
    text = str(e.value)
    assert text.startswith("--timeout 0.2 s passed before `topic create` was done (the controller quorum has no leader")
    assert SAID in text and "`odradek cluster quorum`" in text


def test_the_question_is_asked_within_the_last_half_of_the_timeout_and_closes_its_client(monkeypatch):
    with pytest.raises(KafkaTimeoutError):
        run(monkeypatch, topics.topic_create, forever, SAID, timeout=1.0)
    admin = cli.admin_for(None)  # the stand-in run() installed
    # Asked while the command still ran, with what was left of the --timeout: at most half of it.
    assert len(admin.asked) == 1 and 0 < admin.asked[0] <= 0.5 and admin.closed


def test_a_command_that_finishes_meanwhile_drops_the_question(monkeypatch):
    async def quick() -> int:
        return 0

    admin = run(monkeypatch, topics.topic_create, quick, SAID, timeout=1.0)
    assert admin.asked == []


def test_a_quorum_with_a_leader_or_no_answer_leaves_the_timeout_as_it_was(monkeypatch):
    with pytest.raises(KafkaTimeoutError) as e:
        run(monkeypatch, topics.topic_create, forever, None)
    assert str(e.value) == ("--timeout 0.2 s passed before `topic create` was done (no answer from the cluster at "
                            "localhost:9 in time)")


def test_a_command_that_needs_no_controller_is_not_explained_by_the_quorum(monkeypatch):
    with pytest.raises(KafkaTimeoutError) as e:
        run(monkeypatch, topics.topic_list, forever, SAID)
    assert "no answer from the cluster" in str(e.value)
    assert cli.admin_for(None).asked == []


def test_the_brokers_request_timed_out_keeps_its_code_and_gains_the_cause(monkeypatch):
    async def timed_out() -> int:
        raise KafkaError(ErrorCode.REQUEST_TIMED_OUT, "no active controller: the controller quorum has no leader",
                         context="t1")

    with pytest.raises(KafkaError) as e:
        run(monkeypatch, topics.topic_create, timed_out, SAID)
    assert e.value.code is ErrorCode.REQUEST_TIMED_OUT and e.value.context == "t1"
    assert "the controller quorum has no leader" in str(e.value) and SAID in str(e.value)

    async def exists() -> int:
        raise KafkaError(ErrorCode.TOPIC_ALREADY_EXISTS, "Topic 't1' already exists.", context="t1")

    with pytest.raises(KafkaError) as e:
        run(monkeypatch, topics.topic_create, exists, SAID)
    assert str(e.value) == "t1: TOPIC_ALREADY_EXISTS (Topic 't1' already exists.)"
