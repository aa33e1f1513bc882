"""The group coordinator: consumer groups as replicated state machines over `__consumer_offsets`.

`group_coordinator.GroupCoordinator` (one method per API) runs on the shared runtime (../runtime.py:
shards, durable writes, timers); `shard` is one `__consumer_offsets` partition (replay and groups),
`classic` / `classic_group` the classic protocol (JoinGroup/SyncGroup), `offsets` committed offsets,
`consumer` / `consumer_group` / `assignors` the consumer protocol (KIP-848), `records` the topic's
key/value schemas and `config` the coordinator's settings.
"""
