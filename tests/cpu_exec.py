"""Run a rendered candidate on the CPU: a tiny CUDA emulator for tests without a GPU.

The kernel source is compiled as C++20 with a shim that maps CUDA's vocabulary onto the host:
one fiber per CUDA thread of a block on the host thread of the launch (blocks run one after
another), `__syncthreads` a block-wide barrier at which the fibers switch, warp shuffles an
exchange through a per-warp slot array between two warp barriers, `__shared__` a
function-static (shared by the block's threads). It is slow and
only fit for small shapes, but it executes the generated code itself, so indexing, guards,
barriers and scan order are checked against torch on a machine without a GPU.

Limits: every thread of a warp must reach each shuffle (true of the templates' warp-uniform
code). Blocks run one after another, so a protocol that waits on another block would hang;
last-block tickets (`atomicAdd`, `__threadfence`) work, as blocks finish in order.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import re
import shutil
import subprocess
import tempfile
import threading
from pathlib import Path

import numpy as np

ABI = r"""
struct dim3_ { unsigned x, y, z; };
// what the runtime hands each emulated thread: its indices and its block's barriers, shuffle
// slots, mma deposits and dynamic shared memory (and the cluster's)
struct ca_ctx {
  dim3_ thread, block;
  void* block_barrier; void** warp_barriers; float* slots; unsigned* mma_a; unsigned* mma_b;
  float* dyn_smem; unsigned rank; void* cluster_barrier; float* const* cluster_bases;
};
struct ca_grid { unsigned gx, gy, gz, threads, cluster; unsigned long smem_floats; };
typedef void (*ca_body_t)(const ca_ctx*, void*);
typedef void (*ca_launch_t)(const ca_grid*, ca_body_t, void*);
typedef void (*ca_wait_t)(void*);
"""

# The threads, barriers and buffers of a launch: compiled once (`_runtime`), not into every
# kernel's library (their templates were about half of each kernel's compile time). A kernel
# library gets `ca_rt_launch` and `ca_rt_wait` as arguments of its `ca_run`.
#
# The emulated threads of a block (of a cluster's blocks) are fibers on the host thread that
# runs the launch (ucontext), switched at barriers: a barrier is reached by every thread before
# any goes past it, as on the GPU. One OS thread per emulated thread, meeting at std::barriers,
# spent most of a large block's time switching between hundreds of threads on a 2-core machine
# (and more the busier the machine). A fiber's thread-locals of the kernel's library (its
# indices, barriers, copy queue) are kept on its own stack across a wait (the shim's `ca_sync`).
RUNTIME = r"""
#include <sys/mman.h>
#include <ucontext.h>
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>
""" + ABI + r"""
// switching fibers: on x86-64 the callee-saved registers and the stack pointer (swapcontext
// also saves the signal mask, a system call per switch, most of a large block's time)
#if defined(__x86_64__)
extern "C" void ca_fswitch(void** save_sp, void* to_sp);
asm(R"(
  .text
  .globl ca_fswitch
  .hidden ca_fswitch
  .type ca_fswitch, @function
ca_fswitch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size ca_fswitch, .-ca_fswitch
)");
#define CA_FAST_SWITCH 1
#endif
namespace {
struct ca_fbar { unsigned expected, arrived, phase; };
struct ca_sched {
#ifdef CA_FAST_SWITCH
  void* main_sp = nullptr;
  std::vector<void*> sp;
#else
  ucontext_t main;
  std::vector<ucontext_t> fib;
#endif
  std::vector<char> done;
  unsigned cur = 0;
  ca_body_t body = nullptr;
  void* user = nullptr;
  ca_ctx* ctxs = nullptr;
};
thread_local ca_sched* ca_S = nullptr;
const size_t CA_STACK = size_t(1) << 20;  // per emulated thread; the lowest page a guard
// the scheduler runs fiber `i` until it waits or ends; a fiber gives the host thread back
inline void ca_run_fiber(ca_sched* s, unsigned i) {
  s->cur = i;
#ifdef CA_FAST_SWITCH
  ca_fswitch(&s->main_sp, s->sp[i]);
#else
  swapcontext(&s->main, &s->fib[i]);
#endif
}
inline void ca_yield(ca_sched* s, unsigned me) {
#ifdef CA_FAST_SWITCH
  ca_fswitch(&s->sp[me], s->main_sp);
#else
  swapcontext(&s->fib[me], &s->main);
#endif
}
#ifdef CA_FAST_SWITCH
[[noreturn]] void ca_fiber_entry() {
  ca_sched* s = ca_S;
  const unsigned i = s->cur;
  s->body(&s->ctxs[i], s->user);
  s->done[i] = 1;
  void* dead;
  ca_fswitch(&dead, s->main_sp);  // never resumed
  std::abort();
}
// a fresh fiber's stack: six zero registers for ca_fswitch to pop, then its entry as the
// return address, 16-byte aligned as a call leaves it
void ca_start_fiber(ca_sched* s, unsigned i, char* lo, size_t size) {
  uintptr_t top = (reinterpret_cast<uintptr_t>(lo) + size) & ~uintptr_t(15);
  void** a = reinterpret_cast<void**>(top - 16);
  a[0] = reinterpret_cast<void*>(&ca_fiber_entry);
  a[1] = nullptr;
  for (int r = 1; r <= 6; ++r) a[-r] = nullptr;
  s->sp[i] = a - 6;
}
#else
void ca_trampoline(unsigned i) {
  ca_sched* s = ca_S;
  s->body(&s->ctxs[i], s->user);
  s->done[i] = 1;  // returns to the scheduler (uc_link)
}
void ca_start_fiber(ca_sched* s, unsigned i, char* lo, size_t size) {
  getcontext(&s->fib[i]);
  s->fib[i].uc_stack.ss_sp = lo;
  s->fib[i].uc_stack.ss_size = size;
  s->fib[i].uc_link = &s->main;
  makecontext(&s->fib[i], reinterpret_cast<void (*)()>(ca_trampoline), 1, i);
}
#endif
}
// every participant arrives; the last one releases the others (they go on when next run)
extern "C" void ca_rt_wait(void* b) {
  ca_fbar* f = static_cast<ca_fbar*>(b);
  if (++f->arrived == f->expected) { f->arrived = 0; ++f->phase; return; }
  const unsigned phase = f->phase;
  ca_sched* s = ca_S;
  const unsigned me = s->cur;
  while (f->phase == phase) ca_yield(s, me);
}
// the blocks of a cluster run together (one cluster after another), each with its own
// barriers, shuffle slots and dynamic shared memory (zeroed); a fiber per emulated thread,
// its stack kept for the launch
extern "C" void ca_rt_launch(const ca_grid* g, ca_body_t body, void* user) {
  const unsigned threads = g->threads, cluster = g->cluster, n = cluster * threads;
  const int W = (threads + 31) / 32;
  ca_sched s;
  ca_sched* const outer = ca_S;
  ca_S = &s;
#ifdef CA_FAST_SWITCH
  s.sp.resize(n);
#else
  s.fib.resize(n);
#endif
  s.done.assign(n, 0);
  s.body = body; s.user = user;
  std::vector<ca_ctx> ctxs(n);
  s.ctxs = ctxs.data();
  char* stacks = static_cast<char*>(mmap(nullptr, CA_STACK * n, PROT_READ | PROT_WRITE,
      MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_STACK, -1, 0));
  if (stacks == MAP_FAILED) { std::perror("emulator: fiber stacks"); std::abort(); }
  for (unsigned i = 0; i < n; ++i) mprotect(stacks + CA_STACK * i, 4096, PROT_NONE);
  for (unsigned bz = 0; bz < g->gz; ++bz)
  for (unsigned by = 0; by < g->gy; ++by)
  for (unsigned bx0 = 0; bx0 < g->gx; bx0 += cluster) {
    ca_fbar cluster_bar{cluster * threads, 0, 0};
    std::vector<std::vector<float>> dyn(cluster, std::vector<float>(g->smem_floats));
    std::vector<float*> bases;
    for (auto& d : dyn) bases.push_back(d.data());
    std::vector<ca_fbar> bars(cluster);
    std::vector<std::vector<ca_fbar>> warp_bars(cluster);
    std::vector<std::vector<void*>> warps(cluster);
    std::vector<std::vector<float>> slots(cluster, std::vector<float>(threads));
    std::vector<std::vector<unsigned>> mma_a(cluster, std::vector<unsigned>(4 * threads));
    std::vector<std::vector<unsigned>> mma_b(cluster, std::vector<unsigned>(2 * threads));
    for (unsigned r = 0; r < cluster; ++r) {
      bars[r] = ca_fbar{threads, 0, 0};
      for (int w = 0; w < W; ++w)
        warp_bars[r].push_back(ca_fbar{(unsigned)std::min(32, (int)threads - w * 32), 0, 0});
      for (int w = 0; w < W; ++w) warps[r].push_back(&warp_bars[r][w]);
    }
    for (unsigned r = 0; r < cluster; ++r)
    for (unsigned t = 0; t < threads; ++t)
      ctxs[r * threads + t] = ca_ctx{{t, 0, 0}, {bx0 + r, by, bz}, &bars[r], warps[r].data(),
                                     slots[r].data(), mma_a[r].data(), mma_b[r].data(),
                                     bases[r], r, &cluster_bar, bases.data()};
    for (unsigned i = 0; i < n; ++i) {
      ca_start_fiber(&s, i, stacks + CA_STACK * i + 4096, CA_STACK - 4096);
      s.done[i] = 0;
    }
    for (unsigned alive = n; alive;)
      for (unsigned i = 0; i < n; ++i)
        if (!s.done[i]) {
          ca_run_fiber(&s, i);
          if (s.done[i]) --alive;
        }
  }
  munmap(stacks, CA_STACK * n);
  ca_S = outer;
}
"""

SHIM = r"""
#include <atomic>
#include <cmath>
#include <cstring>
#include <vector>
#include <algorithm>
using std::min; using std::max;
""" + ABI + r"""
static thread_local dim3_ threadIdx, blockIdx;
static thread_local unsigned ca_tid;  // the thread's linear number in its block
// per emulated thread too, set by its launch's body before `ca_enter`: two runs of kernels
// from one library (a `prebuild` batch shares this shim) may go at once on two host threads,
// and a launch's shape written where the other's threads read it misnumbers them
static thread_local dim3_ gridDim, blockDim;
struct float2 { float x, y; };
struct float4 { float x, y, z, w; };
static inline float2 make_float2(float a, float b) { return {a, b}; }
static inline float4 make_float4(float a, float b, float c, float d) { return {a, b, c, d}; }
template <class T> static inline T __ldg(const T* p) { return *p; }
template <class T> static inline T __ldcs(const T* p) { return *p; }
template <class T> static inline T __ldcg(const T* p) { return *p; }
template <class T> static inline void __stcs(T* p, T v) { *p = v; }
static inline void __threadfence() { std::atomic_thread_fence(std::memory_order_seq_cst); }
static inline unsigned atomicAdd(unsigned* p, unsigned v) {
  return std::atomic_ref<unsigned>(*p).fetch_add(v); }
