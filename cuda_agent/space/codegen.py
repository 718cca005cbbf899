"""Code generation shared by the templates: the prelude, operand indexing, expression bodies.

Templates decide how threads map to data and how partial results combine; this module turns the
plan's arithmetic into C. Shapes are compile-time constants, so the index arithmetic below is
divisions and remainders by constants, which the compiler strength-reduces.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..ir import ops
from ..ir.graph import INDEX_DTYPE, compute_dtype
from ..ir.plan import KernelPlan

PRELUDE = r"""
// ---- cuda-agent prelude (NVRTC has no math headers: no INFINITY/NAN macros) ----
#define CA_INF __int_as_float(0x7f800000)
#define CA_NAN __int_as_float(0x7fffffff)
typedef long long ca_i64;
__device__ __forceinline__ float ca_max(float a, float b) { return (a > b || a != a) ? a : b; }
__device__ __forceinline__ float ca_min(float a, float b) { return (a < b || a != a) ? a : b; }
// Load hints: 0 = plain, 1 = read-only cache (ld.global.nc), 2 = streaming (evict first),
// 3 = keep in L2 (an evict-last cache policy: data a later pass reads again). The CPU
// emulator of the tests (CA_EMULATED) reads plainly.
#ifndef CA_EMULATED
__device__ __forceinline__ unsigned long long ca_keep_policy() {
  unsigned long long q; asm("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(q));
  return q; }
__device__ __forceinline__ float ca_ldk(const float* p) {
  float v; asm("ld.global.L1::evict_last.L2::cache_hint.f32 %0, [%1], %2;"
               : "=f"(v) : "l"(p), "l"(ca_keep_policy())); return v; }
__device__ __forceinline__ float2 ca_ldk2(const float* p) {
  float2 v; asm("ld.global.L1::evict_last.L2::cache_hint.v2.f32 {%0, %1}, [%2], %3;"
                : "=f"(v.x), "=f"(v.y) : "l"(p), "l"(ca_keep_policy())); return v; }
__device__ __forceinline__ float4 ca_ldk4(const float* p) {
  float4 v; asm("ld.global.L1::evict_last.L2::cache_hint.v4.f32 {%0, %1, %2, %3}, [%4], %5;"
                : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w) : "l"(p), "l"(ca_keep_policy()));
  return v; }
#else
static inline float ca_ldk(const float* p) { return *p; }
static inline float2 ca_ldk2(const float* p) { return *reinterpret_cast<const float2*>(p); }
static inline float4 ca_ldk4(const float* p) { return *reinterpret_cast<const float4*>(p); }
#endif
template <int H> __device__ __forceinline__ float ca_ld(const float* p) {
  if (H == 1) return __ldg(p); else if (H == 2) return __ldcs(p);
  else if (H == 3) return ca_ldk(p); else return *p; }
template <int H> __device__ __forceinline__ float2 ca_ld2(const float* p) {
  const float2* q = reinterpret_cast<const float2*>(p);
  if (H == 1) return __ldg(q); else if (H == 2) return __ldcs(q);
  else if (H == 3) return ca_ldk2(p); else return *q; }
template <int H> __device__ __forceinline__ float4 ca_ld4(const float* p) {
  const float4* q = reinterpret_cast<const float4*>(p);
  if (H == 1) return __ldg(q); else if (H == 2) return __ldcs(q);
  else if (H == 3) return ca_ldk4(p); else return *q; }
template <int H> __device__ __forceinline__ void ca_st(float* p, float v) {
  if (H == 1) __stcs(p, v); else *p = v; }
template <int H> __device__ __forceinline__ void ca_st2(float* p, float2 v) {
  if (H == 1) __stcs(reinterpret_cast<float2*>(p), v); else *reinterpret_cast<float2*>(p) = v; }
template <int H> __device__ __forceinline__ void ca_st4(float* p, float4 v) {
  if (H == 1) __stcs(reinterpret_cast<float4*>(p), v); else *reinterpret_cast<float4*>(p) = v; }
