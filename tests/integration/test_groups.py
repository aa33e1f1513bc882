"""Consumer groups (classic protocol) with real clients against real broker processes.

confluent-kafka (librdkafka), aiokafka and kafka-python groups: three members on six partitions get
disjoint, complete assignments; a member killed with kill -9 (it runs in a subprocess of its own) loses
its partitions once its session times out; a member that leaves (close) loses them at once; static members
(group.instance.id) come back without a rebalance; cooperative-sticky rebalances only revoke what moves.
Committed offsets are where a restarted consumer resumes, and they and the group's state outlive a broker
restart, clean or kill -9. The admin side (confluent-kafka's AdminClient, kafka-python's KafkaAdminClient
and `odradek group`) lists, describes and deletes groups and reads their offsets and lag.

Each member runs on a thread of its own that owns its consumer (the clients are not thread-safe) and
polls until told to stop; the test reads the assignment the member last saw and the rebalance callbacks
it got. Every wait is a poll loop with a deadline. Tests that do not restart the broker share the module's
broker and use group and topic names of their own.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import queue
import subprocess
import sys
import threading
import time
import uuid
from concurrent.futures import Future
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer
from aiokafka import ConsumerRebalanceListener as AioListener
from aiokafka.structs import TopicPartition as AioTP
from confluent_kafka import ConsumerGroupState, ConsumerGroupTopicPartitions, ConsumerGroupType, KafkaError
from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka import TopicPartition as CkTP
from confluent_kafka.admin import AdminClient, NewTopic, OffsetSpec
from kafka import ConsumerRebalanceListener as KpListener
from kafka import KafkaAdminClient, KafkaConsumer
from kafka import TopicPartition as KpTP
from kafka.structs import OffsetAndMetadata as KpOffset

pytestmark = pytest.mark.timeout(150)

CLIENTS = ["confluent", "aiokafka", "kafka-python"]
TIMEOUT_S = 15
SESSION_MS = 6000  # the killed member's session: the broker's group.min.session.timeout.ms default
LONG_SESSION_MS = 30000  # everyone else's: a leave seen well before this is the LeaveGroup at work
HEARTBEAT_MS = 1000
KP_POLL_MS = 500  # kafka-python's poll timeout: see Member._run_kafka_python
REPO_ROOT = Path(__file__).resolve().parents[2]


# -------------------------------------------------------------------------------------------- helpers


def name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def wait_for(condition, timeout_s: float, what, interval_s: float = 0.05):
    """Poll `condition` until it returns something truthy (returned) or the deadline passes (AssertionError;
    `what` says what was awaited, or is called then to say it with the state reached)."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s}s waiting for {what() if callable(what) else what}")
        time.sleep(interval_s)


def create_topic(bootstrap: str, partitions: int, prefix: str = "grp") -> str:
    topic = name(prefix)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(topic, partitions, 1)], operation_timeout=TIMEOUT_S).values():
        future.result(TIMEOUT_S)
    return topic


