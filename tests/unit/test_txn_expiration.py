"""transactional.id.expiration.ms on a manual clock, as Kafka's TransactionStateManager expires ids: only
in Empty, CompleteCommit or CompleteAbort (never with a transaction open or its markers still going out),
once their last update is at least the expiration old, at the cleanup interval's ticks
(transaction.remove.expired.transaction.cleanup.interval.ms); the tombstone is replicated, so a reloaded
coordinator has forgotten them too, and the id starts over with a new producer id.

(producer.id.expiration.ms, the partitions' side, is in test_txn_verification.py.)"""

from __future__ import annotations

import pytest

from odradek.broker.config import BrokerConfig
from odradek.coordinator.transaction.config import TransactionCoordinatorConfig
from odradek.protocol.errors import ErrorCode
from odradek.protocol.messages import DescribeTransactionsRequest

from tests.harness.txn_coordinator import Harness, S

EXPIRATION_MS = 10_000
TICK_MS = 1_000


def described(h: Harness, txn: str) -> tuple[int, str]:
    (state,) = h.tc.describe_transactions(DescribeTransactionsRequest(transactional_ids=[txn]), 0, h.now).transaction_states
    return state.error_code, state.transaction_state


def settle(h: Harness, txn: str, pid: int, commit: bool) -> None:
    assert h.add(pid, 0, txn=txn) == {("t", 0): 0}
    assert h.end(pid, 0, commit=commit, txn=txn).error_code == 0
    h.finish_markers()


def test_only_idle_ids_without_an_open_transaction_expire():
    h = Harness(transactional_id_expiration_ms=EXPIRATION_MS, remove_expired_transaction_cleanup_interval_ms=TICK_MS)
    start = h.now
    pids = {txn: h.init(txn=txn).producer_id for txn in ("empty", "committed", "aborted", "preparing", "ongoing", "busy")}
    settle(h, "committed", pids["committed"], commit=True)
    settle(h, "aborted", pids["aborted"], commit=False)
    h.add(pids["preparing"], 0, txn="preparing")
    assert h.end(pids["preparing"], 0, commit=True, txn="preparing").error_code == 0  # markers never confirmed
    h.sink.jobs.clear()
    h.add(pids["ongoing"], 0, txn="ongoing")  # open (its 60 s timeout is beyond this test)
    h.advance(EXPIRATION_MS - 2 * TICK_MS)
    settle(h, "busy", pids["busy"], commit=True)  # activity: its last update is now
    assert {t: h.state(t).state for t in pids} == {
        "empty": S.EMPTY, "committed": S.COMPLETE_COMMIT, "aborted": S.COMPLETE_ABORT, "preparing": S.PREPARE_COMMIT,
        "ongoing": S.ONGOING, "busy": S.COMPLETE_COMMIT}

    h.advance(2 * TICK_MS - 1)  # one ms short of the expiration for the idle ones
    assert all(txn in h.tc.shard_for(txn).transactions for txn in pids)
    h.advance(1)  # a cleanup tick exactly at start + expiration: last update <= now - expiration
    assert h.now == start + EXPIRATION_MS
    left = {txn for txn in pids if txn in h.tc.shard_for(txn).transactions}
    assert left == {"preparing", "ongoing", "busy"}
    assert described(h, "committed") == (ErrorCode.TRANSACTIONAL_ID_NOT_FOUND, "")
    assert described(h, "ongoing") == (0, "Ongoing")

    h.advance(EXPIRATION_MS - 2 * TICK_MS)  # "busy" has been idle for the expiration now
    assert "busy" not in h.tc.shard_for("busy").transactions
    assert {txn for txn in pids if txn in h.tc.shard_for(txn).transactions} == {"preparing", "ongoing"}