static inline float atomicAdd(float* p, float v) {
  return std::atomic_ref<float>(*p).fetch_add(v); }
// cp.async, deferred: a thread's copies (or zero fills) are queued in commit groups and land
// only at the wait that covers their group (cp.async.wait_group N: all but the newest N), so a
// kernel that reads a copy before waiting for it reads what was there before and fails
#define CA_EMULATED 1
struct ca_copy_ { float* dst; const float* src; int n; bool in; };
static thread_local std::vector<std::vector<ca_copy_>> ca_cp_groups(1);
static inline void ca_cp_queue(float* dst, const float* src, int n, bool in) {
  ca_cp_groups.back().push_back({dst, src, n, in}); }
static inline void ca_cp16(float* dst, const float* src, bool in) { ca_cp_queue(dst, src, 4, in); }
static inline void ca_cp8(float* dst, const float* src, bool in) { ca_cp_queue(dst, src, 2, in); }
static inline void ca_cp4(float* dst, const float* src, bool in) { ca_cp_queue(dst, src, 1, in); }
static inline void ca_cp_commit() { ca_cp_groups.emplace_back(); }
template <int N> static inline void ca_cp_wait() {
  // the open (uncommitted) group is the last entry; committed groups precede it
  const long done = (long)ca_cp_groups.size() - 1 - N;
  for (long g = 0; g < done; ++g)
    for (const ca_copy_& c : ca_cp_groups[g])
      for (int q = 0; q < c.n; ++q) c.dst[q] = c.in ? c.src[q] : 0.f;
  if (done > 0) ca_cp_groups.erase(ca_cp_groups.begin(), ca_cp_groups.begin() + done);
}
// a kernel argument of any element type (float inputs, int64 class indices, the output)
struct ca_ptr { void* p; template <class T> operator T*() const { return (T*)p; } };
static inline float __int_as_float(int i) { float f; std::memcpy(&f, &i, 4); return f; }
static inline float __uint_as_float(unsigned i) { float f; std::memcpy(&f, &i, 4); return f; }
static inline unsigned __float_as_uint(float f) { unsigned u; std::memcpy(&u, &f, 4); return u; }
static inline float __fdividef(float a, float b) { return a / b; }
static inline float rsqrtf(float x) { return 1.f / std::sqrt(x); }
// fast-math intrinsics: the precise functions (the GPU's approximations are the verifier's
// job); macros, as glibc declares functions of these names itself
#define __expf expf
#define __logf logf
#define __log2f log2f
#define __powf powf
#define __sinf sinf
#define __cosf cosf
// per block (the blocks of a cluster run at the same time): each thread points at its block's;
// the barriers are the runtime's, waited on through `ca_wait` (set by `ca_run`)
static ca_wait_t ca_wait;
static thread_local void* ca_block_barrier;
static thread_local void** ca_warp_barriers;
static thread_local float* ca_slots;
static thread_local unsigned (*ca_mma_a)[4];
static thread_local unsigned (*ca_mma_b)[2];
// thread-block clusters: a barrier over the cluster's threads, and each block's dynamic shared
// memory (peers are reached at the same offset in another block's buffer)
static thread_local float* ca_dyn_smem;  // the block's dynamic shared memory
static thread_local unsigned ca_rank_in_cluster;
static thread_local void* ca_cluster_barrier;
static thread_local float* const* ca_cluster_bases;
static inline unsigned ca_cluster_rank() { return ca_rank_in_cluster; }
// a wait switches to the block's other emulated threads, fibers of this host thread that set
// these thread-locals to their own: each keeps its values on its stack across the wait
struct ca_tls_ {
  dim3_ ti, bi, gd, bd; unsigned tid; void* bb; void** wb; float* sl;
  unsigned (*ma)[4]; unsigned (*mb)[2]; float* ds; unsigned rank; void* cb;
  float* const* cbs; std::vector<std::vector<ca_copy_>> cp; };
