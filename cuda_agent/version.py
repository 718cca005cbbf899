"""The package's version, stamped into reports, stores and caches."""

__version__ = "0.1.0"
