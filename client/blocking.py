"""A blocking facade over the asyncio clients, for scripts, notebooks and Spark executors.

Theory of operation
-------------------
Each facade owns a private event loop running in a daemon thread (`LoopThread`); the asyncio client lives
on that loop and every blocking call is `asyncio.run_coroutine_threadsafe(...).result()`. The caller's
thread never runs the loop, so the facade works where an event loop already runs (Jupyter) and in plain
threads alike.

A facade is created from a config dataclass (or keyword options) and starts its loop and client lazily,
on first use. Pickling keeps only the config and the (picklable) serializers: an unpickled facade in
another process, e.g. a Spark executor, builds its own loop and connections when first used. No socket,
loop or future ever crosses a process boundary.

`BlockingProducer.send()` returns a `concurrent.futures.Future`; `send_many()` hands records to the loop
in chunks so that a Python loop on the caller's side is not paying one thread hop per record.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import inspect
import threading
import time
from typing import Any, Callable, Iterable, Iterator

from .admin import Admin
from .cluster import TopicPartition
from .config import ClientConfig, ConsumerConfig, ProducerConfig
from .consumer import Consumer, ConsumerRecord
from .producer import Producer, RecordMetadata
from .share import AcknowledgeType, ShareConsumer, ShareConsumerConfig, ShareConsumerRecord


class LoopThread:
    """An event loop running forever in a daemon thread."""

    def __init__(self, name: str = "odradek-client"):
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    def run(self, coro: Any, timeout: float | None = None) -> Any:
        future = asyncio.run_coroutine_threadsafe(coro, self.loop)
        try:
            return future.result(timeout)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise

    def submit(self, coro: Any) -> concurrent.futures.Future:
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def stop(self) -> None:
        if self.loop.is_closed():
            return
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)
        if not self._thread.is_alive():
            self.loop.close()


class _Facade:
    _config_cls: type[ClientConfig] = ClientConfig

    def __init__(self, config: ClientConfig | None = None, **options: Any):
        self._kwargs: dict[str, Any] = {k: options.pop(k) for k in list(options) if k in self._extra_args()}
        if config is None:
            config = self._config_cls.from_dict(options) if options else self._config_cls()
        elif options:
            config = config.replace(**options)
        self.config = config
        self._thread: LoopThread | None = None
        self._client: Any = None
        self._lock = threading.Lock()

    @classmethod
    def _extra_args(cls) -> set[str]:
        return set()

    def _make(self) -> Any:
        raise NotImplementedError

    def _ensure(self) -> Any:
        with self._lock:
            if self._client is None:
                self._thread = LoopThread(f"odradek-{type(self).__name__}")

                async def create() -> Any:
                    client = self._make()
                    await client.start()
                    return client

                try:
                    self._client = self._thread.run(create())
                except BaseException:
                    self._thread.stop()
                    self._thread = None
                    raise
            return self._client

    def _run(self, coro_fn: Callable[..., Any], *args: Any, timeout: float | None = None, **kw: Any) -> Any:
        self._ensure()
        assert self._thread is not None
        return self._thread.run(coro_fn(*args, **kw), timeout)

    def _wrap(self, name: str) -> Callable[..., Any]:
        client = self._ensure()
        attr = getattr(client, name)
        if inspect.iscoroutinefunction(attr):
            return lambda *a, **kw: self._run(attr, *a, **kw)
        if callable(attr):
            def call_in_loop(*a: Any, **kw: Any) -> Any:
                async def run() -> Any:
                    return attr(*a, **kw)
                return self._run(run)
            return call_in_loop
        return attr

    def close(self, timeout: float | None = None) -> None:
        with self._lock:
            client, thread = self._client, self._thread
            self._client = self._thread = None
        if client is not None and thread is not None:
            try:
                thread.run(client.close(), timeout)
            finally:
                thread.stop()

    def __enter__(self) -> Any:
        self._ensure()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __getstate__(self) -> dict[str, Any]:
        return {"config": self.config, "kwargs": self._kwargs}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["config"], **state["kwargs"])  # type: ignore[misc]


class BlockingProducer(_Facade):
    _config_cls = ProducerConfig

    @classmethod
    def _extra_args(cls) -> set[str]:
        return {"key_serializer", "value_serializer"}

    def _make(self) -> Producer:
        return Producer(self.config, **self._kwargs)  # type: ignore[arg-type]

    def send(self, topic: str, value: Any = None, key: Any = None, **kw: Any) -> concurrent.futures.Future:
        producer: Producer = self._ensure()
        assert self._thread is not None
        result: concurrent.futures.Future = concurrent.futures.Future()

        async def send() -> None:
            try:
                future = await producer.send(topic, value, key, **kw)
            except BaseException as e:
                result.set_exception(e)
                return
            future.add_done_callback(lambda f: _copy_outcome(f, result))

        self._thread.submit(send()).result()
        return result

    def send_and_wait(self, topic: str, value: Any = None, key: Any = None, timeout: float | None = None,
                      **kw: Any) -> RecordMetadata:
        return self.send(topic, value, key, **kw).result(timeout)

    def send_many(self, topic: str, records: Iterable[Any], *, chunk: int = 1000, wait: bool = True) -> int:
        """Send values (or (key, value) pairs); with `wait`, flush and raise the first delivery error."""
        producer: Producer = self._ensure()
        futures: list[asyncio.Future] = []

        async def send_chunk(items: list[Any]) -> None:
            for item in items:
                if isinstance(item, tuple):
                    futures.append(await producer.send(topic, item[1], item[0]))
                else:
                    futures.append(await producer.send(topic, item))

        count = 0
        buffer: list[Any] = []
        for item in records:
            buffer.append(item)
            if len(buffer) >= chunk:
                self._run(send_chunk, buffer)
                count += len(buffer)
                buffer = []
        if buffer:
            self._run(send_chunk, buffer)
            count += len(buffer)
        if wait:
            self.flush()
            for f in futures:
                if f.exception() is not None:
                    raise f.exception()  # type: ignore[misc]
        return count

    def flush(self, timeout: float | None = None) -> None:
        producer: Producer = self._ensure()
        self._run(producer.flush, timeout)

    def partitions_for(self, topic: str) -> list[int]:
        return self._wrap("partitions_for")(topic)


class BlockingConsumer(_Facade):
    _config_cls = ConsumerConfig

    def __init__(self, *topics: str, config: ConsumerConfig | None = None, consumer_timeout_ms: float | None = None,
                 **options: Any):
        super().__init__(config, **options)
        self._topics = list(topics)
        self.consumer_timeout_ms = consumer_timeout_ms

    @classmethod
    def _extra_args(cls) -> set[str]:
        return {"key_deserializer", "value_deserializer"}

    def _make(self) -> Consumer:
        return Consumer(*self._topics, config=self.config, **self._kwargs)  # type: ignore[arg-type]

    def __getstate__(self) -> dict[str, Any]:
        return {**super().__getstate__(), "topics": self._topics, "consumer_timeout_ms": self.consumer_timeout_ms}

    def __setstate__(self, state: dict[str, Any]) -> None:
        # Unpickling: the bare instance is built again by its own constructor.
        self.__init__(*state["topics"], config=state["config"],  # type: ignore[misc]
                      consumer_timeout_ms=state["consumer_timeout_ms"], **state["kwargs"])

    def poll(self, timeout_ms: int = 1000, max_records: int | None = None) -> dict[TopicPartition, list[ConsumerRecord]]:
        consumer: Consumer = self._ensure()
        return self._run(consumer.getmany, timeout_ms=timeout_ms, max_records=max_records)

    def __iter__(self) -> Iterator[ConsumerRecord]:
        idle_since = time.monotonic()
        while True:
            batch = self.poll(timeout_ms=500)
            if batch:
                idle_since = time.monotonic()
                for records in batch.values():
                    yield from records
            elif self.consumer_timeout_ms is not None and (time.monotonic() - idle_since) * 1000 >= self.consumer_timeout_ms:
                return

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_") or name in ("config", "consumer_timeout_ms"):
            raise AttributeError(name)
        return self._wrap(name)


class BlockingShareConsumer(_Facade):
    """The share consumer (client/share.py) for blocking code:

        with BlockingShareConsumer("jobs", group_id="workers", share_acknowledgement_mode="explicit") as c:
            for record in c.poll(timeout_ms=1000):
                c.acknowledge(record, AcknowledgeType.ACCEPT)
            c.commit()
    """

    _config_cls = ShareConsumerConfig

    def __init__(self, *topics: str, config: ShareConsumerConfig | None = None, **options: Any):
        super().__init__(config, **options)
        self._topics = list(topics)

    @classmethod
    def _extra_args(cls) -> set[str]:
        return {"key_deserializer", "value_deserializer"}

    def _make(self) -> ShareConsumer:
        return ShareConsumer(*self._topics, config=self.config, **self._kwargs)  # type: ignore[arg-type]

    def __getstate__(self) -> dict[str, Any]:
        return {**super().__getstate__(), "topics": self._topics}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(*state["topics"], config=state["config"], **state["kwargs"])  # type: ignore[misc]

    def poll(self, timeout_ms: int = 1000, max_records: int | None = None) -> list[ShareConsumerRecord]:
        consumer: ShareConsumer = self._ensure()
        return self._run(consumer.poll, timeout_ms=timeout_ms, max_records=max_records)

    def acknowledge(self, record: ConsumerRecord, type: AcknowledgeType | int = AcknowledgeType.ACCEPT) -> None:
        consumer: ShareConsumer = self._ensure()

        async def acknowledge() -> None:
            consumer.acknowledge(record, type)
        self._run(acknowledge)

    def commit(self, timeout_ms: int | None = None) -> dict[TopicPartition, Any]:
        consumer: ShareConsumer = self._ensure()
        return self._run(consumer.commit, timeout_ms)

    def __iter__(self) -> Iterator[ShareConsumerRecord]:
        while True:
            yield from self.poll(timeout_ms=500)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_") or name == "config":
            raise AttributeError(name)
        return self._wrap(name)


class BlockingAdmin(_Facade):
    _config_cls = ClientConfig

    def _make(self) -> Admin:
        return Admin(self.config)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_") or name == "config":
            raise AttributeError(name)
        return self._wrap(name)


def _copy_outcome(source: asyncio.Future, target: concurrent.futures.Future) -> None:
    if source.cancelled():
        target.cancel()
    elif source.exception() is not None:
        target.set_exception(source.exception())
    else:
        target.set_result(source.result())
