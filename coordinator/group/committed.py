"""What a shard's replicated state held at the high watermark, for the reads Kafka answers there.

Theory of operation
-------------------
The shard replays a write's records as soon as they are appended (runtime.py), so its tables are the
latest state, ahead of the high watermark by whatever is not replicated yet. Writes validate against that
latest state, as Kafka's do. Kafka's reads (an OffsetFetch without require_stable) instead see the state
at the partition's last committed offset, from its snapshot registry, so nobody is told of a change a new
leader could truncate. A `CommittedView` is the part of that which differs from the latest state, for one
table: for each key changed by a record not committed yet, the value the key had at the high watermark
(`None`: absent) and the uncommitted values in log order, each tagged with the offset the high watermark
must reach for it to be committed (the runtime's `replaying_offset`). `advance(committed)` folds in what
the high watermark passed and forgets a key once nothing of it is pending, so the view holds one entry per
uncommitted change and no more; a key it does not hold reads the same at the high watermark as latest.

Keys are two-level, (group id, key within the group), so a whole group's committed entries can be read
(`of_group`) without scanning the others. The view is the shard's, so it goes when the shard is unloaded
(a change of leader, the only thing that truncates), and the next leader's load tags what its high
watermark has not passed yet.
"""

from __future__ import annotations

from collections import deque
from typing import Generic, TypeVar

__all__ = ["CommittedView"]

K = TypeVar("K")
V = TypeVar("V")


class CommittedView(Generic[K, V]):
    """The values of one table at the high watermark, for the keys changed since (module docstring)."""

    __slots__ = ("before", "pending", "_order", "committed")

    def __init__(self) -> None:
        self.before: dict[str, dict[K, V | None]] = {}  # group -> key -> value at the high watermark
        self.pending: dict[tuple[str, K], deque[tuple[int, V | None]]] = {}  # uncommitted values, log order
        self._order: deque[tuple[int, str, K]] = deque()  # (commit offset, group, key), in log order
        self.committed = -1  # the high watermark as last advanced to

    def __len__(self) -> int:
        """Uncommitted changes held (0: the latest state is the committed one)."""
        return len(self._order)

    def change(self, group_id: str, key: K, value: V | None, at: int | None, latest: V | None) -> None:
        """The key's latest value becomes `value` (None: absent) by a record committed at offset `at` (None:
        committed already); `latest` is its value before the change."""
        versions = self.pending.get((group_id, key))
        if versions is not None and (at is None or at <= self.committed):
            # A committed record after uncommitted ones of the same key cannot be, by log order; should it
            # happen, it becomes visible with them, never before them.
            at = versions[-1][0]
        if at is None or at <= self.committed:
            return
        if versions is None:
            versions = self.pending[(group_id, key)] = deque()
            self.before.setdefault(group_id, {})[key] = latest
        versions.append((at, value))
        self._order.append((at, group_id, key))

    def advance(self, committed: int) -> None:
        """The high watermark reached `committed`: what it passed is committed now."""
        if committed <= self.committed:
            return
        self.committed = committed
        order = self._order
        while order and order[0][0] <= committed:
            _, group_id, key = order.popleft()
            versions = self.pending.get((group_id, key))
            if versions is None:
                continue
            before = self.before[group_id]
            while versions and versions[0][0] <= committed:
                before[key] = versions.popleft()[1]
            if not versions:
                del self.pending[(group_id, key)]
                del before[key]
                if not before:
                    del self.before[group_id]

    def committed_value(self, group_id: str, key: K) -> tuple[bool, V | None]:
        """(held, value at the high watermark); not held: the key reads its latest value."""
        before = self.before.get(group_id)
        if before is None or key not in before:
            return False, None
        return True, before[key]

    def get(self, group_id: str, key: K, latest: V | None) -> V | None:
        """The key's value at the high watermark, given its latest one."""
        held, value = self.committed_value(group_id, key)
        return value if held else latest

    def replace_committed(self, group_id: str, key: K, value: V | None) -> None:
        """A change known to be committed that does not take the latest value (a newer record, not yet
        committed, holds it): the key's value at the high watermark, for a key the view holds."""
        self.before[group_id][key] = value

    def of_group(self, group_id: str, latest: dict[K, V]) -> dict[K, V]:
        """The group's entries at the high watermark, given its latest ones."""
        before = self.before.get(group_id)
        if not before:
            return latest
        view = dict(latest)
        for key, value in before.items():
            if value is None:
                view.pop(key, None)
            else:
                view[key] = value
        return view
