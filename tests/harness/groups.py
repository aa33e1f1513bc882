"""Consumer group members of each client library (each on a thread that owns its consumer, or in a child
process that a test can kill -9), the topics they read, and the admin's views of their group."""

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
from aiokafka import AIOKafkaConsumer
from aiokafka import ConsumerRebalanceListener as AioListener
from aiokafka.structs import TopicPartition as AioTP
from confluent_kafka import ConsumerGroupTopicPartitions
from confluent_kafka import Consumer, Producer
from confluent_kafka import TopicPartition as CkTP
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import ConsumerRebalanceListener as KpListener
from kafka import KafkaConsumer
from kafka import TopicPartition as KpTP
from kafka.structs import OffsetAndMetadata as KpOffset


TIMEOUT_S = 15
LONG_SESSION_MS = 30000  # everyone else's: a leave seen well before this is the LeaveGroup at work
HEARTBEAT_MS = 1000
KP_POLL_MS = 500  # kafka-python's poll timeout: see Member._run_kafka_python
REPO_ROOT = Path(__file__).resolve().parents[2]


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
