"""Bundled asyncio producer, consumer, share consumer and admin client, a blocking facade, and the command line.

    from odradek.client import Producer, Consumer, Admin, TopicPartition

    async with Producer(bootstrap_servers="localhost:9092") as producer:
        await producer.send_and_wait("events", b"hello", key=b"user-1")

The clients import only `odradek.protocol` (tests/test_layers.py checks it), so they speak to any
Kafka-compatible broker through the wire protocol alone.
"""

from .admin import Admin, NewTopic
from .blocking import BlockingAdmin, BlockingConsumer, BlockingProducer, BlockingShareConsumer
from .cluster import KafkaClient
from .common import ConsumerRebalanceListener, OffsetAndMetadata, TopicPartition
from .config import ClientConfig, ConsumerConfig, ProducerConfig
from .consumer import Consumer, ConsumerRecord, OffsetAndTimestamp
from .errors import (
    ClientClosedError,
    ConfigError,
    KafkaConnectionError,
    KafkaError,
    KafkaTimeoutError,
    NoBrokersAvailable,
    OdradekError,
)
from .producer import Producer, RecordMetadata
from .share import (
    AcknowledgeType, RecordDeserializationError, ShareConsumer, ShareConsumerConfig, ShareConsumerRecord, ShareStateError,
)

__all__ = [
    "AcknowledgeType", "Admin", "BlockingAdmin", "BlockingConsumer", "BlockingProducer", "BlockingShareConsumer",
    "ClientClosedError", "ClientConfig",
    "ConfigError", "Consumer", "ConsumerConfig", "ConsumerRebalanceListener", "ConsumerRecord", "KafkaClient",
    "KafkaConnectionError", "KafkaError", "KafkaTimeoutError", "NewTopic", "NoBrokersAvailable", "OdradekError",
    "OffsetAndMetadata", "OffsetAndTimestamp", "Producer", "ProducerConfig", "RecordDeserializationError",
    "RecordMetadata", "ShareConsumer",
    "ShareConsumerConfig", "ShareConsumerRecord", "ShareStateError", "TopicPartition",
]