"""

HALF_PRELUDE = r"""
// ---- half-precision storage (fp16, bf16), as torch.compile's Inductor keeps it: a load
// converts to float, arithmetic and reductions stay float32, a store rounds to nearest even.
// Bits in an unsigned short (no cuda_fp16.h: NVRTC has no headers); the CPU emulator's shim
// defines the same conversions (ca_f16_bits, ca_f16_value, ca_bf16_bits, ca_bf16_value).
#ifndef CA_EMULATED
__device__ __forceinline__ float ca_f16_f32(unsigned short h) {
  float f; asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h)); return f; }
__device__ __forceinline__ unsigned short ca_f32_f16(float f) {
  unsigned short h; asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f)); return h; }
__device__ __forceinline__ float ca_bf16_f32(unsigned short h) {
  return __uint_as_float(((unsigned)h) << 16); }
__device__ __forceinline__ unsigned short ca_f32_bf16(float f) {
  unsigned short h; asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h) : "f"(f)); return h; }
template <class T> __device__ __forceinline__ T ca_ldkb(const T* p) { return *p; }
template <> __device__ __forceinline__ unsigned short ca_ldkb(const unsigned short* p) {
  unsigned short v; asm("ld.global.L1::evict_last.L2::cache_hint.u16 %0, [%1], %2;"
                        : "=h"(v) : "l"(p), "l"(ca_keep_policy())); return v; }
template <> __device__ __forceinline__ unsigned ca_ldkb(const unsigned* p) {
  unsigned v; asm("ld.global.L1::evict_last.L2::cache_hint.u32 %0, [%1], %2;"
                  : "=r"(v) : "l"(p), "l"(ca_keep_policy())); return v; }
template <> __device__ __forceinline__ uint2 ca_ldkb(const uint2* p) {
  uint2 v; asm("ld.global.L1::evict_last.L2::cache_hint.v2.u32 {%0, %1}, [%2], %3;"
               : "=r"(v.x), "=r"(v.y) : "l"(p), "l"(ca_keep_policy())); return v; }
#else
struct uint2 { unsigned x, y; };
static inline float ca_f16_f32(unsigned short h) { return ca_f16_value(h); }
static inline unsigned short ca_f32_f16(float f) { return (unsigned short)ca_f16_bits(f); }
static inline float ca_bf16_f32(unsigned short h) { return ca_bf16_value(h); }
static inline unsigned short ca_f32_bf16(float f) { return (unsigned short)ca_bf16_bits(f); }
template <class T> static inline T ca_ldkb(const T* p) { return *p; }
#endif
__device__ __forceinline__ float ca_round_f16(float x) { return ca_f16_f32(ca_f32_f16(x)); }
__device__ __forceinline__ float ca_round_bf16(float x) { return ca_bf16_f32(ca_f32_bf16(x)); }
// the element types: a value reads as its float, a float assigned to one is rounded
struct ca_f16 {
  unsigned short b;
  __device__ __forceinline__ operator float() const { return ca_f16_f32(b); }
  __device__ __forceinline__ ca_f16& operator=(float v) { b = ca_f32_f16(v); return *this; } };
struct ca_bf16 {
  unsigned short b;
  __device__ __forceinline__ operator float() const { return ca_bf16_f32(b); }
  __device__ __forceinline__ ca_bf16& operator=(float v) { b = ca_f32_bf16(v); return *this; } };
__device__ __forceinline__ float ca_hf(ca_f16, unsigned short b) { return ca_f16_f32(b); }
__device__ __forceinline__ float ca_hf(ca_bf16, unsigned short b) { return ca_bf16_f32(b); }
__device__ __forceinline__ unsigned short ca_fh(ca_f16, float v) { return ca_f32_f16(v); }
__device__ __forceinline__ unsigned short ca_fh(ca_bf16, float v) { return ca_f32_bf16(v); }
template <int H, class T> __device__ __forceinline__ T ca_ldb(const T* p) {
  if (H == 1) return __ldg(p); else if (H == 2) return __ldcs(p);
  else if (H == 3) return ca_ldkb(p); else return *p; }
