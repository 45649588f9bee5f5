"""Replay benchmark of the scheduling policies (ease.ml App. A protocol)."""
