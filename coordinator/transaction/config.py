"""The transaction coordinator's settings, with Kafka's names and defaults."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["TransactionCoordinatorConfig"]


@dataclass(frozen=True, slots=True)
class TransactionCoordinatorConfig:
    transaction_state_log_num_partitions: int = 50  # transaction.state.log.num.partitions
    transaction_max_timeout_ms: int = 900_000  # transaction.max.timeout.ms
    transactional_id_expiration_ms: int = 7 * 24 * 3600 * 1000  # transactional.id.expiration.ms
    # transaction.remove.expired.transaction.cleanup.interval.ms
    remove_expired_transaction_cleanup_interval_ms: int = 3_600_000
    # transaction.abort.timed.out.transaction.cleanup.interval.ms: Kafka's scan for timed-out transactions; here
    # each has its own timer, and this is when a timeout's abort that the log refused is tried again
    abort_timed_out_transaction_cleanup_interval_ms: int = 10_000
    # request.timeout.ms: the longest a response waits for its __transaction_state write to be replicated
    # (Kafka's appendRecords timeout in TransactionStateManager.appendTransactionToLog)
    request_timeout_ms: int = 30_000

    @classmethod
    def from_broker_config(cls, config, **overrides) -> TransactionCoordinatorConfig:
        values = {}
        for name in ("transaction_state_log_num_partitions", "transaction_max_timeout_ms",
                     "transactional_id_expiration_ms", "remove_expired_transaction_cleanup_interval_ms",
                     "abort_timed_out_transaction_cleanup_interval_ms", "request_timeout_ms"):
            value = getattr(config, name, None)
            if value is not None:
                values[name] = value
        values.update(overrides)
        return cls(**values)