// loads of 1, 2 or 4 half elements (2, 4 or 8 bytes) into float registers
#define CA_HALF_IO(T) \
template <int H> __device__ __forceinline__ float ca_ld(const T* p) { \
  return ca_hf(T(), ca_ldb<H>(reinterpret_cast<const unsigned short*>(p))); } \
template <int H> __device__ __forceinline__ float2 ca_ld2(const T* p) { \
  const unsigned u = ca_ldb<H>(reinterpret_cast<const unsigned*>(p)); \
  return make_float2(ca_hf(T(), u & 0xffffu), ca_hf(T(), u >> 16)); } \
template <int H> __device__ __forceinline__ float4 ca_ld4(const T* p) { \
  const uint2 u = ca_ldb<H>(reinterpret_cast<const uint2*>(p)); \
  return make_float4(ca_hf(T(), u.x & 0xffffu), ca_hf(T(), u.x >> 16), \
                     ca_hf(T(), u.y & 0xffffu), ca_hf(T(), u.y >> 16)); } \
template <int H> __device__ __forceinline__ void ca_st(T* p, float v) { \
  unsigned short* q = reinterpret_cast<unsigned short*>(p); \
  if (H == 1) __stcs(q, ca_fh(T(), v)); else *q = ca_fh(T(), v); } \
template <int H> __device__ __forceinline__ void ca_st2(T* p, float2 v) { \
  unsigned* q = reinterpret_cast<unsigned*>(p); \
  const unsigned u = ca_fh(T(), v.x) | ((unsigned)ca_fh(T(), v.y) << 16); \
  if (H == 1) __stcs(q, u); else *q = u; } \
template <int H> __device__ __forceinline__ void ca_st4(T* p, float4 v) { \
  uint2* q = reinterpret_cast<uint2*>(p); \
  uint2 u; u.x = ca_fh(T(), v.x) | ((unsigned)ca_fh(T(), v.y) << 16); \
  u.y = ca_fh(T(), v.z) | ((unsigned)ca_fh(T(), v.w) << 16); \
  if (H == 1) __stcs(q, u); else *q = u; }
