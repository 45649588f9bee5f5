"""Placeholder package; built by a later issue (see ARCHITECTURE.md)."""
