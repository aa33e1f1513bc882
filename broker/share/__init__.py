"""Share groups on the broker (KIP-932): share sessions, the ShareFetch/ShareAcknowledge path on partition
leaders, and the persister that carries each share-partition's state to the share coordinator.

`persister.SharePersister` is the seam between the partition leader (which owns the live
`odradek.replication.share.SharePartition`) and the share coordinator (which keeps it durable in
`__share_group_state`). The group coordinator uses it too: it initializes a share-partition's state when it
first assigns the partition, and deletes it with the group.
"""