static inline void ca_sync(void* b) {
  ca_tls_ k{threadIdx, blockIdx, gridDim, blockDim, ca_tid, ca_block_barrier, ca_warp_barriers,
            ca_slots, ca_mma_a, ca_mma_b, ca_dyn_smem, ca_rank_in_cluster, ca_cluster_barrier,
            ca_cluster_bases, std::move(ca_cp_groups)};
  ca_wait(b);
  threadIdx = k.ti; blockIdx = k.bi; gridDim = k.gd; blockDim = k.bd; ca_tid = k.tid;
  ca_block_barrier = k.bb; ca_warp_barriers = k.wb; ca_slots = k.sl; ca_mma_a = k.ma;
  ca_mma_b = k.mb; ca_dyn_smem = k.ds; ca_rank_in_cluster = k.rank; ca_cluster_barrier = k.cb;
  ca_cluster_bases = k.cbs; ca_cp_groups = std::move(k.cp);
}
static inline void __syncthreads() { ca_sync(ca_block_barrier); }
static inline void ca_cluster_sync() { ca_sync(ca_cluster_barrier); }
// an emulated thread's start: the runtime's context into this library's thread-locals
static inline void ca_enter(const ca_ctx* c) {
  ca_cp_groups.assign(1, {});  // a pool thread starts each block with no copy queued
  // the runtime numbers a block's threads linearly (`ca_tid`: warps, shuffles and mma slots
  // go by it); a 2-D or 3-D block's threadIdx is that number split as CUDA orders it
  ca_tid = c->thread.x; blockIdx = c->block;
  threadIdx = {ca_tid % blockDim.x, (ca_tid / blockDim.x) % blockDim.y,
               ca_tid / (blockDim.x * blockDim.y)};
  ca_block_barrier = c->block_barrier; ca_warp_barriers = c->warp_barriers; ca_slots = c->slots;
  ca_mma_a = reinterpret_cast<unsigned (*)[4]>(c->mma_a);
  ca_mma_b = reinterpret_cast<unsigned (*)[2]>(c->mma_b);
  ca_dyn_smem = c->dyn_smem; ca_rank_in_cluster = c->rank;
  ca_cluster_barrier = c->cluster_barrier; ca_cluster_bases = c->cluster_bases; }
