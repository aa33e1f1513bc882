"""Sans-I/O Kafka wire protocol: never imports asyncio, socket, the clock or files."""
