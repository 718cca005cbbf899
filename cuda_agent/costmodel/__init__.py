"""The analytic cost model: a rendered candidate's time on an H200-class GPU, without running it.

model.py (the streaming kernels, the hardware counters it would show), gemm.py and attention.py
(the tiled products and attention), folds.py (its sweep-fitted constants, refitted per fold),
predict.py (the time of a space's configurations: the agents' prior and the "prior" strategy
read it). The simulated device (`runner/sim.py`) serves it behind the Device interface.
"""
