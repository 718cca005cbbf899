// Prototype: fp32 GEMM on tensor cores with 3xTF32 error compensation (C = A B, row-major,
// A: M x K, B: K x N). Each operand x = big + small with big = tf32(x), small = tf32(x - big);
// C += a_small*b_big + a_big*b_small + a_big*b_big (a_small*b_small, ~2^-22 relative, dropped).
typedef unsigned int uint32_t;

__device__ __forceinline__ uint32_t to_tf32(float x) {
  uint32_t r;
  asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(x));
  return r;
}
__device__ __forceinline__ void split(float x, uint32_t& big, uint32_t& small) {
  big = to_tf32(x);
  small = to_tf32(x - __uint_as_float(big));
}
__device__ __forceinline__ void mma(float* c, const uint32_t* a, const uint32_t* b) {
  asm volatile(
      "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
__device__ __forceinline__ void cp16(float* dst, const float* src, bool in) {
  const unsigned s = (unsigned)__cvta_generic_to_shared(dst);
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(s), "l"(src),
               "r"(in ? 16 : 0));
}
__device__ __forceinline__ void commit() { asm volatile("cp.async.commit_group;"); }
template <int N> __device__ __forceinline__ void wait_group() {
  asm volatile("cp.async.wait_group %0;" ::"n"(N));
}

template <int BM, int BN, int BK, int WM, int WN, int STAGES, int PART>
__global__ void __launch_bounds__((BM / WM) * (BN / WN) * 32)
gemm_tf32x3(const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ C,
            int M, int N, int K) {
  constexpr int WARPS_N = BN / WN, THREADS = (BM / WM) * WARPS_N * 32;
  constexpr int MT = WM / 16, NT = WN / 8;     // mma tiles per warp
  constexpr int LDA = BK + 4, LDB = BN + 8;    // conflict-free fragment reads
  constexpr int A_STAGE = BM * LDA, B_STAGE = BK * LDB;
  extern __shared__ __align__(16) float smem[];
  float* As = smem;
  float* Bs = smem + STAGES * A_STAGE;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int wm = (warp / WARPS_N) * WM, wn = (warp % WARPS_N) * WN;
  const int g = lane >> 2, t = lane & 3;
  const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;
  const int slices = (K + BK - 1) / BK;

  auto load = [&](int slice, int stage) {
    const int k0 = slice * BK;
    float* as = As + stage * A_STAGE;
    float* bs = Bs + stage * B_STAGE;
#pragma unroll
    for (int i = tid; i < BM * BK / 4; i += THREADS) {
      const int r = i / (BK / 4), c = (i % (BK / 4)) * 4;
      const bool in = (m0 + r < M) && (k0 + c < K);
      cp16(as + r * LDA + c, A + (in ? (size_t)(m0 + r) * K + k0 + c : 0), in);
    }
#pragma unroll
    for (int i = tid; i < BK * BN / 4; i += THREADS) {
      const int r = i / (BN / 4), c = (i % (BN / 4)) * 4;
      const bool in = (k0 + r < K) && (n0 + c < N);
      cp16(bs + r * LDB + c, B + (in ? (size_t)(k0 + r) * N + n0 + c : 0), in);
    }
  };

  float acc[MT][NT][4];
#pragma unroll
  for (int i = 0; i < MT; ++i)
#pragma unroll
    for (int j = 0; j < NT; ++j)
#pragma unroll
      for (int q = 0; q < 4; ++q) acc[i][j][q] = 0.f;

#pragma unroll
  for (int s = 0; s < STAGES - 1; ++s) {
    if (s < slices) load(s, s);
    commit();
  }
  for (int slice = 0; slice < slices; ++slice) {
    wait_group<STAGES - 2>();
    __syncthreads();
    {
      const int next = slice + STAGES - 1;
      if (next < slices) load(next, next % STAGES);
      commit();
    }
    const float* as = As + (slice % STAGES) * A_STAGE + wm * LDA;
    const float* bs = Bs + (slice % STAGES) * B_STAGE + wn;
#pragma unroll
    for (int kk = 0; kk < BK; kk += 8) {
      // A's fragments stay in registers for the step; B's are split one column tile at a
      // time (fewer live registers: no spills at a 64 x 64 warp tile)
      uint32_t ab[MT][4], asm_[MT][4];
#pragma unroll
      for (int i = 0; i < MT; ++i) {
        const float* p = as + (i * 16 + g) * LDA + kk + t;
        split(p[0], ab[i][0], asm_[i][0]);
        split(p[8 * LDA], ab[i][1], asm_[i][1]);
        split(p[4], ab[i][2], asm_[i][2]);
        split(p[8 * LDA + 4], ab[i][3], asm_[i][3]);
      }
#pragma unroll
      for (int j = 0; j < NT; ++j) {
        uint32_t bb[2], bsm[2];
        const float* p = bs + (kk + t) * LDB + j * 8 + g;
        split(p[0], bb[0], bsm[0]);
        split(p[4 * LDB], bb[1], bsm[1]);
#pragma unroll
        for (int i = 0; i < MT; ++i) {
          if (PART) {
            // the tensor core truncates as it accumulates: sum each 8-deep step apart and add
            // it to the running total with a rounded fp32 add (no bias growing with K)
            float part[4] = {0.f, 0.f, 0.f, 0.f};
            mma(part, asm_[i], bb);
            mma(part, ab[i], bsm);
            mma(part, ab[i], bb);
#pragma unroll
            for (int q = 0; q < 4; ++q) acc[i][j][q] += part[q];
          } else {
            mma(acc[i][j], asm_[i], bb);
            mma(acc[i][j], ab[i], bsm);
            mma(acc[i][j], ab[i], bb);
          }
        }
      }
    }
  }
  wait_group<0>();
#pragma unroll
  for (int i = 0; i < MT; ++i)
#pragma unroll
    for (int j = 0; j < NT; ++j) {
      const int r = m0 + wm + i * 16 + g, c = n0 + wn + j * 8 + 2 * t;
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int rr = r + 8 * h;
        if (rr < M) {
          if (c < N) C[(size_t)rr * N + c] = acc[i][j][2 * h];
          if (c + 1 < N) C[(size_t)rr * N + c + 1] = acc[i][j][2 * h + 1];
        }
      }
    }
}

