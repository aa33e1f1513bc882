"""Coordinators as state machines replayed from compacted internal topics.

Shared by every coordinator: `runtime` (shards of an internal topic's partitions, durable writes through
a `PartitionWriter`, timers on the shared timing wheel), `partitioning` (which partition of an internal
topic a key lives in, as Kafka computes it) and `topics` (the view of the broker's topics a coordinator
needs). Each coordinator has its folder on top: `group/` (classic and KIP-848 consumer groups over
`__consumer_offsets`).
"""
