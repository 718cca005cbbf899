"""Correctness, the half of the evaluation protocol that makes the reward unhackable.

settings.py: what the host decides (`VerifySettings`, conformance mode's tolerance, the check's
description in reports), without torch. cases.py: what the GPU worker runs (the case pool, the
poisoned outputs, the hashes, the float64 comparison); separable.py and sliceable.py: a
reference too large to run whole, computed a slice at a time.
"""
