"""The share coordinator: share-group state (KIP-932) as replicated state machines over `__share_group_state`.

`coordinator.ShareCoordinator` (one method per API, 83-87) runs on the shared runtime (../runtime.py);
`shard` is one `__share_group_state` partition (replay, fencing, snapshots every N updates), `records` the
topic's key/value schemas (ShareSnapshot, ShareUpdate) and `config` the coordinator's settings.
"""