def produce(bootstrap: str, topic: str, counts: dict[int, int]) -> None:
    """`counts[p]` records into partition p, acknowledged."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5,
                         "message.timeout.ms": TIMEOUT_S * 1000})
    failed = []
    for partition, n in counts.items():
        for i in range(n):
            producer.produce(topic, f"p{partition}-{i}".encode(), partition=partition,
                             on_delivery=lambda err, msg: err and failed.append(err))
    assert producer.flush(TIMEOUT_S) == 0 and not failed, failed


def admin_client(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap})


def describe_group(bootstrap: str, group: str):
    admin = admin_client(bootstrap)  # held until the future is done: a collected client never completes it
    return admin.describe_consumer_groups([group], request_timeout=TIMEOUT_S)[group].result(TIMEOUT_S)


def group_offsets(bootstrap: str, group: str) -> dict[int, int]:
    admin = admin_client(bootstrap)
    futures = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)], request_timeout=TIMEOUT_S)
    result = futures[group].result(TIMEOUT_S)
    return {tp.partition: tp.offset for tp in result.topic_partitions if tp.offset >= 0}


def settled(members, sizes: list[int], partitions: int) -> bool:
    """Every member has an assignment of the size expected (sorted), they are disjoint and cover every partition."""
    seen = [m.assigned for m in members]
    if any(s is None for s in seen) or sorted(len(s) for s in seen) != sorted(sizes):
        return False
    union = set().union(*seen)
    return len(union) == sum(len(s) for s in seen) and union == set(range(partitions))


# ------------------------------------------------------------------------------------ a group member


class Member:
    """A consumer group member on its own thread, which owns the consumer: it polls until stopped, keeps
    the assignment it last saw (`assigned`, None before the first), the rebalance callbacks it got
    (`events`: ("assign" | "revoke" | "lost", partitions)) and the (partition, offset) of records it read.
    `call(fn)` runs fn(consumer) on that thread between polls (awaited for aiokafka when it is a coroutine)."""

    def __init__(self, client: str, bootstrap: str, group: str, topic: str, *, instance_id: str | None = None,
                 session_ms: int = LONG_SESSION_MS, strategy: str | None = None, protocol: str = "classic",
                 label: str | None = None):
        self.client, self.bootstrap, self.group, self.topic = client, bootstrap, group, topic
        self.instance_id, self.session_ms, self.strategy, self.protocol = instance_id, session_ms, strategy, protocol
        self.label = label or name(client)
        self.assigned: frozenset[int] | None = None
        self.events: list[tuple[str, frozenset[int]]] = []
        self.records: list[tuple[int, int]] = []
        self.error: BaseException | None = None
        self._calls: queue.Queue = queue.Queue()
        self._stop = threading.Event()
        self._lock = threading.Lock()
        target = {"confluent": self._run_confluent, "kafka-python": self._run_kafka_python,
                  "aiokafka": lambda: asyncio.run(self._run_aiokafka())}[client]
        self._thread = threading.Thread(target=self._guard, args=(target,), daemon=True, name=self.label)
        self._thread.start()

    # -- the test's side

    def call(self, fn, timeout_s: float = TIMEOUT_S):
        future: Future = Future()
        self._calls.put((fn, future))
        return future.result(timeout_s)

    def close(self, timeout_s: float = 30) -> None:
        self._stop.set()
        self._thread.join(timeout_s)
        assert not self._thread.is_alive(), f"{self.label} did not close in {timeout_s}s"
        if self.error is not None:
            raise AssertionError(f"{self.label} failed") from self.error

    def event_count(self) -> int:
        with self._lock:
            return len(self.events)

    def first_offsets(self) -> dict[int, int]:
        with self._lock:
            out: dict[int, int] = {}
            for partition, offset in self.records:
                out.setdefault(partition, offset)
            return out

    def commit(self, offsets: dict[int, int]) -> None:
        self.call({"confluent": self._commit_confluent, "kafka-python": self._commit_kafka_python,
                   "aiokafka": self._commit_aiokafka}[self.client](offsets))

    def committed(self, partitions) -> dict[int, int | None]:
        return self.call({"confluent": self._committed_confluent, "kafka-python": self._committed_kafka_python,
                          "aiokafka": self._committed_aiokafka}[self.client](list(partitions)))

    def generation(self) -> int | None:
        """The generation the member is in, when the client tells (kafka-python, aiokafka)."""
        if self.client == "kafka-python":
            return self.call(lambda c: c.group_metadata().generation_id)
        if self.client == "aiokafka":
            return self.call(lambda c: c._coordinator.generation)  # no public accessor
        return None

    def member_id(self) -> str:
        if self.client == "confluent":
            return self.call(lambda c: c.memberid())
        if self.client == "kafka-python":
            return self.call(lambda c: c.group_metadata().member_id)
        return self.call(lambda c: c._coordinator.member_id)

    # -- the member's thread

    def _guard(self, target) -> None:
        try:
            target()
        except BaseException as e:  # reported by close()
            self.error = e

    def _event(self, kind: str, partitions) -> None:
        with self._lock:
            self.events.append((kind, frozenset(tp.partition for tp in partitions)))

    def _seen(self, assignment, records=()) -> None:
        with self._lock:
            self.records.extend(records)
            self.assigned = frozenset(tp.partition for tp in assignment if tp.topic == self.topic)

    def _next_call(self):
        try:
            return self._calls.get_nowait()
        except queue.Empty:
            return None

    @staticmethod
    def _settle(future: Future, fn, arg) -> object:
        try:
            result = fn(arg)
        except BaseException as e:
            future.set_exception(e)
            return None
        if not inspect.iscoroutine(result):
            future.set_result(result)
            return None
        return result

    def _run_confluent(self) -> None:
        conf = {"bootstrap.servers": self.bootstrap, "group.id": self.group, "client.id": self.label,
                "auto.offset.reset": "earliest", "enable.auto.commit": False}
        if self.protocol == "consumer":
            conf["group.protocol"] = "consumer"
        else:
            conf.update({"session.timeout.ms": self.session_ms, "heartbeat.interval.ms": HEARTBEAT_MS})
        if self.instance_id is not None:
            conf["group.instance.id"] = self.instance_id
        if self.strategy is not None:
            conf["partition.assignment.strategy"] = self.strategy
        consumer = Consumer(conf)
        try:
            consumer.subscribe([self.topic], on_assign=lambda c, ps: self._event("assign", ps),
                               on_revoke=lambda c, ps: self._event("revoke", ps),
                               on_lost=lambda c, ps: self._event("lost", ps))
            while not self._stop.is_set():
                msg = consumer.poll(0.05)
                records = [(msg.partition(), msg.offset())] if msg is not None and msg.error() is None else []
                self._seen(consumer.assignment(), records)
                while (item := self._next_call()) is not None:
                    self._settle(item[1], item[0], consumer)
        finally:
            consumer.close()

    def _run_kafka_python(self) -> None:
        member = self

        class Listener(KpListener):
            def on_partitions_revoked(self, revoked):
                member._event("revoke", revoked)

            def on_partitions_assigned(self, assigned):
                member._event("assign", assigned)

        consumer = KafkaConsumer(
            bootstrap_servers=self.bootstrap, group_id=self.group, client_id=self.label,
            group_instance_id=self.instance_id, session_timeout_ms=self.session_ms,
            heartbeat_interval_ms=HEARTBEAT_MS, auto_offset_reset="earliest", enable_auto_commit=False,
        )
        try:
            # kafka-python 3.0.12 can strand a group leader mid-rebalance (client side): when a rejoin was
            # started by a metadata change rather than by the coordinator, the leader's own assignment
            # clears need_rejoin() while the JoinGroup/SyncGroup task is still in flight; if poll() timed
            # out waiting for that task, later polls never collect it, and the member sits in REBALANCING
            # with heartbeats off, holding the SyncGroup result the broker sent. Knowing the topic before
            # joining (a leader without its metadata assigns nothing, then rejoins on the metadata change)
            # and polls long enough for a join to finish inside one poll keep clear of it.
            wait_for(lambda: consumer.partitions_for_topic(self.topic), TIMEOUT_S, f"metadata of {self.topic}")
            consumer.subscribe([self.topic], listener=Listener())
            while not self._stop.is_set():
                batches = consumer.poll(timeout_ms=KP_POLL_MS)
                records = [(tp.partition, r.offset) for tp, rs in batches.items() for r in rs]
                self._seen(consumer.assignment(), records)
                while (item := self._next_call()) is not None:
                    self._settle(item[1], item[0], consumer)
        finally:
            consumer.close()

    async def _run_aiokafka(self) -> None:
        member = self

        class Listener(AioListener):
            def on_partitions_revoked(self, revoked):
                member._event("revoke", revoked)

            def on_partitions_assigned(self, assigned):
                member._event("assign", assigned)

        consumer = AIOKafkaConsumer(
            bootstrap_servers=self.bootstrap, group_id=self.group, client_id=self.label,
            group_instance_id=self.instance_id, session_timeout_ms=self.session_ms,
            heartbeat_interval_ms=HEARTBEAT_MS, auto_offset_reset="earliest", enable_auto_commit=False,
        )
        consumer.subscribe([self.topic], listener=Listener())
        await consumer.start()
        try:
            while not self._stop.is_set():
                batches = await consumer.getmany(timeout_ms=50)
                records = [(tp.partition, r.offset) for tp, rs in batches.items() for r in rs]
                self._seen(consumer.assignment(), records)
                while (item := self._next_call()) is not None:
                    fn, future = item
                    pending = self._settle(future, fn, consumer)
                    if pending is not None:
                        try:
                            future.set_result(await pending)
                        except BaseException as e:
                            future.set_exception(e)
        finally:
            await consumer.stop()

    def _commit_confluent(self, offsets):
        return lambda c: c.commit(offsets=[CkTP(self.topic, p, o) for p, o in offsets.items()], asynchronous=False)

    def _commit_kafka_python(self, offsets):
        return lambda c: c.commit({KpTP(self.topic, p): KpOffset(o, "", -1) for p, o in offsets.items()})

    def _commit_aiokafka(self, offsets):
        return lambda c: c.commit({AioTP(self.topic, p): o for p, o in offsets.items()})

    def _committed_confluent(self, partitions):
        def fn(c):
            got = c.committed([CkTP(self.topic, p) for p in partitions], timeout=TIMEOUT_S)
            return {tp.partition: (tp.offset if tp.offset >= 0 else None) for tp in got}
        return fn

    def _committed_kafka_python(self, partitions):
        return lambda c: {p: c.committed(KpTP(self.topic, p)) for p in partitions}

    def _committed_aiokafka(self, partitions):
        async def fn(c):
            return {p: await c.committed(AioTP(self.topic, p)) for p in partitions}
        return fn


# A member in a process of its own, to be killed with kill -9: it prints its assignment whenever it changes.
CHILD = r"""
import asyncio, json, sys
spec = json.loads(sys.argv[1])
client, topic = spec["client"], spec["topic"]
last = None
def report(assignment):
    global last
    now = sorted(tp.partition for tp in assignment if tp.topic == topic)
    if now != last:
        last = now
        print(json.dumps(now), flush=True)
