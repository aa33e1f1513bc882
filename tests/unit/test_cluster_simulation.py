"""A seeded simulation of the controller's cluster: brokers register, heartbeat, go silent, come back, shut
down and are unregistered; topics are created; leaders change ISRs, operators reassign and elect; the
periodic decisions run. After every step the records are applied to the image and the invariants checked.

A failing seed names itself; `ODRADEK_SIM_SEED=<seed> pytest tests/unit/test_cluster_simulation.py` replays
it alone (with the trace of its steps).

Each seed runs twice: on a cluster from before KIP-966 (no ELR: the ISR never empties) and on a new one,
with eligible leader replicas and a cluster-wide min.insync.replicas, where brokers also lose power ("crash":
no clean-shutdown marker, so they register again without a previous broker epoch) and some topics set their
own min.insync.replicas. There the invariants add KIP-966's: ISR and ELR apart, no ELR at or above min ISR, a
broker that registered after an unclean shutdown in no ISR or ELR, and a leader from outside the ISR only
from the ELR of an empty ISR, an unclean election, or the single replica of its partition.
"""

from __future__ import annotations

import os
import random
import uuid

import pytest

from odradek.protocol.errors import ErrorCode
from odradek.metadata.controller import ElectionType
from odradek.metadata.image import NO_LEADER, MetadataError, MetadataImage, replay_all
from odradek.metadata.records import ConfigResourceType
from odradek.metadata.partition_change import LeaderRecoveryState, is_reassigning

from .cluster_harness import Cluster

BROKERS = range(1, 7)
RACKS = {b: f"rack{b % 3}" for b in BROKERS}
STEPS = 400
SEEDS = [int(os.environ["ODRADEK_SIM_SEED"])] if "ODRADEK_SIM_SEED" in os.environ else list(range(24))

# Errors a step may meet as the cluster moves under it; anything else is a failure.
EXPECTED = {
    ErrorCode.DUPLICATE_BROKER_REGISTRATION,
    ErrorCode.INVALID_REPLICATION_FACTOR,
    ErrorCode.STALE_BROKER_EPOCH,
    ErrorCode.BROKER_ID_NOT_REGISTERED,
    ErrorCode.TOPIC_ALREADY_EXISTS,
}


