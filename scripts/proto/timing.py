"""The prototypes' timer: median of CUDA-event timings, 3 warm-up runs, L2 flushed (a 512 MiB
write) before each timed run."""
import torch

_flush = None


def timed(fn, reps: int = 15) -> float:
    global _flush
    if _flush is None:
        _flush = torch.empty(512 * 2**20 // 4, device="cuda")
    times = []
    for _ in range(3):
        fn()
    for _ in range(reps):
        _flush.zero_()
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record(); fn(); e.record(); e.synchronize()
        times.append(s.elapsed_time(e))
    return sorted(times)[len(times) // 2]
