"""Beam pipeline entry points (thin CLIs)."""