def test_the_check_runs_at_the_cleanup_interval():
    h = Harness(transactional_id_expiration_ms=EXPIRATION_MS, remove_expired_transaction_cleanup_interval_ms=4 * TICK_MS)
    start = h.now
    h.init()
    h.advance(EXPIRATION_MS + TICK_MS)  # expired at start + 10 s, but the ticks are at +4, +8, +12 s
    assert "txn-a" in h.tc.shard_for("txn-a").transactions
    h.advance(TICK_MS)
    assert h.now == start + 12 * TICK_MS and "txn-a" not in h.tc.shard_for("txn-a").transactions


def test_an_expired_id_is_forgotten_after_a_reload_and_starts_over_with_a_new_producer_id():
    h = Harness(transactional_id_expiration_ms=EXPIRATION_MS, remove_expired_transaction_cleanup_interval_ms=TICK_MS)
    first = h.init()
    settle(h, "txn-a", first.producer_id, commit=True)
    h.advance(EXPIRATION_MS)
    assert "txn-a" not in h.tc.shard_for("txn-a").transactions
    h.reload()  # the tombstone is in the log: replay drops the id again
    assert "txn-a" not in h.tc.shard_for("txn-a").transactions
    again = h.init()
    assert again.error_code == 0 and again.producer_id != first.producer_id and again.producer_epoch == 0
    # The old producer is unknown to the id now.
    assert h.add(first.producer_id, 0) == {("t", 0): ErrorCode.INVALID_PRODUCER_ID_MAPPING}


def test_the_broker_settings_reach_the_coordinator():
    config = BrokerConfig.from_properties({
        "transactional.id.expiration.ms": "1234", "transaction.remove.expired.transaction.cleanup.interval.ms": "99",
        "transaction.max.timeout.ms": "5000"})
    coordinator = TransactionCoordinatorConfig.from_broker_config(config)
    assert (coordinator.transactional_id_expiration_ms, coordinator.remove_expired_transaction_cleanup_interval_ms,
            coordinator.transaction_max_timeout_ms) == (1234, 99, 5000)
    assert BrokerConfig().remove_expired_transaction_cleanup_interval_ms == 3_600_000  # Kafka's default


def test_producer_id_expiration_reaches_the_partition_logs():
    """producer.id.expiration.ms is a broker setting; each log's config carries it (it was parsed and then
    ignored: every log kept the 24 h default)."""
    from odradek.broker.topics import log_config
    from odradek.metadata.image import MetadataImage

    config = BrokerConfig.from_properties({"producer.id.expiration.ms": "5000",
                                           "producer.id.expiration.check.interval.ms": "700"})
    assert log_config(MetadataImage(), "t", config).producer_id_expiration_ms == 5000
    assert config.producer_id_expiration_check_interval_ms == 700
    assert BrokerConfig().producer_id_expiration_check_interval_ms == 600_000  # Kafka's default


@pytest.mark.parametrize("key, default", [
    ("transaction.state.log.num.partitions", 50),
    ("transaction.state.log.replication.factor", 1),  # Kafka's sample server.properties (see broker/config.py)
    ("transaction.state.log.min.isr", 1),
    ("transaction.state.log.segment.bytes", 104857600),
    ("transaction.state.log.load.buffer.size", 5242880),
    ("transaction.max.timeout.ms", 900000),
    ("transactional.id.expiration.ms", 604800000),
    ("transaction.abort.timed.out.transaction.cleanup.interval.ms", 10000),
    ("transaction.remove.expired.transaction.cleanup.interval.ms", 3600000),
    ("transaction.partition.verification.enable", True),
    ("producer.id.expiration.ms", 86400000),
    ("producer.id.expiration.check.interval.ms", 600000),
])
def test_every_transaction_setting_of_kafka_loads_with_its_default(key, default):
    """A Kafka server.properties with any of these keys loads (an unknown key is refused), with Kafka's default."""
    assert BrokerConfig().get(key) == default
    value = "false" if isinstance(default, bool) else "7"
    assert BrokerConfig.from_properties({key: value}).get(key) == (False if isinstance(default, bool) else 7)
