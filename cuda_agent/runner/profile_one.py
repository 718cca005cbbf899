"""Launch one candidate once on its problem's inputs: the process `ncu` profiles.

    python -m cuda_agent.runner.profile_one candidate.json
"""

from __future__ import annotations

import json
import sys

import torch

from ..ir.planning import make_plan
from ..problem import load_problem
from . import launcher


def main(spec_path: str) -> None:
    spec = json.loads(open(spec_path).read())
    problem = load_problem(spec["problem"])
    graph = problem.graph()
    plan = make_plan(graph)
    device = torch.device("cuda", 0)
    model = problem.make_model(device)
    args = problem.make_inputs(device)
    params: dict[str, torch.Tensor] = dict(model.named_parameters())
    params.update(dict(model.named_buffers()))
    tensors = []
    for k in plan.operands:
        gin = graph.inputs[k]
        t = args[gin.position()] if gin.role == "input" else params[gin.state_name()]
        tensors.append(t.detach().contiguous().reshape(plan.operand_shapes[k]))
    out = torch.empty(tuple(plan.out_shape), device=device,
                      dtype=getattr(torch, plan.out_dtype) if plan.out_dtype in (
                          "int64", "float16", "bfloat16") else torch.float32)
    with open(spec["cubin"], "rb") as f:
        kernels = launcher.LoadedKernels(f.read(), spec["launches"], spec["workspace_bytes"],
                                         spec["zero_workspace"], device)
    kernels(tensors, out)
    launcher.synchronize(device)


if __name__ == "__main__":
    main(sys.argv[1])
