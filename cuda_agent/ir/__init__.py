"""Capture and the op IR."""
