"""Measuring candidates: the devices behind one interface (`devices.Device`: evaluate built
candidates, report `records.Measurement`s, never decide what to try).

devices.py (the interface and the cuda supervisor), worker.py (the GPU worker process, the unit
of isolation), launcher.py (kernel launches through the CUDA driver API; self-contained, copied
into every model_new.py), memory.py (the worker's GPU footprint), timing.py, baselines.py (the
torch baselines), counters.py and profile_one.py (Nsight Compute), sim.py (the analytic model,
`costmodel/`, as a device), replay.py (recorded sweeps as a device), records.py.
"""
