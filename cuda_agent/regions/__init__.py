"""Whole models: a model split into regions the templates cover and regions left to torch
(`split.py`), each covered region tuned as a problem of its own (`tune.py`), and one drop-in
module that runs them all (`emit.py`)."""
