"""Group and transaction coordinators as state machines replayed from compacted internal topics.

The group coordinator: `group_coordinator.GroupCoordinator` (one method per API) over `runtime`
(shards, durable writes, timers), `shard` (one `__consumer_offsets` partition: replay and groups),
`classic` / `classic_group` (JoinGroup/SyncGroup), `offsets`, `consumer` / `consumer_group` /
`assignors` (KIP-848), `records` (the topic's key/value schemas) and `partitioning` (which partition).
"""
