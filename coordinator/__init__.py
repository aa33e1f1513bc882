"""Group and transaction coordinators as state machines replayed from compacted internal topics."""
