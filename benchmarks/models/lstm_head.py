"""An LSTM over a sequence with a linear head on its last step, a ReLU and a log-softmax over
the classes. The model issue 50 found refused (`unsupported op lstm`): the LSTM is cuDNN's."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, features=64, hidden=256, classes=32):
        super().__init__()
        self.lstm = nn.LSTM(features, hidden, num_layers=1, batch_first=True)
        self.head = nn.Linear(hidden, classes)

    def forward(self, x):
        out, _ = self.lstm(x)
        return torch.log_softmax(torch.relu(self.head(out[:, -1])), dim=-1)


def get_inputs():
    return [torch.randn(16, 32, 64)]


def get_init_inputs():
    return []
