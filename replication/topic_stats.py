"""Per-topic traffic counts: Kafka's BrokerTopicStats (BytesInPerSec, MessagesInPerSec, BytesOutPerSec per
topic, and the broker-wide ReplicationBytesOutPerSec).

Where each is counted, as Kafka counts it
-----------------------------------------
- **Bytes in and messages in**: by the replica manager, once per partition of a produce request whose append
  the leader's log took (`ReplicaManager._append_one`, Kafka's `appendToLocalLog`): the bytes are the size of
  the record batches as they arrived (compressed, as on the wire), the messages `last_offset - first_offset
  + 1` of the append, read from what the log returns, never from the records themselves (a batch carries
  its record count in its header; nothing here touches a record). A refused append counts nothing; a retried
  duplicate of an idempotent producer counts again, as Kafka's does (the client did send it twice).
  Transaction markers (WriteTxnMarkers) take the same road and count, one message each, as in Kafka. Writes
  of this broker's own coordinators (offsets, transaction state, share state) go through `append_internal`
  and are not counted: Kafka's coordinators append through the replica manager and count there, but here
  they would only make the internal topics look busy with the broker's own bookkeeping.
- **Bytes out**: by the Fetch and ShareFetch handlers when the response is made (Kafka's KafkaApis: "record
  the bytes out metrics only when the response is being sent"), from the size of the record regions each
  partition answers with. A fetch answered empty because its client is over quota counts nothing.
- **Replication bytes out**: a follower's fetch is not a topic's consumer traffic; Kafka counts it apart,
  broker-wide (ReplicationBytesOutPerSec), and so does this: a topic's bytes out is what consumers read.

Cost: one dict look-up and two integer adds per topic-partition of a request, on the loop's thread (no lock:
the loop is the only writer; a scrape from the metrics thread reads integers, each read atomic under the
GIL). Counts start at 0 when the broker starts, like every Prometheus counter; a rate is the difference of
two readings. A deleted topic's counts stay until the broker restarts (Kafka removes them; here the label
set is bounded by the topics this broker ever served, like `log_size_bytes`).
"""

from __future__ import annotations

__all__ = ["TopicCounts", "BrokerTopicStats"]


class TopicCounts:
    """One topic's counts on this broker since it started."""

    __slots__ = ("bytes_in", "messages_in", "bytes_out")

    def __init__(self) -> None:
        self.bytes_in = 0
        self.messages_in = 0
        self.bytes_out = 0


class BrokerTopicStats:
    """The counts of every topic this broker served (see the module docstring)."""

    __slots__ = ("topics", "replication_bytes_out")

    def __init__(self) -> None:
        self.topics: dict[str, TopicCounts] = {}
        self.replication_bytes_out = 0

    def of(self, topic: str) -> TopicCounts:
        counts = self.topics.get(topic)
        if counts is None:
            counts = self.topics[topic] = TopicCounts()
        return counts

    def appended(self, topic: str, nbytes: int, messages: int) -> None:
        """A produce append to one partition of `topic`: `nbytes` of batches, `messages` records."""
        counts = self.of(topic)
        counts.bytes_in += nbytes
        counts.messages_in += messages

    def sent(self, topic: str, nbytes: int) -> None:
        """Record bytes of one partition of `topic` in a consumer's (or a share consumer's) fetch response."""
        self.of(topic).bytes_out += nbytes

    def replicated(self, nbytes: int) -> None:
        """Record bytes in a follower's fetch response (not a topic's consumer traffic)."""
        self.replication_bytes_out += nbytes

    def snapshot(self) -> list[tuple[str, int, int, int]]:
        """(topic, bytes in, messages in, bytes out) of every topic, for a scrape from any thread."""
        return [(name, c.bytes_in, c.messages_in, c.bytes_out) for name, c in list(self.topics.items())]
