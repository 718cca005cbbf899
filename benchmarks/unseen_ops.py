"""Capture and plan operators written for the purpose, none from this repository's suites:
KernelBench-style single ops, fused level-2 chains and common model pieces, in three batches
(`BATCHES`). Each is captured (`ir.capture`) and planned (`ir.planning.make_plan`) on the CPU; the
run lists the plan's kinds or the one-line reason it was refused. Nothing is compiled or timed:
this finds what a user's program would be refused for, before any GPU is involved.

    python -m benchmarks.unseen_ops --out benchmarks/results/DAY-unseen-ops-cpu.json
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F

from cuda_agent.ir.capture import capture
from cuda_agent.ir.planning import make_plan


def M(fwd, init=None):
    """A Model whose forward is `fwd(self, *inputs)`, `init(self)` adding its modules."""
    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            if init:
                init(self)

        def forward(self, *a):
            return fwd(self, *a)
    return Model


def mk(init, fwd):
    return M(fwd, init)


def no(s):
    pass


x4 = lambda: [torch.randn(8, 16, 32, 32)]  # noqa: E731
x2 = lambda: [torch.randn(64, 256)]  # noqa: E731
x3 = lambda: [torch.randn(16, 64, 128)]  # noqa: E731
r4 = lambda *s: (lambda: [torch.randn(*s)])  # noqa: E731
r = r4

SINGLE = {
 "hardsigmoid": (M(lambda s, x: F.hardsigmoid(x)), x2),
 "softplus": (M(lambda s, x: F.softplus(x, beta=2.0, threshold=10.0)), x2),
 "selu": (M(lambda s, x: F.selu(x)), x2),
 "elu": (M(lambda s, x: F.elu(x, alpha=0.5)), x2),
 "gelu_tanh": (M(lambda s, x: F.gelu(x, approximate="tanh")), x2),
 "logsigmoid": (M(lambda s, x: F.logsigmoid(x)), x2),
 "softsign": (M(lambda s, x: F.softsign(x)), x2),
 "hardswish": (M(lambda s, x: F.hardswish(x)), x2),
 "celu": (M(lambda s, x: F.celu(x, 0.7)), x2),
 "rrelu_eval": (M(lambda s, x: F.leaky_relu(x, 0.05)), x2),
 "min_dim": (M(lambda s, x: torch.min(x, dim=1)[0]), x3),
 "argmin_dim": (M(lambda s, x: torch.argmin(x, dim=2)), x3),
 "cumsum_reverse": (M(lambda s, x: torch.cumsum(x.flip(1), 1).flip(1)), x2),
 "cumprod": (M(lambda s, x: torch.cumprod(x, dim=1)), x2),
 "masked_cumsum": (M(lambda s, x: torch.cumsum(x * (x > 0), dim=1)), x2),
 "kldiv": (M(lambda s, p, q: F.kl_div(torch.log(p), q, reduction="batchmean")),
           lambda: [torch.randn(64, 256).softmax(-1), torch.randn(64, 256).softmax(-1)]),
 "smooth_l1": (M(lambda s, a, b: F.smooth_l1_loss(a, b)), lambda: [torch.randn(64, 256), torch.randn(64, 256)]),
 "hinge": (M(lambda s, a, b: torch.mean(torch.clamp(1 - a * b, min=0))), lambda: [torch.randn(64, 256), torch.randn(64, 256)]),
 "triplet": (M(lambda s, a, p, n: F.triplet_margin_loss(a, p, n, margin=1.0)), lambda: [torch.randn(64, 256) for _ in range(3)]),
 "avgpool1d": (M(lambda s, x: F.avg_pool1d(x, 4, 2, 1)), x3),
 "maxpool1d": (M(lambda s, x: F.max_pool1d(x, 4, 2, 1, dilation=2)), x3),
 "adaptive_avg2d": (M(lambda s, x: F.adaptive_avg_pool2d(x, 1)), x4),
 "adaptive_avg2d_4": (M(lambda s, x: F.adaptive_avg_pool2d(x, 4)), x4),
 "matmul_AT_B": (M(lambda s, a, b: a.T @ b), lambda: [torch.randn(256, 128), torch.randn(256, 64)]),
 "matmul_A_BT": (M(lambda s, a, b: a @ b.T), lambda: [torch.randn(128, 256), torch.randn(64, 256)]),
 "einsum_bij_jk": (M(lambda s, a, b: torch.einsum("bij,jk->bik", a, b)), lambda: [torch.randn(4, 64, 32), torch.randn(32, 48)]),
 "layernorm_2dims": (M(lambda s, x: s.ln(x), lambda s: setattr(s, "ln", nn.LayerNorm((32, 32)))), x4),
 "rmsnorm_module": (M(lambda s, x: s.n(x), lambda s: setattr(s, "n", nn.RMSNorm(256))), x2),
 "groupnorm_module": (M(lambda s, x: s.n(x), lambda s: setattr(s, "n", nn.GroupNorm(4, 16))), x4),
 "instnorm_affine": (M(lambda s, x: s.n(x), lambda s: setattr(s, "n", nn.InstanceNorm2d(16, affine=True))), x4),
 "conv_gelu_gap": (M(lambda s, x: F.gelu(s.c(x)).mean(dim=(2, 3)), lambda s: setattr(s, "c", nn.Conv2d(16, 32, 3))), x4),
 "gemm_sigmoid_sum_lse": (M(lambda s, x: torch.logsumexp(torch.sigmoid(s.l(x)).sum(dim=1, keepdim=True), dim=0), lambda s: setattr(s, "l", nn.Linear(256, 128))), x2),
 "gemm_max_sub_gelu": (M(lambda s, x: F.gelu((lambda y: y - y.mean(dim=1, keepdim=True))(torch.max(s.l(x), dim=1, keepdim=True).values)), lambda s: setattr(s, "l", nn.Linear(256, 128))), x2),
 "convT_bn_tanh_eval": (M(lambda s, x: torch.tanh(s.b(s.c(x))), lambda s: (setattr(s, "c", nn.ConvTranspose2d(16, 8, 3, stride=2)), setattr(s, "b", nn.BatchNorm2d(8)))), x4),
 "conv_mish_mish": (M(lambda s, x: F.mish(F.mish(s.c(x))), lambda s: setattr(s, "c", nn.Conv2d(16, 16, 3, padding=1))), x4),
 "conv3d_softmax_max": (M(lambda s, x: F.max_pool3d(torch.softmax(s.c(x), dim=1), 2), lambda s: setattr(s, "c", nn.Conv3d(3, 8, 3))), lambda: [torch.randn(2, 3, 8, 16, 16)]),
 "matmul_dropout_eval_mean_softmax": (M(lambda s, x: torch.softmax(s.d(s.l(x)).mean(dim=1, keepdim=True), dim=1), lambda s: (setattr(s, "l", nn.Linear(256, 128)), setattr(s, "d", nn.Dropout(0.0)))), x2),
 "scaled_residual": (M(lambda s, x: (lambda y: y * 0.5 + y.detach())(s.l(x)), lambda s: setattr(s, "l", nn.Linear(256, 128))), x2),
 "cosine_sim_loss": (M(lambda s, a, b: torch.mean(1 - F.cosine_similarity(a, b, dim=1))), lambda: [torch.randn(64, 256), torch.randn(64, 256)]),
 "frobenius_norm_div": (M(lambda s, x: x / torch.norm(x, p="fro")), x2),
 "var_unbiased": (M(lambda s, x: torch.var(x, dim=1)), x2),
 "std_keepdim": (M(lambda s, x: x.std(dim=-1, keepdim=True)), x3),
 "where_clamp": (M(lambda s, x: torch.where(x > 0, x, torch.zeros_like(x)).clamp(max=1.0)), x2),
 "tril_matmul": (M(lambda s, a, b: torch.tril(a @ b)), lambda: [torch.randn(128, 128), torch.randn(128, 128)]),
 "diag_matmul": (M(lambda s, a, b: torch.diag(a) @ b), lambda: [torch.randn(128), torch.randn(128, 64)]),
 "sum_dim0": (M(lambda s, x: x.sum(dim=0)), x3),
 "prod_dim": (M(lambda s, x: x.prod(dim=1)), lambda: [torch.rand(64, 32) + 0.5]),
 "logsumexp": (M(lambda s, x: torch.logsumexp(x, dim=1)), x2),
 "log_softmax_dim0": (M(lambda s, x: F.log_softmax(x, dim=0)), x2),
 "argmax_flat_keepdim": (M(lambda s, x: torch.argmax(x, dim=-1, keepdim=True)), x3),
 "swish_bias_groupnorm": (M(lambda s, x: s.g(torch.sigmoid(s.l(x)) * s.l(x) + s.bias), lambda s: (setattr(s, "l", nn.Linear(256, 128)), setattr(s, "bias", nn.Parameter(torch.randn(128))), setattr(s, "g", nn.GroupNorm(8, 128)))), x2),
 "lstm_like_gates": (M(lambda s, x, h: torch.sigmoid(x) * torch.tanh(h) + (1 - torch.sigmoid(x)) * h), lambda: [torch.randn(64, 256), torch.randn(64, 256)]),
}

CHAINS = {
 "conv_sub_hardswish_maxpool_mish": (mk(lambda s: setattr(s,'c',nn.Conv2d(3,16,3)), lambda s,x: F.mish(F.max_pool2d(F.hardswish(s.c(x)-0.5),2))), r4(8,3,32,32)),
 "convT3d_sum_layernorm_avgpool_gelu": (mk(lambda s: (setattr(s,'c',nn.ConvTranspose3d(4,8,3,stride=2,padding=1,output_padding=1)), setattr(s,'ln',nn.LayerNorm(8)), setattr(s,'w',nn.Parameter(torch.tensor(1.0)))), lambda s,x: F.gelu(F.avg_pool3d(s.ln((s.c(x)+s.w).permute(0,2,3,4,1)).permute(0,4,1,2,3),2))), r4(2,4,4,8,8)),
 "gemm_bn_gelu_groupnorm_mean_relu": (mk(lambda s: (setattr(s,'l',nn.Linear(64,128)), setattr(s,'bn',nn.BatchNorm1d(128)), setattr(s,'gn',nn.GroupNorm(8,128))), lambda s,x: F.relu(s.gn(F.gelu(s.bn(s.l(x)))).mean(dim=1,keepdim=True))), r4(32,64)),
 "conv_min_tanh_tanh": (mk(lambda s: setattr(s,'c',nn.Conv2d(3,16,3)), lambda s,x: torch.tanh(torch.tanh(torch.min(s.c(x),dim=1,keepdim=True)[0]))), r4(8,3,32,32)),
 "conv3d_softmax_maxpool_maxpool": (mk(lambda s: setattr(s,'c',nn.Conv3d(3,16,3)), lambda s,x: F.max_pool3d(F.max_pool3d(torch.softmax(s.c(x),dim=1),2),2)), r4(2,3,10,18,18)),
 "gemm_scale_hardtanh_gelu": (mk(lambda s: setattr(s,'l',nn.Linear(64,128)), lambda s,x: F.gelu(F.hardtanh(s.l(x)*0.5,-2,2))), r4(32,64)),
 "conv_relu_biasadd": (mk(lambda s: (setattr(s,'c',nn.Conv2d(3,16,3)), setattr(s,'b',nn.Parameter(torch.randn(16,1,1)))), lambda s,x: F.relu(s.c(x))+s.b), r4(8,3,32,32)),
 "convT2d_gap_bias_lse_sum_mul": (mk(lambda s: (setattr(s,'c',nn.ConvTranspose2d(3,16,3)), setattr(s,'b',nn.Parameter(torch.randn(16,1,1)))), lambda s,x: (torch.logsumexp(torch.mean(s.c(x),dim=(2,3),keepdim=True)+s.b,dim=1,keepdim=True).sum(dim=(2,3))*10.0)), r4(8,3,16,16)),
 "matmul_sum_max_avgpool_lse": (mk(lambda s: setattr(s,'l',nn.Linear(64,32)), lambda s,x: torch.logsumexp(torch.max(torch.sum(s.l(x),dim=1,keepdim=True),dim=1,keepdim=True)[0],dim=1,keepdim=True)), r4(32,64)),
 "exclusive_cumsum": (mk(no, lambda s,x: torch.cumsum(x,dim=1)-x), r4(16,100)),
 "tensor3d_matrix": (mk(no, lambda s,a,b: torch.matmul(a,b)), lambda: [torch.randn(4,32,16), torch.randn(16,24)]),
 "matvec": (mk(no, lambda s,a,b: torch.matmul(a,b)), lambda: [torch.randn(64,128), torch.randn(128,1)]),
 "triu_matmul": (mk(no, lambda s,a,b: torch.triu(torch.matmul(a,b))), lambda: [torch.triu(torch.randn(64,64)), torch.triu(torch.randn(64,64))]),
 "einsum_4d": (mk(no, lambda s,a,b: torch.einsum("bijl,lk->bijk",a,b)), lambda: [torch.randn(2,4,8,16), torch.randn(16,12)]),
 "l1norm_manual": (mk(no, lambda s,x: x/torch.sum(torch.abs(x),dim=1,keepdim=True)), r4(16,100)),
 "rmsnorm_manual": (mk(no, lambda s,x: x/torch.sqrt(torch.mean(x**2,dim=1,keepdim=True)+1e-5)), r4(8,16,10,10)),
 "instancenorm_fn": (mk(no, lambda s,x: F.instance_norm(x)), r4(4,8,16,16)),
 "swish": (mk(no, lambda s,x: x*torch.sigmoid(x)), r4(16,100)),
 "huber": (mk(no, lambda s,a,b: F.smooth_l1_loss(a,b)), lambda: [torch.randn(32,64), torch.randn(32,64)]),
 "cross_entropy": (mk(no, lambda s,a,t: F.cross_entropy(a,t)), lambda: [torch.randn(32,10), torch.randint(0,10,(32,))]),
 "depthwise_separable": (mk(lambda s: (setattr(s,'d',nn.Conv2d(8,8,3,padding=1,groups=8)), setattr(s,'p',nn.Conv2d(8,16,1))), lambda s,x: s.p(s.d(x))), r4(4,8,16,16)),
 "mlp": (mk(lambda s: setattr(s,'net',nn.Sequential(nn.Linear(64,128),nn.ReLU(),nn.Linear(128,32))), lambda s,x: s.net(x)), r4(32,64)),
 "conv_groupnorm_scale_maxpool_clamp": (mk(lambda s: (setattr(s,'c',nn.Conv2d(3,16,3)), setattr(s,'gn',nn.GroupNorm(4,16)), setattr(s,'sc',nn.Parameter(torch.ones(16,1,1)))), lambda s,x: torch.clamp(F.max_pool2d(s.gn(s.c(x))*s.sc,2),0,1)), r4(8,3,32,32)),
 "gemm_sigmoid_scaling_residualadd": (mk(lambda s: setattr(s,'l',nn.Linear(64,128)), lambda s,x: (lambda y: torch.sigmoid(y)*2.0+y)(s.l(x))), r4(32,64)),
 "conv_hardswish_relu": (mk(lambda s: setattr(s,'c',nn.Conv2d(3,16,3)), lambda s,x: F.relu(F.hardswish(s.c(x)))), r4(8,3,32,32)),
 "bmm_instancenorm_sum_residual_mul": (mk(lambda s: (setattr(s,'l',nn.Linear(64,128)), setattr(s,'inn',nn.InstanceNorm2d(128))), lambda s,x,y: ((s.inn(s.l(x).unsqueeze(1).unsqueeze(1)).squeeze(1).squeeze(1))+y)*y), lambda: [torch.randn(32,64), torch.randn(32,128)]),
 "matmul_div_sum_scale": (mk(lambda s: setattr(s,'w',nn.Parameter(torch.randn(32,64))), lambda s,x: torch.sum(torch.matmul(x,s.w.T)/2,dim=1,keepdim=True)*1.5), r4(16,64)),
 "convT_maxpool_hardtanh_mean_tanh": (mk(lambda s: setattr(s,'c',nn.ConvTranspose2d(3,16,4,stride=2,padding=1)), lambda s,x: torch.tanh(torch.mean(F.hardtanh(F.max_pool2d(s.c(x),2),-1,1),dim=(2,3),keepdim=True))), r4(8,3,16,16)),
 "argmax_dim1": (mk(no, lambda s,x: torch.argmax(x,dim=1)), r4(16,32,20)),
 "max_dim2": (mk(no, lambda s,x: torch.max(x,dim=2)[0]), r4(16,32,20)),
 "mean_dim0": (mk(no, lambda s,x: torch.mean(x,dim=0)), r4(16,32,20)),
 "prod_dim1": (mk(no, lambda s,x: torch.prod(x,dim=1)), lambda: [torch.rand(16,8,20)+0.5]),
 "softmax_dim_neg2": (mk(no, lambda s,x: torch.softmax(x,dim=-2)), r4(16,32,20)),
 "maxpool3d": (mk(no, lambda s,x: F.max_pool3d(x,3,2,1,dilation=2)), r4(2,4,16,16,16)),
 "avgpool3d": (mk(no, lambda s,x: F.avg_pool3d(x,3,2,1)), r4(2,4,16,16,16)),
 "convT1d": (mk(lambda s: setattr(s,'c',nn.ConvTranspose1d(8,16,5,stride=2,padding=1,dilation=2)), lambda s,x: s.c(x)), r4(4,8,64)),
 "conv_asym_pad": (mk(lambda s: setattr(s,'c',nn.Conv2d(3,16,(3,5),stride=(2,1),padding=(1,2),dilation=(2,1))), lambda s,x: s.c(x)), r4(4,3,32,32)),
 "addmm": (mk(lambda s: setattr(s,'b',nn.Parameter(torch.randn(32))), lambda s,x,w: torch.addmm(s.b,x,w)), lambda: [torch.randn(16,64), torch.randn(64,32)]),
 "baddbmm": (mk(no, lambda s,c,a,b: torch.baddbmm(c,a,b,alpha=0.5,beta=2.0)), lambda: [torch.randn(4,8,12), torch.randn(4,8,16), torch.randn(4,16,12)]),
 "sdpa_causal": (mk(no, lambda s,q,k,v: F.scaled_dot_product_attention(q,k,v,is_causal=True)), lambda: [torch.randn(2,4,32,16) for _ in range(3)]),
 "gelu_exact_erf_manual": (mk(no, lambda s,x: 0.5*x*(1+torch.erf(x/1.4142135623730951))), r4(16,100)),
 "newgelu_tanh_manual": (mk(no, lambda s,x: 0.5*x*(1.0+torch.tanh(0.7978845608*(x+0.044715*torch.pow(x,3.0))))), r4(16,100)),
 "leaky_relu_then_sum_all": (mk(no, lambda s,x: F.leaky_relu(x,0.2).sum()), r4(16,100)),
 "masked_fill_softmax": (mk(no, lambda s,x: torch.softmax(x.masked_fill(x < -1.0, float('-inf')), dim=-1)), r4(16,100)),
 "clamp_min_max_tensor": (mk(no, lambda s,x,y: torch.maximum(x,y).clamp_min(0.1)), lambda: [torch.randn(16,100), torch.randn(16,100)]),
 "x_pow_scalar": (mk(no, lambda s,x: torch.pow(x.abs()+1, 2.5)), r4(16,100)),
}

PIECES = {
 "l2_normalize": (mk(no, lambda s,x: F.normalize(x, dim=1)), r(32,100)),
 "glu": (mk(no, lambda s,x: F.glu(x, dim=-1)), r(32,100)),
 "chunk_gate": (mk(no, lambda s,x: (lambda a,b: a*torch.sigmoid(b))(*x.chunk(2,dim=-1))), r(32,100)),
 "cat_relu": (mk(no, lambda s,a,b: F.relu(torch.cat([a,b],dim=1))), lambda: [torch.randn(8,16,10), torch.randn(8,24,10)]),
 "flatten_linear": (mk(lambda s: (setattr(s,'c',nn.Conv2d(3,8,3)), setattr(s,'l',nn.Linear(8*14*14,10))), lambda s,x: s.l(torch.flatten(F.relu(s.c(x)),1))), r(4,3,16,16)),
 "gap_mean23": (mk(lambda s: setattr(s,'c',nn.Conv2d(3,8,3)), lambda s,x: F.relu(s.c(x)).mean(dim=[2,3])), r(4,3,16,16)),
 "transpose_contig_scale": (mk(no, lambda s,x: x.transpose(1,2).contiguous()*2.0), r(8,16,32)),
 "interp_nearest": (mk(no, lambda s,x: F.interpolate(x, scale_factor=2, mode="nearest")), r(2,4,8,8)),
 "interp_bilinear": (mk(no, lambda s,x: F.interpolate(x, scale_factor=2, mode="bilinear", align_corners=False)), r(2,4,8,8)),
 "pad_conv": (mk(lambda s: setattr(s,'c',nn.Conv2d(3,8,3)), lambda s,x: s.c(F.pad(x,(1,1,1,1)))), r(4,3,16,16)),
 "pixel_shuffle": (mk(no, lambda s,x: F.pixel_shuffle(x,2)), r(2,16,8,8)),
 "embedding": (mk(lambda s: setattr(s,'e',nn.Embedding(100,32)), lambda s,i: s.e(i)), lambda: [torch.randint(0,100,(8,16))]),
 "gather_dim1": (mk(no, lambda s,x,i: torch.gather(x,1,i)), lambda: [torch.randn(8,32), torch.randint(0,32,(8,4))]),
 "clamp_tensor_bounds": (mk(no, lambda s,x,lo,hi: torch.clamp(x,lo,hi)), lambda: [torch.randn(8,32), -torch.rand(8,32), torch.rand(8,32)]),
 "softmax_channels_after_conv": (mk(lambda s: setattr(s,'c',nn.Conv2d(3,8,3)), lambda s,x: torch.softmax(s.c(x),dim=1)), r(4,3,16,16)),
 "dropout_eval_module": (mk(lambda s: (setattr(s,'l',nn.Linear(32,32)), setattr(s,'d',nn.Dropout(0.5)), s.eval()), lambda s,x: s.d(F.relu(s.l(x)))), r(8,32)),
 "gru_cell_like": (mk(lambda s: (setattr(s,'wi',nn.Linear(32,96)), setattr(s,'wh',nn.Linear(32,96))), lambda s,x,h: (lambda gi,gh: (lambda r_,z,n: (1-z)*n+z*h)(torch.sigmoid(gi[:,:32]+gh[:,:32]), torch.sigmoid(gi[:,32:64]+gh[:,32:64]), torch.tanh(gi[:,64:]+torch.sigmoid(gi[:,:32]+gh[:,:32])*gh[:,64:])))(s.wi(x), s.wh(h))), lambda: [torch.randn(8,32), torch.randn(8,32)]),
 "var_mean_pair": (mk(no, lambda s,x: (lambda vm: vm[0]+vm[1])(torch.var_mean(x,dim=1))), r(8,32)),
 "std_unbiased_false": (mk(no, lambda s,x: torch.std(x,dim=-1,unbiased=False)), r(8,32)),
 "amax_amin": (mk(no, lambda s,x: torch.amax(x,dim=1)-torch.amin(x,dim=1)), r(8,32,5)),
 "logical_mask_sum": (mk(no, lambda s,x: ((x>0)&(x<1)).float().sum(dim=1)), r(8,32)),
 "sum_all_keepdim_div": (mk(no, lambda s,x: x/x.sum()), r(8,32)),
 "cumsum_dim0": (mk(no, lambda s,x: torch.cumsum(x,dim=0)), r(64,32)),
 "cummax": (mk(no, lambda s,x: torch.cummax(x,dim=1)[0]), r(8,32)),
 "rsqrt_eps": (mk(no, lambda s,x: torch.rsqrt(x.pow(2).mean(-1,keepdim=True)+1e-6)*x), r(8,32)),
 "conv1d_relu_maxpool1d": (mk(lambda s: setattr(s,'c',nn.Conv1d(4,8,3)), lambda s,x: F.max_pool1d(F.relu(s.c(x)),2)), r(4,4,64)),
 "linear_no_bias_sum": (mk(lambda s: setattr(s,'l',nn.Linear(32,16,bias=False)), lambda s,x: s.l(x).sum(dim=1)), r(8,32)),
 "bias_gelu_residual_layernorm": (mk(lambda s: (setattr(s,'l',nn.Linear(32,32)), setattr(s,'ln',nn.LayerNorm(32))), lambda s,x: s.ln(F.gelu(s.l(x))+x)), r(8,32)),
 "attention_manual_masked": (mk(no, lambda s,q,k,v: torch.softmax((q@k.transpose(-2,-1))/4.0 + torch.triu(torch.full((16,16), float('-inf')),1), dim=-1)@v), lambda: [torch.randn(2,4,16,16) for _ in range(3)]),
 "einsum_scores_masked_softmax": (mk(no, lambda s,q,k: torch.softmax((lambda t: t.masked_fill(t < -3.0, float('-inf')))(torch.einsum("bhqd,bhkd->bhqk", q, k)), dim=-1)), lambda: [torch.randn(2,4,64,32), torch.randn(2,4,64,32)]),
 "attention_projections": (mk(lambda s: [setattr(s, n, nn.Linear(64, 64)) for n in "qkv"], lambda s,x: F.scaled_dot_product_attention(*[getattr(s, n)(x).view(2,32,4,16).transpose(1,2) for n in "qkv"])), r(2,32,64)),
 "attention_with_output_projection": (mk(lambda s: [setattr(s, n, nn.Linear(64, 64)) for n in "qkvo"], lambda s,x: s.o(F.scaled_dot_product_attention(*[getattr(s, n)(x).view(2,32,4,16).transpose(1,2) for n in "qkv"]).transpose(1,2).reshape(2,32,64))), r(2,32,64)),
 "silu_mul_down": (mk(lambda s: (setattr(s,'g',nn.Linear(32,64,bias=False)), setattr(s,'u',nn.Linear(32,64,bias=False))), lambda s,x: F.silu(s.g(x))*s.u(x)), r(8,32)),
}

BATCHES = {"single": SINGLE, "chains": CHAINS, "pieces": PIECES}


def run(batches: dict[str, dict]) -> list[dict]:
    rows = []
    for batch, cases in batches.items():
        for name, (cls, inputs) in cases.items():
            row = {"batch": batch, "operator": name}
            try:
                plan = make_plan(capture(cls, [], inputs))
                program = getattr(plan, "program", None)
                row["kinds"] = [st.plan.kind for st in program.stages] if program else [plan.kind]
            except Exception as e:  # noqa: BLE001 - a refusal is the finding
                row["refused"] = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
            rows.append(row)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    rows = run(BATCHES)
    for row in rows:
        print(f"{row['batch']:7s} {row['operator']:38s} "
              + (f"refused: {row['refused'][:110]}" if "refused" in row else str(row["kinds"])))
    refused = [r for r in rows if "refused" in r]
    print(f"{len(rows)} operators, {len(refused)} refused")
    if args.out:
        args.out.write_text(json.dumps({"date": time.strftime("%Y-%m-%d"), "device": "cpu",
                                        "torch": torch.__version__, "operators": len(rows),
                                        "refused": len(refused), "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