CA_HALF_IO(ca_f16)
CA_HALF_IO(ca_bf16)
"""


def prelude(plan: KernelPlan) -> str:
    """The prelude of a kernel of `plan`: with the half-precision conversions where it reads
    or writes a tensor stored in fp16 or bf16 (an fp32 kernel's source stays as it was)."""
    return PRELUDE + HALF_PRELUDE if plan.graph.has_half() else PRELUDE

# Thread-block clusters (Hopper): a kernel declared __cluster_dims__(CL, 1, 1) runs its blocks
# in groups of CL on neighbouring SMs that read each other's shared memory. Inline PTX rather
# than cooperative_groups: NVRTC then needs no headers, and the CPU emulator defines the same
# three names. All threads of every block of the cluster must reach ca_cluster_sync.
CLUSTER_PRELUDE = r"""
__device__ __forceinline__ unsigned ca_cluster_rank() {
  unsigned r; asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r)); return r; }
__device__ __forceinline__ void ca_cluster_sync() {
  asm volatile("barrier.cluster.arrive.release.aligned;\n"
               "barrier.cluster.wait.acquire.aligned;" ::: "memory"); }
// the address of the same shared-memory word in block `rank` of the cluster (a generic pointer)
template <class T> __device__ __forceinline__ const T* ca_cluster_peer(const T* p, unsigned rank) {
  unsigned long long q;
  asm volatile("mapa.u64 %0, %1, %2;" : "=l"(q) : "l"(p), "r"(rank));
  return reinterpret_cast<const T*>(q); }
"""

HINTS = {"default": 0, "ldg": 1, "stream": 2, "keep": 3}
STORE_HINTS = {"default": 0, "stream": 1}


def vec_get(name: str, vec: int, lane: int) -> str:
    """Component `lane` of a float/float2/float4 register."""
    if vec == 1:
        return name
    return f"{name}.{'xyzw'[lane]}"


def vec_type(vec: int) -> str:
    return {1: "float", 2: "float2", 4: "float4"}[vec]


def vec_load(ptr: str, vec: int, hint: int) -> str:
    return {1: f"ca_ld<{hint}>({ptr})", 2: f"ca_ld2<{hint}>({ptr})",
            4: f"ca_ld4<{hint}>({ptr})"}[vec]


def vec_store(ptr: str, values: list[str], hint: int) -> str:
    vec = len(values)
    if vec == 1:
        return f"ca_st<{hint}>({ptr}, {values[0]});"
    ctor = "make_float2" if vec == 2 else "make_float4"
    return f"ca_st{vec}<{hint}>({ptr}, {ctor}({', '.join(values)}));"


def out_offset(plan: KernelPlan, flat: str) -> str:
    """Where the element at flat index `flat` of the kernel's value (row-major in its own
    shape) lies in the output: itself, or, for a plan whose output is stored permuted
    (`KernelPlan.out_perm`), its place in the permuted tensor. Runs of dims that stay
    adjacent and in order are indexed as one."""
    perm = plan.out_perm
    if perm is None:
        return flat
    shape = plan.graph[plan.output].shape
    pshape = [shape[p] for p in perm]
    ostride = {p: math.prod(pshape[j + 1:]) for j, p in enumerate(perm)}
    # runs of the value's dims that are adjacent, in order, in the output too
    runs: list[list[int]] = []
    for d in range(len(shape)):
        if shape[d] == 1:
            continue
        if runs and ostride[runs[-1][-1]] == ostride[d] * shape[d]:
            runs[-1].append(d)
        else:
            runs.append([d])
    terms = []
    for run in runs:
        inner = math.prod(shape[run[-1] + 1:])
        size = math.prod(shape[d] for d in run)
        coord = f"({flat})" if inner == 1 else f"(({flat}) / {inner})"
        if inner * size < math.prod(shape):
            coord = f"({coord} % {size})"
        st = ostride[run[-1]]
        terms.append(coord if st == 1 else f"{coord} * {st}")
    return "(" + " + ".join(terms or ["0"]) + ")"


def out_store(plan: KernelPlan, flat: str, values: list[str], hint: int) -> list[str]:
    """Store `values` (consecutive elements from flat index `flat` of the kernel's value) to
    the output: one vector store, or, where the output is stored permuted, a scalar store per
    element at its place (`out_offset`)."""
    if plan.out_perm is None:
        return [vec_store(f"out + {flat}", values, hint)]
    return [vec_store(f"out + {out_offset(plan, f'({flat}) + {q}' if q else flat)}", [v], hint)
            for q, v in enumerate(values)]


# -- operand indexing ----------------------------------------------------------------------------

@dataclass(frozen=True)
class Group:
    """A flat loop index over a run of F dims: `var` runs over prod(F[dims])."""

    var: str
    dims: tuple[int, ...]


def operand_node(plan: KernelPlan, k: int) -> int:
    """The node through which graph input `k` is read (its reshape, where it is reshaped)."""
    g = plan.graph
    for n in g.live():
        if n.op == "view" and g[n.args[0]].op == "input" and g[n.args[0]].attr("index") == k \
                and plan.fmaps.get(g[n.args[0]].id) is None:
            return n.id
    for n in g.live():
        if n.op == "input" and n.attr("index") == k:
            return n.id
    raise KeyError(k)


def _merged_dims(plan: KernelPlan, nid: int) -> list[tuple[list[int], int]]:
    """The operand's non-broadcast dims as runs of adjacent F dims that are also adjacent in
    its memory, each with the element stride of the run's innermost dim."""
    node = plan.graph[nid]
    shape, fmap = node.shape, plan.fmap(nid)
    strides = [math.prod(shape[j + 1:]) for j in range(len(shape))]
    runs: list[tuple[list[int], int]] = []
    prev = -1
    for j, f in enumerate(fmap):
        if f is None:
            continue
        if runs and runs[-1][0][-1] == f - 1 and strides[prev] == strides[j] * shape[j]:
            runs[-1] = (runs[-1][0] + [f], strides[j])
        else:
            runs.append(([f], strides[j]))
        prev = j
    return runs


def offset_expr(plan: KernelPlan, nid: int, groups: list[Group]) -> str:
    """C expression for the element offset of operand node `nid` at the loop indices `groups`."""
    F = plan.full_shape
    terms: list[str] = []
    for fdims, stride in _merged_dims(plan, nid):
        for grp in groups:
            inside = [d for d in fdims if d in grp.dims]
            if not inside:
                continue
            after = math.prod(F[d] for d in grp.dims if d > inside[-1])
            span = math.prod(F[d] for d in inside)
            total = math.prod(F[d] for d in grp.dims)
            expr = grp.var
            if after > 1:
                expr = f"({expr} / {after})"
            if span * after < total:
                expr = f"({expr} % {span})"
            # the merged run's stride belongs to its innermost dim; scale by what follows it
            inner_after = math.prod(F[d] for d in fdims if d > inside[-1])
            scale = stride * inner_after
            terms.append(expr if scale == 1 else f"{expr} * {scale}")
    return " + ".join(terms) if terms else "0"


def is_unit_stride(plan: KernelPlan, nid: int, grp: Group, vec: int) -> bool:
    """True if consecutive values of `grp.var` (in aligned chunks of `vec`) read consecutive
    elements of the operand: then vector loads are valid."""
    runs = _merged_dims(plan, nid)
    inner = grp.dims[-1]
    for fdims, stride in runs:
        if inner in fdims:
            covered = [d for d in fdims if d in grp.dims]
            span = math.prod(plan.full_shape[d] for d in covered)
            return stride == 1 and fdims[-1] == inner and span % vec == 0
    return False


def is_splat(plan: KernelPlan, nid: int, grp: Group, vec: int) -> bool:
    """True if the operand is constant over every aligned chunk of `vec` values of `grp.var`."""
    fmap = {f for f in plan.fmap(nid) if f is not None}
    block = 1
    for d in reversed(grp.dims):
        if d in fmap:
            break
        block *= plan.full_shape[d]
    return block % vec == 0


def vector_reads_ok(plan: KernelPlan, dims: tuple[int, ...], vec: int) -> bool:
    """Every operand that varies along the reduced dims reads `vec` consecutive steps of the
    loop over `dims` with one load, or is constant over them (computed once per plan)."""
    def check() -> bool:
        grp = Group("v", dims)
        for k in plan.operands:
            nid = operand_node(plan, k)
            if varies_along(plan, nid, plan.reduce_dims) and not (
                    is_unit_stride(plan, nid, grp, vec) or is_splat(plan, nid, grp, vec)):
                return False
        return True
    return plan.cached(("vector_reads_ok", dims, vec), check)


def epilogue_reads(plan: KernelPlan) -> list[int]:
    """Nodes a structured plan's epilogue loads from memory: the inputs it uses as they are,
    and the reshapes of inputs that only fit the iteration space reshaped (a bias (C,) viewed
    as (C, 1, 1)). The anchor's own operands are not among them (its template reads those)."""
    g = plan.graph
    out = []
    for n in plan.live_nodes():
        if n.op == "input" and plan.fmaps.get(n.id) is not None:
            out.append(n.id)
        elif n.op == "view" and g[n.args[0]].op == "input" and \
                plan.fmaps.get(n.args[0], ()) is None:
            out.append(n.id)
    return out


def read_index(plan: KernelPlan, nid: int) -> int:
    """Graph input index behind an `epilogue_reads` node."""
    n = plan.graph[nid]
    return n.attr("index") if n.op == "input" else plan.graph[n.args[0]].attr("index")


def varies_along(plan: KernelPlan, nid: int, dims: tuple[int, ...]) -> bool:
    return any(f in dims for f in plan.fmap(nid) if f is not None)


# -- expression bodies -------------------------------------------------------------------------

def emit_values(plan: KernelPlan, roots: list[int], bound: dict[int, str], fast: bool,
                suffix: str = "") -> tuple[list[str], dict[int, str]]:
    """Statements computing `roots` from the `bound` leaves (node id -> C expression).

    Returns the statements and the name of every computed node. Reductions and inputs must be
    bound by the caller; everything elementwise is computed here, in topological order.
    """
    g = plan.graph
    need: set[int] = set()
    stack = list(roots)
    while stack:
        k = stack.pop()
        if k in need or k in bound:
            continue
        need.add(k)
        stack.extend(g[k].args)
    names = dict(bound)
    stmts: list[str] = []
    for n in g.nodes:
        if n.id not in need:
            continue
        if n.op == "const":
            names[n.id] = ops.float_literal(n.attr("value"))
            continue
        if n.op in ("view", "permute"):  # a permuted input is read at permuted places
            names[n.id] = names[n.args[0]]
            continue
        if n.op in ("input", "reduce", "iota"):
            raise KeyError(f"node %{n.id} ({n.op}) must be bound")
        expr = ops.render(n.op, [names[a] for a in n.args], dict(n.attrs), fast)
        name = f"v{n.id}{suffix}"
        ctype = ops.C_TYPES[n.dtype]
        stmts.append(f"const {ctype} {name} = {expr};")
        names[n.id] = name
    return stmts, names


#: C element types of tensors in memory (a half-precision tensor's elements are its bits:
#: the prelude's ca_f16 and ca_bf16, read as float, rounded when a float is stored)
MEMORY_TYPES = {"float16": "ca_f16", "bfloat16": "ca_bf16"}


def out_ctype(plan: KernelPlan) -> str:
    """C type of the output's elements in memory."""
    if plan.out_dtype == INDEX_DTYPE:
        return "long long"
    return MEMORY_TYPES.get(plan.out_dtype, "float")


def in_ctype(plan: KernelPlan, k: int) -> str:
    """C type of graph input `k`'s elements in registers: float (half-precision inputs
    load as float), or long long for class indices."""
    return ops.C_TYPES[compute_dtype(plan.graph.inputs[k].dtype)]


def in_mtype(plan: KernelPlan, k: int) -> str:
    """C type of graph input `k`'s elements in memory (its kernel parameter's)."""
    return MEMORY_TYPES.get(plan.graph.inputs[k].dtype, in_ctype(plan, k))


def load_scalar(plan: KernelPlan, k: int, offset: str, hint: int) -> str:
    """One element of input `k` (cache hints apply to float loads only)."""
    if in_ctype(plan, k) == "float":
        return f"ca_ld<{hint}>(in{k} + ({offset}))"
    return f"in{k}[{offset}]"


def index_along(plan: KernelPlan, d: int, grp: Group, var: str) -> str:
    """The index along F dim `d` (one of grp.dims) when the flat loop index of `grp` is `var`:
    what an ``iota`` node over `d` evaluates to."""
    F = plan.full_shape
    after = math.prod(F[e] for e in grp.dims if e > d)
    expr = f"({var})" if after == 1 else f"(({var}) / {after})"
    if F[d] * after < math.prod(F[e] for e in grp.dims):
        expr = f"({expr} % {F[d]})"
    return f"(long long){expr}"


def iota_nodes(plan: KernelPlan) -> list[tuple[int, int]]:
    """(node, F dim) of every ``iota`` the kernel computes with."""
    return [(n.id, next(f for f in plan.fmap(n.id) if f is not None))
            for n in plan.live_nodes() if n.op == "iota"]


def kernel_params(plan: KernelPlan) -> str:
    """Every kernel of a candidate takes the same arguments: inputs, output, side outputs (a
    program stage's, `Graph.sides`), workspace."""
    ins = [f"const {in_mtype(plan, k)}* __restrict__ in{k}" for k in plan.operands]
    sides = [f"float* __restrict__ side{j}" for j in range(len(plan.graph.sides))]
    return ", ".join(ins + [f"{out_ctype(plan)}* __restrict__ out"] + sides +
                     ["void* __restrict__ ws"])
