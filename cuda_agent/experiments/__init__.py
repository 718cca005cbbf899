"""Experiments over the suites that check the package as a whole rather than one part of it:
the golden outputs (`goldens.py`) that every step of a redesign must leave unchanged."""
