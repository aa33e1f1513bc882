"""Odradek: a Kafka-compatible broker written in Python on asyncio."""

__version__ = "0.1.0"
