"""The sampling fleet on Ray: sampler actors (compile and measure, one per GPU), compiles as Ray
tasks on the cluster's CPUs, one ledger shared by the fleet (the compile cache and experience
dedupe), and the learner in the driver, asynchronous (`learner.py`). Ray is the optional extra
`cluster`; nothing here is imported unless a run asks for Ray. The local pool is
`agents/fleet.py`.
"""