template <class T> static inline const T* ca_cluster_peer(const T* p, unsigned rank) {
  const char* own = reinterpret_cast<const char*>(ca_dyn_smem);
  return reinterpret_cast<const T*>(reinterpret_cast<const char*>(ca_cluster_bases[rank]) +
                                    (reinterpret_cast<const char*>(p) - own)); }
// TF32 rounding (nearest, ties away: cvt.rna) and the warp-wide m16n8k8 TF32 mma: every lane
// deposits its fragments, the warp meets, each lane computes its four outputs (products exact,
// summed in double: more accurate than the tensor core, whose truncation the GPU tests meet)
static inline unsigned ca_tf32(float x) {
  unsigned u; std::memcpy(&u, &x, 4);
  if ((u & 0x7f800000u) != 0x7f800000u) { u += 0x1000u; u &= 0xffffe000u; }
  return u; }
static inline float ca_bits(unsigned u) { float f; std::memcpy(&f, &u, 4); return f; }
// the warp meets (every lane has deposited its fragments), each lane computes its four outputs
// of the m16n8k8 tile from the deposits: product(base, row, col) sums one row and column
template <class Product>
static inline void ca_mma_warp(float* c, Product product) {
  const int t = ca_tid, w = t / 32, base = w * 32, lane = t % 32;
  ca_sync(ca_warp_barriers[w]);
  const int g = lane >> 2, tq = lane & 3;
  float r[4];
  for (int q = 0; q < 4; ++q)
    r[q] = (float)(product(base, g + 8 * (q >= 2), 2 * tq + (q & 1)) + c[q]);
  ca_sync(ca_warp_barriers[w]);
  for (int q = 0; q < 4; ++q) c[q] = r[q];
}
static inline void ca_mma_tf32(float* c, const unsigned* a, const unsigned* b) {
  const int t = ca_tid;
  for (int q = 0; q < 4; ++q) ca_mma_a[t][q] = a[q];
  ca_mma_b[t][0] = b[0]; ca_mma_b[t][1] = b[1];
  ca_mma_warp(c, [](int base, int row, int col) {
    double s = 0.0;
    for (int k = 0; k < 8; ++k)
      s += (double)ca_bits(ca_mma_a[base + (row % 8) * 4 + k % 4][(row >= 8) + 2 * (k >= 4)]) *
           (double)ca_bits(ca_mma_b[base + col * 4 + k % 4][k >= 4]);
    return s;
  });
}
// fp16 and bf16 rounding to nearest even (cvt.rn: subnormals, overflow to infinity), their
// values, and the warp-wide m16n8k8 mma on packed pairs (the lower k in the low half)
static inline unsigned ca_f16_bits(float x) {
  unsigned u; std::memcpy(&u, &x, 4);
  const unsigned sign = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return sign | 0x7e00u;                 // NaN
  if (a >= 0x477ff000u) return sign | 0x7c00u;                // 65520 and up: infinity
  if (a < 0x38800000u) {                                       // below 2^-14: subnormal
    float f; std::memcpy(&f, &a, 4);
    return sign | (unsigned)std::nearbyint(f * 16777216.0f);  // units of 2^-24, ties even
  }
  unsigned m = a - 0x38000000u;                                // rebias 127 -> 15
  m += 0xfffu + ((m >> 13) & 1u);
  return sign | (m >> 13);
}
static inline float ca_f16_value(unsigned h) {
  const unsigned e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
  float f;
  if (e == 0) f = std::ldexp((float)m, -24);
  else if (e == 31) f = m ? NAN : INFINITY;
  else { const unsigned u = ((e + 112u) << 23) | (m << 13); std::memcpy(&f, &u, 4); }
  return (h & 0x8000u) ? -f : f;
}
static inline unsigned ca_bf16_bits(float x) {
  unsigned u; std::memcpy(&u, &x, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (u >> 16) | 0x40u;
  u += 0x7fffu + ((u >> 16) & 1u);
  return u >> 16;
}
static inline float ca_bf16_value(unsigned h) { return ca_bits(h << 16); }
static inline unsigned ca_pack_f16(float lo, float hi) {
  return ca_f16_bits(lo) | (ca_f16_bits(hi) << 16); }
static inline unsigned ca_pack_bf16(float lo, float hi) {
  return ca_bf16_bits(lo) | (ca_bf16_bits(hi) << 16); }
static inline void ca_mma_half(float* c, const unsigned* a, unsigned b,
                               float (*value)(unsigned)) {
  const int t = ca_tid;
  ca_mma_a[t][0] = a[0]; ca_mma_a[t][1] = a[1]; ca_mma_b[t][0] = b;
  ca_mma_warp(c, [value](int base, int row, int col) {
    double s = 0.0;
    for (int k = 0; k < 8; ++k) {
      const unsigned ar = ca_mma_a[base + (row % 8) * 4 + k / 2][row >= 8];
      const unsigned br = ca_mma_b[base + col * 4 + k / 2][0];
      s += (double)value((ar >> (16 * (k & 1))) & 0xffffu) *
           (double)value((br >> (16 * (k & 1))) & 0xffffu);
    }
    return s;
  });
}
// m16n8k16: a = {rows g, g + 8 at k 2t; the same at k 8 + 2t}, b = {k 2t, k 8 + 2t}
static inline void ca_mma16_half(float* c, const unsigned* a, const unsigned* b,
                                 float (*value)(unsigned)) {
  const int t = ca_tid;
  for (int q = 0; q < 4; ++q) ca_mma_a[t][q] = a[q];
  ca_mma_b[t][0] = b[0]; ca_mma_b[t][1] = b[1];
  ca_mma_warp(c, [value](int base, int row, int col) {
    double s = 0.0;
    for (int k = 0; k < 16; ++k) {
      const int kk = k % 8, hi = k >= 8;
      const unsigned ar = ca_mma_a[base + (row % 8) * 4 + kk / 2][(row >= 8) + 2 * hi];
      const unsigned br = ca_mma_b[base + col * 4 + kk / 2][hi];
      s += (double)value((ar >> (16 * (kk & 1))) & 0xffffu) *
           (double)value((br >> (16 * (kk & 1))) & 0xffffu);
    }
    return s;
  });
}
static inline void ca_mma16_f16(float* c, const unsigned* a, const unsigned* b) {
  ca_mma16_half(c, a, b, ca_f16_value); }
static inline void ca_mma16_bf16(float* c, const unsigned* a, const unsigned* b) {
  ca_mma16_half(c, a, b, ca_bf16_value); }
static inline void ca_mma_f16(float* c, const unsigned* a, unsigned b) {
  ca_mma_half(c, a, b, ca_f16_value); }
static inline void ca_mma_bf16(float* c, const unsigned* a, unsigned b) {
  ca_mma_half(c, a, b, ca_bf16_value); }
static inline float ca_exchange(float v, int src_lane, bool keep_own) {
  const int t = ca_tid, w = t / 32, base = w * 32;
  ca_slots[t] = v;
  ca_sync(ca_warp_barriers[w]);
  const float r = keep_own ? v : ca_slots[base + src_lane];
  ca_sync(ca_warp_barriers[w]);
  return r;
}
static inline float __shfl_up_sync(unsigned, float v, int d) {
  const int lane = ca_tid % 32; return ca_exchange(v, lane - d, lane < d); }
static inline float __shfl_sync(unsigned, float v, int src) { return ca_exchange(v, src, false); }
static inline float __shfl_xor_sync(unsigned, float v, int m, int w = 32) {
  const int lane = ca_tid % 32; return ca_exchange(v, lane ^ m, false); }
#define __global__
#define __device__
#define __forceinline__ inline
#define __restrict__
#define __shared__ static
#define __launch_bounds__(...)
#define __cluster_dims__(...)
#define __constant__ static
#define __align__(n)
"""


def _call_args(params: int, args) -> str:
    """C arguments of one launch: (inputs..., out, ws) as given, or a program stage's
    `Launch.args` (program operands, the output, workspace offsets)."""
    if args is None:
        return ", ".join(f"ca_ptr{{p{k}}}" for k in range(params)) + ", ws"
    out = []
    for a in args:
        if a[0] == "in":
            out.append(f"ca_ptr{{p{a[1]}}}")
        elif a[0] == "out":
            out.append(f"ca_ptr{{p{params - 1}}}")
        elif a[0] == "buf":
            out.append(f"ca_ptr{{(char*)ws + {a[1]}}}")
        elif a[0] == "product":  # a program's library step's product (`run`'s `prod`)
            assert len(a) == 1 or a[1] == 0, "emulator: one library step, leading"
            out.append("ca_ptr{prod}")
        else:
            raise NotImplementedError(f"emulator: kernel argument {a!r}")
    return ", ".join(out)


def _launcher(params: int, launches: list[tuple[str, tuple, tuple, int, object, int]]) -> str:
    """`ca_run(launch, wait, p0.., ws)`: each launch in turn through the runtime's `launch`, an
    emulated thread entering the kernel through a body that sets its thread-locals. Where a
    launch reads a program's library product, `ca_run` takes its pointer last (`prod`)."""
    decl = ", ".join(f"void* p{k}" for k in range(params)) + ", void* ws"
    unpack = " ".join(f"void* p{k} = a_[{k}];" for k in range(params)) + f" void* ws = a_[{params}];"
    args = ", ".join(f"p{k}" for k in range(params)) + ", ws"
    if any(kargs and any(a[0] == "product" for a in kargs) for *_, kargs, _ in launches):
        decl, args = decl + ", void* prod", args + ", prod"
        unpack += f" void* prod = a_[{params + 1}];"
    body = []
    for name, grid, block, smem, kargs, cluster in launches:
        call = _call_args(params, kargs)
        stage = re.match(r"s(\d+)_", name)
        if stage:
            name = f"cuda_agent_stage{stage.group(1)}::{name}"
        threads = block[0] * block[1] * block[2]  # numbered linearly (the shim's `ca_tid`)
        assert grid[0] % cluster == 0, "a grid of whole clusters"
        # the blocks of a cluster run together (one after another otherwise), each with its
        # own barriers, shuffle slots and dynamic shared memory; static __shared__ arrays are
        # one per process, so cluster kernels keep all of theirs in dynamic shared memory
        body.append(f"""
  {{
    const ca_grid g_{{{grid[0]}u, {grid[1]}u, {grid[2]}u, {threads}u, {cluster}u, {max(1, smem // 4)}ul}};
    launch_(&g_, [](const ca_ctx* c_, void* u_) {{
      gridDim = {{{grid[0]}u, {grid[1]}u, {grid[2]}u}}; blockDim = {{{block[0]}u, {block[1]}u, {block[2]}u}};
      ca_enter(c_);  // after blockDim: it splits the thread's number into threadIdx
      void* const* a_ = static_cast<void* const*>(u_); {unpack}
      {name}({call}); }}, args_);
  }}""")
    # a program's stage kernels live in namespaces (cuda_agent_stage<i>::s<i>_...)
    return (f'extern "C" void ca_run(ca_launch_t launch_, ca_wait_t wait_, {decl}) {{\n'
            f"  ca_wait = wait_;\n  void* args_[] = {{{args}}};" + "".join(body) + "\n}\n")


@functools.cache
def _runtime_lib() -> ctypes.CDLL:
    return _build(RUNTIME)  # built once per machine, loaded once per process


def _runtime() -> tuple[ctypes.c_void_p, ctypes.c_void_p]:
    """The runtime's `ca_rt_launch` and `ca_rt_wait`, `ca_run`'s first arguments."""
    rt = _runtime_lib()
    return (ctypes.cast(rt.ca_rt_launch, ctypes.c_void_p),
            ctypes.cast(rt.ca_rt_wait, ctypes.c_void_p))


def available() -> bool:
    return shutil.which("g++") is not None


def _program(rendered, n_inputs: int) -> tuple[str, object]:
    """The emulator's C++ for `rendered` with `n_inputs` inputs (`SHIM` first, `ca_run` last)
    and its leading vendor-library step (None without one)."""
    launches = list(rendered.launches)
    library = launches.pop(0).library if launches and launches[0].library else None
    assert not any(L.library for L in launches), "a library step only leads the launches"
    from cuda_agent.space.codegen import CLUSTER_PRELUDE  # the shim defines these on the host

    source = rendered.source.replace(CLUSTER_PRELUDE, "").replace(
        "extern __shared__ __align__(16) float ca_smem[];",
                                     "float* ca_smem = ca_dyn_smem;").replace(
        "extern __shared__ float4 ca_dyn4[];",
        "float4* ca_dyn4 = reinterpret_cast<float4*>(ca_dyn_smem);")
    src = SHIM + source.replace('extern "C"', "") + _launcher(
        n_inputs + 1, [(L.kernel, L.grid, L.block, L.smem, L.args, L.cluster)
                       for L in launches])
    return src, library


def _key(src: str) -> str:
    return hashlib.sha256(src.encode()).hexdigest()[:16]


_prebuilt: dict[str, tuple[str, str]] = {}
"""source key -> (library, its `ca_run`'s name), for candidates `prebuild` compiled together"""


def prebuild(jobs) -> None:
    """Compile many candidates as one library, one compiler run instead of one per candidate
    (its start, the shim's precompiled header loaded, was most of a small kernel's compile):
    each candidate's code in a namespace of its own, its `ca_run` named apart. `run` then finds
    them there. jobs: (rendered, number of inputs). Where the batch does not compile, nothing
    is recorded and `run` builds each candidate alone (and reports its own error)."""
    work = _work_dir()
    header = _shim_header(work)
    parts, keys = [], []
    for rendered, n_inputs in jobs:
        src, _ = _program(rendered, n_inputs)
        key = _key(src)
        if key in _prebuilt or key in keys or (work / f"k{key}.so").exists():
            continue
        body = src[len(SHIM):].replace('extern "C" void ca_run(', f'extern "C" void ca_run_{key}(')
        parts.append(f"namespace ca_{key} {{\n{body}\n}}  // namespace ca_{key}\n")
        keys.append(key)
    if len(keys) < 2 or header is None:
        return
    text = "".join(parts)
    batch = _key(text)
    lib = work / f"b{batch}.so"
    if not lib.exists():
        tag = f"{os.getpid()}-{threading.get_ident()}"
        cpp, tmp = work / f".b{batch}-{tag}.cpp", work / f".b{batch}-{tag}.so"
        cpp.write_text(f'#include "{header}"\n' + text)
        try:
            subprocess.run([*GXX, "-shared", "-o", str(tmp), str(cpp)], check=True,
                           capture_output=True, text=True)
        except subprocess.CalledProcessError:
            return
        finally:
            cpp.unlink(missing_ok=True)
        os.replace(tmp, lib)
    for key in keys:
        _prebuilt[key] = (str(lib), f"ca_run_{key}")


#: numpy dtypes passed to a kernel as they are: a half-precision tensor's bits (float16, or
#: bfloat16 as uint16/int16, which numpy lacks)
HALF_BITS = (np.dtype(np.float16), np.dtype(np.uint16), np.dtype(np.int16))


def run(rendered, inputs: list[np.ndarray], out_shape: tuple[int, ...],
        workspace: list | None = None, out_bits: int | None = None,
        library_inputs: list | None = None) -> np.ndarray:
    """Execute `rendered` (a `Rendered`) on `inputs` (kernel operand order: float32, int64
    for class indices, or the bits of half-precision tensors: `HALF_BITS`). With `out_bits`
    the output is a half-precision tensor's bits (uint16), pre-filled with that NaN. A leading vendor-library step runs through torch on the CPU
    (`launcher.run_library`), its product handed to the kernels as their workspace. With a
    `workspace` list, the workspace the kernels left (float32 words) is appended to it.
    `library_inputs`: the inputs as torch tensors for the library step (half-precision ones in
    their type, whose product torch computes in it: its bits are the kernels' workspace)."""
    src, library = _program(rendered, len(inputs))
    args = next((L.args for L in rendered.launches if L.library), None)
    product = None
    if library is not None:
        import torch

        from cuda_agent.runner.launcher import run_library

        tensors = list(library_inputs) if library_inputs is not None else \
            [torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32)) for x in inputs]
        if args is not None:  # a program's first stage: its operands are program inputs
            assert all(a[0] == "in" for a in args), "emulator: a library step reads inputs"
            tensors = [tensors[a[1]] for a in args]
        y = run_library(library, tensors)
        # its memory as the kernels read it (channels-last where kept so), not numpy's order
        flat = y.as_strided((y.numel(),), (1,))
        if flat.dtype in (torch.float16, torch.bfloat16):
            flat = flat.view(torch.int16)  # a half product's bits
        product = flat.numpy().copy()
    key = _key(src)
    if key in _prebuilt:
        lib, name = _prebuilt[key]
        fn = getattr(ctypes.CDLL(lib), name)
    else:
        fn = _build(src).ca_run
    arrays = [np.ascontiguousarray(x) if np.asarray(x).dtype in HALF_BITS
              else np.ascontiguousarray(x, dtype=np.int64 if np.asarray(x).dtype == np.int64
                                        else np.float32) for x in inputs]
    out = np.full(out_shape, np.nan, dtype=np.float32) if out_bits is None \
        else np.full(out_shape, out_bits, dtype=np.uint16)
    program = product is not None and args is not None  # the product apart from the workspace
    ws = product if product is not None and not program else \
        np.zeros(max(1, -(-rendered.workspace_bytes // 4)), dtype=np.float32)
    ptrs = [*_runtime(), *(a.ctypes.data_as(ctypes.c_void_p) for a in arrays + [out, ws])]
    if program:
        ptrs.append(product.ctypes.data_as(ctypes.c_void_p))
    fn.argtypes = [ctypes.c_void_p] * len(ptrs)
    fn(*ptrs)
    if workspace is not None:
        workspace.append(ws)
    return out


GXX = ["g++", "-std=c++20", "-O1", "-fPIC", "-pthread", "-w", "-fpermissive"]


def _shim_header(work: Path) -> str | None:
    """The shim as a header, precompiled once (`.gch`, found by g++ beside the header when
    the flags match): the shim's standard headers (<thread>, <barrier>, ...) were most of
    each kernel's compile time. None when it cannot be precompiled (then sources include
    the shim's text, as before)."""
    name = f"shim-{hashlib.sha256(SHIM.encode()).hexdigest()[:16]}.h"
    header, gch = work / name, work / (name + ".gch")
    if not gch.exists():
        tmp = Path(tempfile.mkdtemp(dir=work))
        try:  # built aside and moved into place: parallel test workers may race here
            (tmp / name).write_text(SHIM)
            subprocess.run([*GXX, "-x", "c++-header", str(tmp / name), "-o",
                            str(tmp / (name + ".gch"))], check=True, capture_output=True)
            if not header.exists():
                os.replace(tmp / name, header)
            os.replace(tmp / (name + ".gch"), gch)
        except (OSError, subprocess.CalledProcessError):
            return None
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return name if header.exists() else None


def _work_dir() -> Path:
    work = Path(tempfile.gettempdir()) / "ca_emulator"
    work.mkdir(exist_ok=True)
    return work


def _build(src: str) -> ctypes.CDLL:
    key = _key(src)
    work = _work_dir()
    lib = work / f"k{key}.so"
    if not lib.exists():
        header = _shim_header(work) if src.startswith(SHIM) else None
        # written aside, per process and thread: another worker or thread may build the same
        # one (two threads of a test compiling at once met here over the runtime)
        tag = f"{os.getpid()}-{threading.get_ident()}"
        cpp, tmp = work / f".k{key}-{tag}.cpp", work / f".k{key}-{tag}.so"
        cpp.write_text(f'#include "{header}"\n' + src[len(SHIM):] if header else src)
        try:
            subprocess.run([*GXX, "-shared", "-o", str(tmp), str(cpp)], check=True,
                           capture_output=True, text=True)
        finally:
            os.replace(cpp, work / f"k{key}.cpp")  # kept beside the library, to read
        os.replace(tmp, lib)
    return ctypes.CDLL(str(lib))


def round_half(values: np.ndarray) -> dict[str, np.ndarray]:
    """The shim's fp16 and bf16 conversions applied to `values` (float32): what the emulated
    half-precision mma sees, to be checked against torch's rounding."""
    src = SHIM + """
extern "C" void ca_round(const float* x, float* h, float* b, long n) {
  for (long i = 0; i < n; ++i) {
    h[i] = ca_f16_value(ca_f16_bits(x[i]));
    b[i] = ca_bf16_value(ca_bf16_bits(x[i]));
  }
}
"""
    fn = _build(src).ca_round
    x = np.ascontiguousarray(values, dtype=np.float32)
    h, b = np.empty_like(x), np.empty_like(x)
    fn.argtypes = [ctypes.c_void_p] * 3 + [ctypes.c_long]
    fn(*(a.ctypes.data_as(ctypes.c_void_p) for a in (x, h, b)), x.size)
    return {"fp16": h, "bf16": b}


def run_torch(rendered, tensors, out_shape: tuple[int, ...], out_dtype) -> "torch.Tensor":
    """`run` on torch tensors (kernel operand order) of any dtype the kernels take, fp16 and
    bf16 passed as their bits; the output a tensor of `out_dtype` (float32, float16, bfloat16,
    int64), every element not written a NaN."""
    import torch

    def bits(t):
        t = t.contiguous()
        if t.dtype in (torch.float16, torch.bfloat16):
            return t.view(torch.int16).numpy()
        return t.numpy()

    half = {torch.float16: 0x7E01, torch.bfloat16: 0x7FC1}.get(out_dtype)
    got = run(rendered, [bits(t) for t in tensors], out_shape, out_bits=half,
              library_inputs=[t.contiguous() for t in tensors])
    if half is not None:
        return torch.from_numpy(got.view(np.int16)).view(out_dtype)
    return torch.from_numpy(got)


def max_rel_error(rendered, inputs: list[np.ndarray], want: np.ndarray) -> float:
    """Run `rendered` on `inputs` and return its largest error relative to max |want|."""
    got = run(rendered, inputs, tuple(want.shape))
    return float(np.abs(got - want).max() / (np.abs(want).max() + 1e-30))


def run_threadless(jobs: list, work: Path) -> list:
    """Run many candidates on the CPU with `cpu_exec`'s CUDA shim, built as one library (one
    compiler run instead of one per candidate: the kernels are renamed apart). For kernels
    without barriers or shuffles (pooling, depthwise convolution): their threads run one after
    another. jobs: (rendered, input tensors, output shape); returns the output tensors."""
    from cuda_agent.space import codegen as cg
    import torch

    parts = [SHIM, cg.PRELUDE]
    for k, (r, ins, _) in enumerate(jobs):
        (launch,) = r.launches
        assert launch.smem == 0 and launch.block[1:] == (1, 1) and launch.grid[1:] == (1, 1)
        src = r.source.replace(cg.PRELUDE, "").replace('extern "C"', "")
        parts.append(src.replace(f" {launch.kernel}(", f" {launch.kernel}_{k}("))
        params = ", ".join([f"const float* in{j}" for j in range(len(ins))] + ["float* out"])
        args = ", ".join([f"in{j}" for j in range(len(ins))] + ["out", "nullptr"])
        parts.append(f"""extern "C" void ca_run_{k}({params}) {{
  gridDim = {{{launch.grid[0]}u, 1u, 1u}}; blockDim = {{{launch.block[0]}u, 1u, 1u}};
  for (unsigned b = 0; b < {launch.grid[0]}u; ++b)
    for (unsigned t = 0; t < {launch.block[0]}u; ++t) {{
      blockIdx = {{b, 0, 0}}; threadIdx = {{t, 0, 0}}; {launch.kernel}_{k}({args});
    }}
}}""")
    cpp, lib = work / "batch.cpp", work / "batch.so"
    cpp.write_text("\n".join(parts))
    subprocess.run(["g++", "-std=c++20", "-O1", "-shared", "-fPIC", "-pthread", "-w",
                    "-o", str(lib), str(cpp)], check=True, capture_output=True, text=True)
    dll = ctypes.CDLL(str(lib))
    outs = []
    for k, (_, ins, shape) in enumerate(jobs):
        arrays = [x.contiguous().float() for x in ins]
        out = torch.full(shape, float("nan"))  # an element never written stays NaN
        getattr(dll, f"ca_run_{k}")(*[ctypes.c_void_p(t.data_ptr()) for t in arrays + [out]])
        outs.append(out)
    return outs
