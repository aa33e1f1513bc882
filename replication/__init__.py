"""Partition state, timing wheel, purgatory, and (later) follower fetchers and the controller quorum."""
