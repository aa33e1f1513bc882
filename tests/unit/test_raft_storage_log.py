"""The Raft core over the storage layer's Log (StorageRaftLog): the interface fits, and a node restarted
from its directory loads the newest snapshot file and the segments after it."""

from __future__ import annotations

import os

from odradek.raft import FileQuorumStateStore, Role, SnapshotId, StorageRaftLog
from odradek.storage.config import LogConfig

from .raft_harness import Cluster

CONFIG = LogConfig(retention_ms=-1, retention_bytes=-1, segment_bytes=4096)


def storage_cluster(tmp_path, voters=(1, 2, 3), **config) -> Cluster:
    preload = {i: (StorageRaftLog.open(str(tmp_path / f"node-{i}"), CONFIG, now_ms=0),
                   FileQuorumStateStore(str(tmp_path / f"node-{i}"))) for i in voters}
    return Cluster(voters=voters, preload=preload, **config)


def restart_from_disk(cluster: Cluster, tmp_path, node_id: int) -> None:
    cluster.nodes[node_id] = None
    cluster.incarnation[node_id] += 1
    cluster.logs[node_id].close()
    cluster.logs[node_id] = StorageRaftLog.open(str(tmp_path / f"node-{node_id}"), CONFIG, now_ms=cluster.now)
    cluster.restart(node_id)


def test_a_quorum_on_storage_logs_elects_replicates_snapshots_and_restarts(tmp_path):
    cluster = storage_cluster(tmp_path)
    cluster.run_until(lambda: len(cluster.leaders()) == 1)
    leader = cluster.leaders()[0]
    last = 0
    for i in range(200):  # several 4 KiB segments
        last = cluster.append(f"value-{i}".encode())
    cluster.run_until(lambda: cluster.committed_everywhere(last))
    follower = next(i for i in cluster.nodes if i != leader)
    assert len(cluster.logs[follower].log.segments) > 2
    machine = cluster.machines[follower]
    snap = cluster[follower].create_snapshot(machine.next_offset, machine.snapshot(), now_ms=cluster.now)
    assert os.path.exists(tmp_path / f"node-{follower}" / f"{snap.end_offset:020d}-{snap.epoch:010d}.checkpoint")
    assert cluster.logs[follower].log_start_offset == snap.end_offset
    more = [cluster.append(f"more-{i}".encode()) for i in range(5)]
    cluster.run_until(lambda: cluster.committed_everywhere(more[-1]))

    restart_from_disk(cluster, tmp_path, follower)
    restarted = cluster.machines[follower]
    cluster.run_until(lambda: restarted.next_offset > more[-1])
    assert restarted.loads == [snap]
    assert restarted.commits[0].base_offset == snap.end_offset
    assert [v for _, v in restarted.values] == [f"value-{i}".encode() for i in range(200)] + [
        f"more-{i}".encode() for i in range(5)]
    # The quorum-state file beside the segments names the leader.
    assert FileQuorumStateStore(str(tmp_path / f"node-{follower}")).read().leader_id == leader


def test_a_node_behind_the_leaders_snapshot_installs_it_into_its_directory(tmp_path):
    cluster = storage_cluster(tmp_path, snapshot_chunk_bytes=100)
    cluster.run_until(lambda: len(cluster.leaders()) == 1)
    leader = cluster.leaders()[0]
    lagging = next(i for i in cluster.nodes if i != leader)
    cluster.isolate(lagging)
    last = 0
    for i in range(50):
        last = cluster.append(f"v{i}".encode())
    others = [i for i in cluster.nodes if i != lagging]
    cluster.run_until(lambda: all(cluster.machines[i].next_offset > last for i in others))
    for i in others:
        cluster[i].create_snapshot(cluster.machines[i].next_offset, cluster.machines[i].snapshot(), now_ms=cluster.now)
    cluster.heal()
    after = cluster.append(b"after")
    cluster.run_until(lambda: cluster.committed_everywhere(after))
    log = cluster.logs[lagging]
    assert log.latest_snapshot_id() == SnapshotId(last + 1, cluster[leader].epoch)
    assert log.log_start_offset == last + 1 and cluster[lagging].role == Role.FOLLOWER
    restart_from_disk(cluster, tmp_path, lagging)
    cluster.run_until(lambda: cluster.machines[lagging].next_offset > after)
    assert cluster.machines[lagging].loads == [SnapshotId(last + 1, cluster[leader].epoch)]