class Simulation:
    def __init__(self, seed: int, elr: bool = False) -> None:
        self.seed = seed
        self.rng = random.Random(seed)
        self.elr = elr
        self.cluster = Cluster(seed, leader_imbalance_check_interval_ms=5000, elr=elr, min_isr=self.rng.choice([1, 2]))
        self.clean_epoch: dict[int, int] = {}  # the broker epoch a broker shut down cleanly with
        self.unclean_registered: set[int] = set()  # brokers that registered after an unclean shutdown this step
        self.now_ms = 0
        self.state = {b: "down" for b in BROKERS}  # down, up, silent, stopping
        self.lag = {b: 0 for b in BROKERS}
        self.trace: list[str] = []
        self.unclean_ok: set[str] = set()  # topics whose partitions this step may elect uncleanly
        self.reassigned: set[tuple[str, int]] = set()  # partitions whose reassignment this step changed
        self.alter_partition_isr: dict[tuple[str, int], tuple[int, ...]] = {}

    # -- steps

    def step(self) -> None:
        c = self.cluster
        self.now_ms += self.rng.randrange(0, 2500)
        self.unclean_ok = {name for name in c.image.topics_by_name if self._unclean_enabled(name)}
        self.reassigned = set()
        self.alter_partition_isr = {}
        self.unclean_registered = set()
        action = self.rng.choices(
            ["brokers", "register", "silence", "revive", "shutdown", "topic", "alter_partition", "reassign",
             "cancel", "elect", "unclean", "tick", "unregister", "garbage", "crash"],
            weights=[30, 6, 2, 3, 2, 4, 20, 4, 2, 3, 1, 8, 1, 4, 2 if self.elr else 0],
        )[0]
        self.trace.append(f"{self.now_ms} {action}")
        before = c.image
        try:
            getattr(self, "do_" + action)()
        except MetadataError as e:
            assert e.error_code in EXPECTED, f"{action}: {e}"
            self.trace.append(f"  refused {e.error_code.name}")
        self.check(before, c.image, action)

    def do_brokers(self) -> None:
        """Every live broker heartbeats (most of the time), at some lag behind the log."""
        for b in BROKERS:
            state = self.state[b]
            if state not in ("up", "stopping") or self.rng.random() < 0.15:
                continue
            self.lag[b] = max(0, self.lag[b] + self.rng.choice([-2, -1, 0, 0, 1]))
            offset = max(-1, self.cluster.log_end_offset - 1 - self.lag[b])
            registration = self.cluster.image.brokers.get(b)
            try:
                response = self.cluster.heartbeat(b, self.now_ms, offset=offset, want_shut_down=state == "stopping")
            except MetadataError as e:
                assert e.error_code == ErrorCode.STALE_BROKER_EPOCH, e
                self.state[b] = "down"
                continue
            # Unfenced only once caught up with its registration.
            assert response.is_caught_up == (offset >= registration.broker_epoch)
            if registration.fenced and not response.is_fenced:
                assert offset >= registration.broker_epoch and not self.cluster.image.brokers[b].fenced
            if response.should_shut_down:
                self.trace.append(f"  broker {b} shut down")
                self.state[b] = "down"
                self.clean_epoch[b] = registration.broker_epoch

    def do_register(self) -> None:
        down = [b for b in BROKERS if self.state[b] == "down"]
        if down:
            b = self.rng.choice(down)
            previous = self.clean_epoch.pop(b, -1)
            registered = self.cluster.image.brokers.get(b)
            self.cluster.register(b, self.now_ms, rack=RACKS[b], incarnation=uuid.UUID(int=self.rng.getrandbits(128)),
                                  previous_broker_epoch=previous)
            if registered is not None and previous != registered.broker_epoch:
                self.unclean_registered.add(b)
            self.state[b] = "up"
            self.lag[b] = self.rng.randrange(3)
            self.trace.append(f"  broker {b} registered, epoch {self.cluster.epochs[b]}, previous {previous}")

    def do_crash(self) -> None:
        """A broker loses power: it sends nothing more and leaves no clean-shutdown marker."""
        alive = [b for b in BROKERS if self.state[b] in ("up", "silent", "stopping")]
        if alive:
            b = self.rng.choice(alive)
            self.state[b] = "down"
            self.clean_epoch.pop(b, None)
            self.trace.append(f"  broker {b} lost power")

    def do_silence(self) -> None:
        self._move("up", "silent")

    def do_revive(self) -> None:
        self._move("silent", "up")

    def do_shutdown(self) -> None:
        self._move("up", "stopping")

    def _move(self, source: str, target: str) -> None:
        candidates = [b for b in BROKERS if self.state[b] == source]
        if candidates:
            b = self.rng.choice(candidates)
            self.state[b] = target
            self.trace.append(f"  broker {b} {source} -> {target}")

    def do_topic(self) -> None:
        c = self.cluster
        name = f"t{len(c.image.topics_by_name)}"
        configs = {"unclean.leader.election.enable": "true"} if self.rng.random() < 0.2 else None
        if self.elr and self.rng.random() < 0.3:
            configs = {**(configs or {}), "min.insync.replicas": str(self.rng.randint(1, 3))}
        c.create_topic(name, self.rng.randint(1, 4), self.rng.randint(1, 3), configs)
        self.trace.append(f"  created {name}")

    def _random_partition(self):
        image = self.cluster.image
        if not image.topics_by_name:
            return None
        name = self.rng.choice(sorted(image.topics_by_name))
        topic = image.topics_by_name[name]
        return name, self.rng.choice(sorted(topic.partitions))

    def do_alter_partition(self) -> None:
        """The leader proposes an ISR: in-sync followers join, lagging ones leave; sometimes a stale one."""
        chosen = self._random_partition()
        if chosen is None:
            return
        name, partition_id = chosen
        p = self.cluster.partition(name, partition_id)
        if p.leader == NO_LEADER or self.state.get(p.leader) not in ("up", "stopping"):
            return
        isr = [p.leader] + [
            r for r in p.replicas
            if r != p.leader and self.state.get(r) in ("up", "stopping", "silent") and self.rng.random() < 0.7
        ]
        stale = self.rng.random() < 0.1
        self.alter_partition_isr[(name, partition_id)] = tuple(isr)
        try:
            result = self.cluster.alter_partition(
                name, partition_id, isr, partition_epoch=p.partition_epoch - (1 if stale else 0),
                version=self.rng.choice([2, 3]),
            )
        except MetadataError as e:
            assert e.error_code == ErrorCode.STALE_BROKER_EPOCH, e
            return
        ok = {ErrorCode.NONE, ErrorCode.INELIGIBLE_REPLICA, ErrorCode.NEW_LEADER_ELECTED}
        if stale:
            ok = {ErrorCode.INVALID_UPDATE_VERSION}
        assert ErrorCode(result.error_code) in ok, (ErrorCode(result.error_code), p, isr)
        self.reassigned.add((name, partition_id))
        self.trace.append(f"  {name}-{partition_id} isr {isr}: {ErrorCode(result.error_code).name}")

    def do_reassign(self) -> None:
        chosen = self._random_partition()
        if chosen is None:
            return
        registered = sorted(self.cluster.image.brokers)
        if not registered:
            return
        target = self.rng.sample(registered, self.rng.randint(1, min(3, len(registered))))
        results = self.cluster.reassign({chosen: target})
        assert results[chosen] in (ErrorCode.NONE, ErrorCode.INVALID_REPLICA_ASSIGNMENT), results
        self.reassigned.add(chosen)
        self.trace.append(f"  reassign {chosen} -> {target}: {results[chosen].name}")

    def do_cancel(self) -> None:
        chosen = self._random_partition()
        if chosen is None:
            return
        results = self.cluster.reassign({chosen: None})
        assert results[chosen] in (
            ErrorCode.NONE, ErrorCode.NO_REASSIGNMENT_IN_PROGRESS, ErrorCode.INVALID_REPLICA_ASSIGNMENT
        ), results
        self.reassigned.add(chosen)
        self.trace.append(f"  cancel {chosen}: {results[chosen].name}")

    def do_elect(self) -> None:
        election_type = self.rng.choice([ElectionType.PREFERRED, ElectionType.UNCLEAN])
        if election_type == ElectionType.UNCLEAN:
            self.unclean_ok = set(self.cluster.image.topics_by_name)
        results = self.cluster.elect(election_type, None)
        allowed = {
            ErrorCode.NONE, ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE, ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE
        }
        assert set(results.values()) <= allowed, results

    def do_unclean(self) -> None:
        names = sorted(self.cluster.image.topics_by_name)
        if names:
            name = self.rng.choice(names)
            value = self.rng.choice(["true", "false"])
            self.cluster.commit(self.cluster.controller.alter_configs(
                ConfigResourceType.TOPIC, name, {"unclean.leader.election.enable": value}
            ))
            self.unclean_ok = {n for n in names if self._unclean_enabled(n)}

    def do_tick(self) -> None:
        records = self.cluster.commit(self.cluster.controller.tick(self.now_ms))
        if records:
            self.trace.append(f"  tick wrote {len(records)} record(s)")

    def do_unregister(self) -> None:
        down = [b for b in BROKERS if self.state[b] == "down" and b in self.cluster.image.brokers]
        if down:
            b = self.rng.choice(down)
            self.cluster.unregister(b)
            self.trace.append(f"  unregistered {b}")

    def do_garbage(self) -> None:
        """Requests with random fields: answered with an error or carried out, never anything else."""
        c = self.cluster
        rng = self.rng
        chosen = self._random_partition()
        if chosen is None:
            return
        name, partition_id = chosen
        p = c.partition(name, partition_id)
        kind = rng.choice(["alter_partition", "reassign", "heartbeat"])
        if kind == "alter_partition":
            broker_id = rng.choice([p.leader, rng.randint(-1, 8)])
            isr = [rng.randint(-1, 8) for _ in range(rng.randint(0, 4))]
            if rng.random() < 0.5:
                isr.append(p.leader)
            self.alter_partition_isr[chosen] = tuple(isr)
            c.alter_partition(
                name, partition_id, isr, broker_id=broker_id,
                leader_epoch=p.leader_epoch + rng.randint(-1, 1), partition_epoch=p.partition_epoch + rng.randint(-1, 1),
                version=rng.choice([2, 3]), leader_recovery_state=rng.randint(-1, 2),
                member_epochs={b: rng.choice([-1, c.epochs.get(b, -1), 12345]) for b in isr},
                broker_epoch=rng.choice([c.epochs.get(broker_id, -1), -1]),
            )
            self.reassigned.add(chosen)
        elif kind == "reassign":
            target = [rng.randint(-1, 8) for _ in range(rng.randint(0, 4))]
            results = c.reassign({chosen: target}, allow_replication_factor_change=rng.random() < 0.5)
            assert results[chosen] in (
                ErrorCode.NONE, ErrorCode.INVALID_REPLICA_ASSIGNMENT, ErrorCode.INVALID_REPLICATION_FACTOR
            ), results
            self.reassigned.add(chosen)
        else:
            b = rng.choice(list(BROKERS))
            registered = c.image.brokers.get(b)
            epoch = registered.broker_epoch if registered is not None and rng.random() < 0.5 else rng.randint(-1, 50)
            if registered is not None and epoch == registered.broker_epoch and self.state[b] == "down":
                return  # a broker that is down sends nothing
            c.heartbeat(b, self.now_ms, epoch=epoch, offset=rng.randint(-1, c.log_end_offset + 2),
                        want_fence=rng.random() < 0.2, want_shut_down=rng.random() < 0.1)

    def _check_elr(self, name: str, p, where: str) -> None:
        assert len(set(p.elr)) == len(p.elr) and set(p.elr) <= set(p.replicas), where
        assert not set(p.elr) & set(p.isr), where
        image = self.cluster.image
        min_isr = int(image.topic_configs(name).get("min.insync.replicas") or image.broker_configs()["min.insync.replicas"])
        if len(p.isr) >= min(min_isr, len(p.replicas)):
            assert not p.elr, where
        for b in self.unclean_registered:
            # It may have lost what it acknowledged: no longer counted as holding it.
            assert b not in p.isr and b not in p.elr and p.leader != b, (where, b)

    def _unclean_enabled(self, name: str) -> bool:
        return self.cluster.image.topic_configs(name).get("unclean.leader.election.enable") == "true"

    # -- invariants

    def check(self, before: MetadataImage, after: MetadataImage, action: str) -> None:
        brokers = after.brokers
        for name, topic in after.topics_by_name.items():
            old_topic = before.topics_by_name.get(name)
            for partition_id, p in topic.partitions.items():
                where = f"{name}-{partition_id} {p}"
                assert p.isr or (self.elr and p.leader == NO_LEADER), where
                if self.elr:
                    self._check_elr(name, p, where)
                else:
                    assert not p.elr and not p.last_known_elr, where
                assert len(set(p.replicas)) == len(p.replicas) and len(set(p.isr)) == len(p.isr), where
                assert set(p.isr) <= set(p.replicas), where
                assert set(p.adding_replicas) <= set(p.replicas), where
                assert set(p.removing_replicas) <= set(p.replicas), where
                assert not set(p.adding_replicas) & set(p.removing_replicas), where
                if p.leader != NO_LEADER:
                    assert p.leader in p.isr, where
                    leader = brokers.get(p.leader)
                    assert leader is not None and not leader.fenced, where
                    assert not leader.in_controlled_shutdown or action == "brokers", where
                old = old_topic.partitions.get(partition_id) if old_topic is not None else None
                if old is None:
                    continue
                assert p.leader_epoch >= old.leader_epoch and p.partition_epoch >= old.partition_epoch, where
                if p != old:
                    assert p.partition_epoch > old.partition_epoch, (where, old)
                if p.leader != old.leader or p.replicas != old.replicas and not set(old.replicas) <= set(p.replicas):
                    assert p.leader_epoch > old.leader_epoch, (where, old)
                key = (name, partition_id)
                single = len(p.replicas) == 1 and p.leader in old.last_known_elr
                if p.leader != old.leader and p.leader != NO_LEADER and p.leader not in old.isr:
                    # A leader from outside the ISR: the leader's own ISR proposal, an eligible replica of an
                    # empty ISR, or an unclean election where allowed (or of a lone replica, ELR only).
                    proposed = self.alter_partition_isr.get(key, ())
                    from_elr = p.leader in old.elr and p.isr == (p.leader,)
                    assert p.leader in proposed or from_elr or name in self.unclean_ok or single, (where, old, action)
                if (
                    p.leader_recovery_state == LeaderRecoveryState.RECOVERING
                    and old.leader_recovery_state != LeaderRecoveryState.RECOVERING
                ):
                    assert name in self.unclean_ok or single, (where, old, action)
                if is_reassigning(old) and key not in self.reassigned:
                    # A reassignment in progress never drops below its target; once done, it is the target.
                    target = [r for r in old.replicas if r not in old.removing_replicas]
                    if is_reassigning(p):
                        assert p.replicas == old.replicas, (where, old)
                    else:
                        # Completed only with the whole target in sync.
                        assert list(p.replicas) == target and set(target) <= set(p.isr), (where, old)
        for broker in brokers.values():
            if broker.fenced or broker.in_controlled_shutdown:
                # Out of every ISR it is not the last member of (fencing happens in the same step).
                for topic in after.topics_by_name.values():
                    for p in topic.partitions.values():
                        assert broker.broker_id not in p.isr or p.isr == (broker.broker_id,) or (
                            broker.in_controlled_shutdown and not broker.fenced and action != "brokers"
                        ), (broker, p)