common = dict(bootstrap_servers=spec["bootstrap"], group_id=spec["group"], client_id="victim",
              session_timeout_ms=spec["session_ms"], heartbeat_interval_ms=spec["heartbeat_ms"],
              auto_offset_reset="earliest", enable_auto_commit=False)
if client == "confluent":
    from confluent_kafka import Consumer
    c = Consumer({"bootstrap.servers": spec["bootstrap"], "group.id": spec["group"], "client.id": "victim",
                  "session.timeout.ms": spec["session_ms"], "heartbeat.interval.ms": spec["heartbeat_ms"],
                  "auto.offset.reset": "earliest", "enable.auto.commit": False})
    c.subscribe([topic])
    while True:
        c.poll(0.05)
        report(c.assignment())
elif client == "kafka-python":
    from kafka import KafkaConsumer
    c = KafkaConsumer(**common)
    c.subscribe([topic])
    while True:
        c.poll(timeout_ms=500)
        report(c.assignment())
else:
    from aiokafka import AIOKafkaConsumer
    async def main():
        c = AIOKafkaConsumer(**common)
        c.subscribe([topic])
        await c.start()
        while True:
            await c.getmany(timeout_ms=50)
            report(c.assignment())
    asyncio.run(main())
"""


class ChildMember:
    """A member in a subprocess (CHILD above), for kill -9."""

    def __init__(self, client: str, bootstrap: str, group: str, topic: str, session_ms: int):
        spec = {"client": client, "bootstrap": bootstrap, "group": group, "topic": topic,
                "session_ms": session_ms, "heartbeat_ms": HEARTBEAT_MS}
        self.proc = subprocess.Popen([sys.executable, "-c", CHILD, json.dumps(spec)], stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True, cwd=REPO_ROOT)
        self.assigned: frozenset[int] | None = None
        self.stderr: list[str] = []
        self._out = threading.Thread(target=self._read, daemon=True)
        self._out.start()
        self._err = threading.Thread(target=lambda: self.stderr.extend(self.proc.stderr), daemon=True)
        self._err.start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            try:
                self.assigned = frozenset(json.loads(line))
            except ValueError:
                pass

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()  # SIGKILL: no LeaveGroup, no goodbye
        self.proc.wait(10)
        self._out.join(5)
        self._err.join(5)

    def tail(self) -> str:
        return "".join(self.stderr[-20:])


def close_all(*members) -> None:
    for m in members:
        if m is None:
            continue
        if isinstance(m, ChildMember):
            m.kill()
        else:
            try:
                m.close()
            except AssertionError:
                pass


# ----------------------------------------------------------------------------------------------- tests


@pytest.mark.parametrize("client", CLIENTS)
def test_three_members_then_one_killed_then_one_leaves(broker, client):
    """Three members split six partitions; kill -9 one: its partitions move once its session expires;
    one closes: its partitions move at once (long before its own, longer, session timeout)."""
    topic, group = create_topic(broker.bootstrap, 6), name(f"g-{client}")
    a = b = victim = None
    try:
        a = Member(client, broker.bootstrap, group, topic, label="a")
        b = Member(client, broker.bootstrap, group, topic, label="b")
        victim = ChildMember(client, broker.bootstrap, group, topic, SESSION_MS)
        wait_for(lambda: settled([a, b, victim], [2, 2, 2], 6), 60,
                 lambda: f"three disjoint, complete assignments of two partitions each, not "
                         f"{[a.assigned, b.assigned, victim.assigned]} (victim stderr: {victim.tail()})")
        lost = victim.assigned

        killed_at = time.monotonic()
        victim.kill()
        wait_for(lambda: settled([a, b], [3, 3], 6), 30, "the killed member's partitions to move to the others")
        elapsed = time.monotonic() - killed_at
        assert lost <= a.assigned | b.assigned
        # The broker cannot tell a killed member from a slow one before its session expires (the last
        # heartbeat can be up to one interval before the kill): a loose lower bound, not a timing claim.
        assert elapsed >= SESSION_MS / 1000 / 2, f"partitions moved {elapsed:.1f}s after the kill"

        left = b.assigned
        b.close()
        b = None
        wait_for(lambda: settled([a], [6], 6), LONG_SESSION_MS / 1000 / 2,
                 "the leaving member's partitions to move at once, before its session timeout")
        assert left <= a.assigned
    finally:
        close_all(victim, b, a)


def test_cooperative_sticky_only_revokes_what_moves(broker):
    """confluent-kafka with cooperative-sticky: a third member joining takes partitions from the others,
    who give up only those; then it leaves and the others gain its partitions without revoking any."""
    topic, group = create_topic(broker.bootstrap, 6), name("g-coop")
    members = []
    try:
        a = Member("confluent", broker.bootstrap, group, topic, strategy="cooperative-sticky", label="a")
        b = Member("confluent", broker.bootstrap, group, topic, strategy="cooperative-sticky", label="b")
        members += [a, b]
        wait_for(lambda: settled([a, b], [3, 3], 6), 60, "two members with three partitions each")
        assert describe_group(broker.bootstrap, group).partition_assignor == "cooperative-sticky"
        before = {m: m.assigned for m in (a, b)}
        marks = {m: m.event_count() for m in (a, b)}

        c = Member("confluent", broker.bootstrap, group, topic, strategy="cooperative-sticky", label="c")
        members.append(c)
        wait_for(lambda: settled([a, b, c], [2, 2, 2], 6), 60, "three members with two partitions each")
        for m in (a, b):
            after = m.assigned
            assert after <= before[m], "a sticky assignor keeps the partitions that stay"
            revoked = set().union(*(ps for kind, ps in m.events[marks[m]:] if kind == "revoke"))
            assert revoked == before[m] - after, (m.label, m.events[marks[m]:])
            assert not any(kind == "lost" for kind, _ in m.events[marks[m]:])
        assert not any(kind in ("revoke", "lost") and ps for kind, ps in c.events)

        taken = c.assigned
        marks = {m: m.event_count() for m in (a, b)}
        before = {m: m.assigned for m in (a, b)}
        c.close()
        members.remove(c)
        wait_for(lambda: settled([a, b], [3, 3], 6), 30, "the leaver's partitions to move to the others")
        for m in (a, b):
            assert before[m] <= m.assigned
            new_events = m.events[marks[m]:]
            assert not any(kind in ("revoke", "lost") and ps for kind, ps in new_events), (m.label, new_events)
            gained = set().union(*(ps for kind, ps in new_events if kind == "assign"))
            assert gained == m.assigned - before[m]
        assert a.assigned | b.assigned >= taken
    finally:
        close_all(*reversed(members))


@pytest.mark.parametrize("client", CLIENTS)
def test_static_member_restarts_without_rebalance(broker, client):
    """Three static members (group.instance.id); one closes (a static member does not leave) and a new
    consumer with its instance id comes back: it gets the same partitions, and the others see no rebalance."""
    topic, group = create_topic(broker.bootstrap, 6), name(f"g-static-{client}")
    members = []
    try:
        # The first member alone first, so that it is the leader and stays it: the one restarted is not.
        first = Member(client, broker.bootstrap, group, topic, instance_id="s0", label="s0")
        members.append(first)
        wait_for(lambda: settled([first], [6], 6), 60, "the first member to get every partition")
        members += [Member(client, broker.bootstrap, group, topic, instance_id=f"s{i}", label=f"s{i}") for i in (1, 2)]
        wait_for(lambda: settled(members, [2, 2, 2], 6), 60, "three static members with two partitions each")
        s0, s1, s2 = members
        stay = (s0, s1)
        before = {m: (m.assigned, m.event_count(), m.generation(), m.member_id()) for m in stay}
        s2_partitions, s2_id = s2.assigned, s2.member_id()

        s2.close()
        members.remove(s2)
        description = describe_group(broker.bootstrap, group)
        assert len(description.members) == 3, "a static member that closes stays in the group"

        back = Member(client, broker.bootstrap, group, topic, instance_id="s2", label="s2-again")
        members.append(back)
        wait_for(lambda: back.assigned, 30, "the restarted static member's assignment")
        assert back.assigned == s2_partitions
        assert back.member_id() != s2_id, "the coordinator gives the new instance a new member id"
        description = describe_group(broker.bootstrap, group)
        assert description.state == ConsumerGroupState.STABLE
        by_instance = {m.group_instance_id: m for m in description.members}
        assert set(by_instance) == {"s0", "s1", "s2"}
        assert by_instance["s2"].member_id == back.member_id()
        # A rebalance would reach the others by their next heartbeat: watch them for three heartbeat
        # intervals. No rebalance callback, the same partitions, generation and member id throughout.
        deadline = time.monotonic() + 3 * HEARTBEAT_MS / 1000
        while True:
            for m in stay:
                assigned, events, generation, member_id = before[m]
                assert m.event_count() == events, (m.label, m.events[events:])
                assert m.assigned == assigned, m.label
                assert m.generation() == generation and m.member_id() == member_id, m.label
            if time.monotonic() > deadline:
                break
            time.sleep(0.2)
    finally:
        close_all(*reversed(members))


@pytest.mark.parametrize("client", CLIENTS)
def test_commit_stop_restart_resumes_at_committed_offset(broker, client):
    topic, group = create_topic(broker.bootstrap, 2), name(f"g-resume-{client}")
    produce(broker.bootstrap, topic, {0: 20, 1: 20})
    first = Member(client, broker.bootstrap, group, topic)
    try:
        wait_for(lambda: len(first.records) >= 10, 60, "records read by the first consumer")
        first.commit({0: 7, 1: 13})
        assert first.committed([0, 1]) == {0: 7, 1: 13}
    finally:
        first.close()
    second = Member(client, broker.bootstrap, group, topic)
    try:
        wait_for(lambda: len(second.first_offsets()) == 2, 60, "records from both partitions after the restart")
        assert second.first_offsets() == {0: 7, 1: 13}
        assert second.committed([0, 1]) == {0: 7, 1: 13}
    finally:
        second.close()
    assert group_offsets(broker.bootstrap, group) == {0: 7, 1: 13}


@pytest.mark.parametrize("hard", [False, True], ids=["clean", "kill9"])
def test_offsets_and_group_state_survive_broker_restart(fresh_broker, hard):
    """Two groups: one Empty with committed offsets, one with a live member. After the broker restarts
    (SIGTERM, or kill -9), the offsets are there, the empty group is Empty, and the live member carries
    on in the same generation under the same member id: its group was loaded back, not rebuilt."""
    bootstrap = fresh_broker.bootstrap
    topic = create_topic(bootstrap, 2)
    produce(bootstrap, topic, {0: 10, 1: 10})
    idle_group, live_group = name("g-idle"), name("g-live")

    idle = Member("confluent", bootstrap, idle_group, topic)
    try:
        wait_for(lambda: idle.assigned, 60, "the idle group's member to join")
        idle.commit({0: 2, 1: 3})
    finally:
        idle.close()
    live = Member("confluent", bootstrap, live_group, topic)
    try:
        wait_for(lambda: live.assigned == {0, 1}, 60, "the live member's assignment")
        live.commit({0: 4, 1: 6})
        member_id, events = live.member_id(), live.event_count()
        assert describe_group(bootstrap, idle_group).state == ConsumerGroupState.EMPTY

        fresh_broker.restart(hard=hard)

        def commit_again():
            try:
                live.commit({0: 5, 1: 7})
                return True
            except KafkaException:  # the coordinator is still being found or loaded: try again
                return False
        wait_for(commit_again, 30, "a commit by the live member after the restart", interval_s=0.2)
        assert live.member_id() == member_id
        assert live.event_count() == events, live.events[events:]
        description = describe_group(bootstrap, live_group)
        assert description.state == ConsumerGroupState.STABLE
        assert [m.member_id for m in description.members] == [member_id]
        assert {tp.partition for tp in description.members[0].assignment.topic_partitions} == {0, 1}
        assert describe_group(bootstrap, idle_group).state == ConsumerGroupState.EMPTY
        assert group_offsets(bootstrap, idle_group) == {0: 2, 1: 3}
        assert group_offsets(bootstrap, live_group) == {0: 5, 1: 7}
    finally:
        live.close()

    again = Member("confluent", bootstrap, idle_group, topic)
    try:
        wait_for(lambda: len(again.first_offsets()) == 2, 60, "records from both partitions")
        assert again.first_offsets() == {0: 2, 1: 3}
    finally:
        again.close()


def test_admin_clients_list_describe_delete_and_lag(broker):
    bootstrap = broker.bootstrap
    topic, group = create_topic(bootstrap, 3), name("g-admin")
    produce(bootstrap, topic, {0: 10, 1: 10, 2: 4})
    committed = {0: 3, 1: 5, 2: 4}
    members = [Member("confluent", bootstrap, group, topic, label=f"admin-{i}") for i in range(2)]
    admin = admin_client(bootstrap)
    kp = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=TIMEOUT_S * 1000)
    try:
        wait_for(lambda: settled(members, [1, 2], 3), 60, "two members sharing three partitions")
        members[0].commit(committed)

        # confluent-kafka AdminClient
        listed = admin.list_consumer_groups(request_timeout=TIMEOUT_S).result(TIMEOUT_S)
        assert not listed.errors
        mine = [g for g in listed.valid if g.group_id == group]
        assert len(mine) == 1 and not mine[0].is_simple_consumer_group
        assert mine[0].state == ConsumerGroupState.STABLE
        assert mine[0].type in (ConsumerGroupType.CLASSIC, ConsumerGroupType.UNKNOWN)

        description = describe_group(bootstrap, group)
        assert description.state == ConsumerGroupState.STABLE and description.partition_assignor == "range"
        assert sorted(m.client_id for m in description.members) == ["admin-0", "admin-1"]
        assigned = [{tp.partition for tp in m.assignment.topic_partitions} for m in description.members]
        assert sorted(map(len, assigned)) == [1, 2] and set().union(*assigned) == {0, 1, 2}
        assert all(m.host for m in description.members)

        with pytest.raises(KafkaException) as excinfo:
            admin.delete_consumer_groups([group], request_timeout=TIMEOUT_S)[group].result(TIMEOUT_S)
        assert excinfo.value.args[0].code() == KafkaError.NON_EMPTY_GROUP

        assert group_offsets(bootstrap, group) == committed
        ends = admin.list_offsets({CkTP(topic, p): OffsetSpec.latest() for p in range(3)},
                                  request_timeout=TIMEOUT_S)
        high = {tp.partition: f.result(TIMEOUT_S).offset for tp, f in ends.items()}
        lag = {p: high[p] - committed[p] for p in range(3)}
        assert high == {0: 10, 1: 10, 2: 4} and lag == {0: 7, 1: 5, 2: 0}

        # kafka-python KafkaAdminClient (3.0 names: list_groups, describe_groups, list_group_offsets)
        groups = {g["group_id"]: g for g in kp.list_groups()}
        assert groups[group]["protocol_type"] == "consumer"
        described = kp.describe_groups([group])[group]
        assert described["group_state"] == "Stable" and described["protocol_data"] == "range"
        assert len(described["members"]) == 2
        offsets = kp.list_group_offsets(group)[group]
        assert {tp.partition: om.offset for tp, om in offsets.items() if tp.topic == topic} == committed

        # odradek group list / describe
        cli = [sys.executable, "-m", "odradek", "-b", bootstrap, "-o", "json", "group"]
        out = subprocess.run(cli + ["list"], capture_output=True, text=True, timeout=60, cwd=REPO_ROOT)
        assert out.returncode == 0, out.stderr
        assert any(g["group"] == group for g in json.loads(out.stdout))
        out = subprocess.run(cli + ["describe", group], capture_output=True, text=True, timeout=60, cwd=REPO_ROOT)
        assert out.returncode == 0, out.stderr
        cli_view = json.loads(out.stdout)
        assert cli_view["group"] == group and len(cli_view["members"]) == 2

        # Once every member has left, the group is Empty and can be deleted, offsets and all.
        for m in members:
            m.close()
        members = []
        wait_for(lambda: describe_group(bootstrap, group).state == ConsumerGroupState.EMPTY, 20, "an Empty group")
        admin.delete_consumer_groups([group], request_timeout=TIMEOUT_S)[group].result(TIMEOUT_S)
        listed = admin.list_consumer_groups(request_timeout=TIMEOUT_S).result(TIMEOUT_S)
        assert group not in {g.group_id for g in listed.valid}
        assert group_offsets(bootstrap, group) == {}
    finally:
        kp.close()
        close_all(*members)
