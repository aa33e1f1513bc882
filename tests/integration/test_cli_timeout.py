"""`--timeout` bounds every CLI command, on a real broker that stops answering (SIGSTOP: its socket still
accepts connections, nothing is answered).

Each command runs in this process (`odradek.cli.main`, no interpreter start-up to measure) with
`--timeout 1` and must end with exit code 3 well before the old floor: every request used to wait at least
5 s (`max(--timeout, 5 s)`), a command of several requests that much each. "Returns before X" bounds, with X
far above 1 s for a loaded machine, never an assertion on the broker's speed. Then, the broker resumed,
the same commands succeed. (produce giving up at its --timeout on NOT_ENOUGH_REPLICAS is
test_cli_operating.py's.)
"""

from __future__ import annotations

import os
import signal
import time

import pytest

from odradek.cli import main
from tests.brokerproc import BrokerProcess

pytestmark = pytest.mark.timeout(180)

# Well under the old floor of 5 s per request, and under the default --timeout of 10 s.
RETURNS_BEFORE_S = 4.0

COMMANDS = [
    ["topic", "create", "late-topic", "--partitions", "1"],
    ["topic", "list"],
    ["topic", "describe", "known"],
    ["topic", "delete", "known"],
    ["group", "list"],
    ["group", "describe", "some-group"],
    ["config", "get", "topic", "known"],
    ["cluster", "describe"],
    ["cluster", "quorum"],
    ["cluster", "log-dirs"],
    ["txn", "list"],
    ["acl", "list"],
]


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    proc = BrokerProcess(tmp_path_factory.mktemp("cli-timeout") / "data").start()
    try:
        assert main(["-b", proc.bootstrap, "topic", "create", "known", "--partitions", "1"]) == 0
        yield proc
    finally:
        proc.stop()


def _timed(argv: list[str]) -> tuple[int, float]:
    started = time.monotonic()
    code = main(argv)
    return code, time.monotonic() - started


def test_every_command_ends_at_its_timeout_when_the_broker_does_not_answer(broker, capsys, tmp_path):
    assert broker.proc is not None
    os.kill(broker.proc.pid, signal.SIGSTOP)
    try:
        for command in COMMANDS:
            code, took = _timed(["-b", broker.bootstrap, *command, "--timeout", "1"])
            err = capsys.readouterr().err
            assert code == 3, (command, err)
            assert took < RETURNS_BEFORE_S, (command, took, err)
            assert err.startswith("odradek: error: ") and err.count("\n") == 1, err
        # Streaming commands: --timeout bounds connecting (and each wait after it) the same way.
        code, took = _timed(["-b", broker.bootstrap, "consume", "known", "--max-messages", "1", "--timeout", "1"])
        assert code == 3 and took < RETURNS_BEFORE_S, (took, capsys.readouterr().err)
        # `cluster status` asks every node at once: four silent ones take one --timeout, not four.
        silent = ",".join([broker.bootstrap] * 4)
        code, took = _timed(["-b", silent, "cluster", "status", "--dir", str(tmp_path / "none"), "--timeout", "1"])
        out = capsys.readouterr().out
        assert code == 1 and "no node answered" in out and took < RETURNS_BEFORE_S, (took, out)
    finally:
        os.kill(broker.proc.pid, signal.SIGCONT)


def test_the_same_commands_succeed_once_it_answers(broker, capsys):
    for command in (["topic", "describe", "known"], ["cluster", "describe"], ["group", "list"]):
        assert main(["-b", broker.bootstrap, *command, "--timeout", "10"]) == 0, capsys.readouterr().err

