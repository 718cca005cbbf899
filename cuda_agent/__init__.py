"""cuda-agent: writes fast CUDA kernels for PyTorch reference programs by measuring them."""

__version__ = "0.1.0"
