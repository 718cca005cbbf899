"""Scan: cumprod along the last dim of 2097152 rows of 128 fp32 (1 GB).

Rows are short on purpose: a product of many random factors overflows or underflows fp32, so
torch's own fp32 cumprod stops meaning anything on long rows. With 128 factors, the log of a
product is a random walk of 128 steps whose excursions stay far from the end of fp32's range
(|ln| < 88) for every distribution the verifier draws, over all rows; and each product carries
at most 128 roundings, well within the 1e-4 tolerance."""
import torch
import torch.nn as nn

rows = 2097152
length = 128


class Model(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        return torch.cumprod(x, dim=self.dim)


def get_inputs():
    return [torch.randn(rows, length)]


def get_init_inputs():
    return [1]