@pytest.mark.parametrize("elr", [False, True], ids=["before-elr", "elr"])
@pytest.mark.parametrize("seed", SEEDS)
def test_cluster_simulation(seed, elr):
    sim = Simulation(seed, elr)
    for i in range(STEPS):
        try:
            sim.step()
        except AssertionError as e:
            trace = "\n".join(sim.trace[-30:])
            raise AssertionError(
                f"seed {seed} failed at step {i} (replay: ODRADEK_SIM_SEED={seed}); last steps:\n{trace}\n{e}"
            ) from None
    # The image built record by record is the image the whole log replays into.
    assert replay_all(sim.cluster.written) == sim.cluster.image
    # Something happened: brokers were unfenced and partitions changed.
    written = sim.cluster.written
    assert any(getattr(r, "fenced", 0) == -1 for r in written if type(r).__name__ == "BrokerRegistrationChangeRecord")
    assert any(type(r).__name__ == "PartitionChangeRecord" for r in written)
    if elr:  # and replicas waited in the ELR
        assert any(type(r).__name__ == "PartitionChangeRecord" and r.eligible_leader_replicas for r in written)


def test_the_same_seed_writes_the_same_records():
    def run(seed):
        sim = Simulation(seed)
        for _ in range(100):
            sim.step()
        return sim.cluster.written

    assert run(3) == run(3)
