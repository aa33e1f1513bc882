"""The segmented partition log: synchronous and deterministic (time is passed in as now_ms).

    log_manager   LogManager: every log of a log directory, its lock and identity, scheduled work
    log           Log: append, read, truncate, roll, retention, flush, recovery
    segment       LogSegment: one .log file and its indexes; SegmentRegion, the zero-copy read result
    index         OffsetIndex, TimeIndex
    scan          walking batches in segment files; the on-disk batch check used by recovery
    producer_state idempotent/transactional producer state and its snapshots
    leader_epoch  LeaderEpochCache (OffsetsForLeaderEpoch)
    cleaner       compaction
    checkpoints   atomically written checkpoint files in Kafka's formats
    config        LogConfig (Kafka's topic configs and defaults)
    names         on-disk names, TopicPartition
    errors        StorageError and its subclasses, each with Kafka's error code

End offsets are exclusive throughout: `log_end_offset` is the offset the next appended record receives.
Storage imports only `odradek.protocol`; the high watermark and last stable offset are replication's and
reach reads as `max_offset`.
"""
