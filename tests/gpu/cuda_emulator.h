// A CPU emulation of the CUDA subset the tiled kernels use (kernels/cuda/mma.cuh), so that their
// indexing, masking, software pipelining and barriers are tested where there is no GPU. Include it
// before the kernel headers, in a host-compiled test. Every CUDA thread of a block is a host
// thread (from a pool kept for the whole test); blocks run one after another.
//   threadIdx, blockIdx, blockDim, gridDim; __syncthreads: a barrier of the block's threads (an
//     exited thread stops counting, as on the GPU).
//   Dynamic shared memory (MOE_DYNAMIC_SMEM): poisoned with 0xFF bytes (NaN in f32 and bf16) before
//     each block, so a read of something never written shows.
//   Warp collectives (ShflXor, ldmatrix x4 and .trans, mma.sync bf16 m16n8k16 and tf32 m16n8k8):
//     every lane deposits its operands, the warp meets at a barrier, each lane computes its result
//     from the PTX ISA's fragment tables (written here independently of Frag<T> in mma.cuh).
//   cp.async: the destination is poisoned at issue and the data lands at cp.async.wait_group
//   (oldest
//     groups first): the earliest and the latest a GPU may write, so a read before the wait, or a
//     copy issued while another warp still reads the old tile (a missing barrier), reads NaN.
//     Copies and ldmatrix rows are checked to lie in shared memory.
//   Routing primitives (kernels/cuda/routing_kernels.cuh): a warp ballot (an exchange like the
//     others), popcount, atomics through std::atomic_ref (a block's threads run at once).
//   The element-wise families (kernels/cuda/device_common.cuh and <family>_kernels.cuh):
//   grid-stride
//     loops, 2-d grids, __shfl_xor_sync on any 4- or 8-byte type (an exchange), atomicAdd (int,
//     unsigned, unsigned long long, float, double) and atomicOr through std::atomic_ref, static
//     __shared__ arrays (one per kernel, shared by the block's threads: blocks run one after
//     another; unlike dynamic shared memory they are not poisoned), and the device math the
//     kernels call that the host lacks (rsqrtf, min, max).
// Not emulated: timing, bank conflicts, the memory model beyond barriers, vector loads wider than
// the host's (a float4 is a plain 16-byte struct copy here).
#pragma once

#define MOE_CUDA_EMULATOR 1
// Static __shared__ arrays become function statics (see above); before any CUDA header, whose
// host_defines.h defines __shared__ only when it is not defined yet.
#undef __shared__
#define __shared__ static

#include <cuda_bf16.h>
#include <math.h>
#include <vector_types.h>

#include <algorithm>
#include <atomic>
#include <barrier>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <type_traits>
#include <vector>

#define __launch_bounds__(...)
#define MOE_DEVICE inline
#define MOE_DYNAMIC_SMEM(name) unsigned char* name = ::moe::emu::SharedMemory()
#define threadIdx (::moe::emu::Self().thread_idx)
#define blockIdx (::moe::emu::Self().block_idx)
#define blockDim (::moe::emu::Dims().block)
#define gridDim (::moe::emu::Dims().grid)

namespace moe::emu {

[[noreturn]] inline void Fail(const char* what) {
  std::fprintf(stderr, "cuda_emulator: %s\n", what);
  std::abort();
}

struct Copy {
  void* dst;
  const void* src;
  bool valid;
};

struct ThreadState {
  uint3 thread_idx{}, block_idx{};
  int lane = 0, warp = 0;
  unsigned collectives = 0;              // warp collectives so far: their parity picks the slot
  std::vector<Copy> open;                // cp.async not yet committed
  std::deque<std::vector<Copy>> groups;  // committed, oldest first
};

struct WarpState {
  explicit WarpState(int lanes) : barrier(lanes) {}
  std::barrier<> barrier;    // the warp's lanes (fewer than 32 in a block's partial last warp)
  uint32_t words[2][32][8];  // [collective parity][lane]: the operands each lane deposited
  const void* addr[2][32];
};

struct BlockState {
  std::vector<unsigned char> smem;
  std::unique_ptr<std::barrier<>> barrier;
  std::vector<std::unique_ptr<WarpState>> warps;
};

struct LaunchDims {
  dim3 grid, block;
};

inline thread_local ThreadState* t_self = nullptr;
inline BlockState* g_block = nullptr;  // the block running now
inline LaunchDims g_dims;

inline ThreadState& Self() { return *t_self; }
inline const LaunchDims& Dims() { return g_dims; }
inline unsigned char* SharedMemory() { return g_block->smem.data(); }

inline void CheckShared(const void* p, size_t bytes, size_t align) {
  const auto* b = static_cast<const unsigned char*>(p);
  const unsigned char* lo = g_block->smem.data();
  if (b < lo || b + bytes > lo + g_block->smem.size())
    Fail("a shared-memory access outside the block's shared memory");
  if (reinterpret_cast<uintptr_t>(b) % align != 0) Fail("a misaligned shared-memory access");
}

// Deposits n words and an address for this lane, waits for the warp, and returns read(words, addr)
// over all 32 lanes' deposits. Two slots alternate: a lane can only reach collective c + 2 after
// every lane has passed collective c + 1, i.e. has finished reading slot c.
template <typename Read>
auto Exchange(const uint32_t* in, int n, const void* addr, Read&& read) {
  ThreadState& t = Self();
  WarpState& w = *g_block->warps[static_cast<size_t>(t.warp)];
  const unsigned p = t.collectives++ & 1u;
  if (n > 0) std::memcpy(w.words[p][t.lane], in, sizeof(uint32_t) * static_cast<size_t>(n));
  w.addr[p][t.lane] = addr;
  w.barrier.arrive_and_wait();
  return read(w.words[p], w.addr[p]);
}

inline float Bf16Half(uint32_t word, int half) {
  uint32_t bits = (half ? word >> 16 : word & 0xffffu) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}
inline float Tf32(uint32_t word) {  // the tensor cores read 19 bits
  const uint32_t bits = word & 0xffffe000u;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

// The host threads that play a block's CUDA threads: started once and kept for every block of
// every launch (starting a thread per CUDA thread per block cost about a millisecond each on a
// loaded 2-core machine). Run(n, job) runs job(0) ... job(n - 1) at once, one per worker, and
// returns when all have ended.
class WorkerPool {
 public:
  ~WorkerPool() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      quit_ = true;
      ++generation_;
    }
    start_.notify_all();
    for (auto& w : workers_) w.join();
  }
  void Run(int n, const std::function<void(int)>& job) {
    std::unique_lock<std::mutex> lock(mu_);
    while (static_cast<int>(workers_.size()) < n) {
      const int i = static_cast<int>(workers_.size());
      workers_.emplace_back([this, i] { Work(i); });
    }
    job_ = &job;
    active_ = remaining_ = n;
    ++generation_;
    start_.notify_all();
    done_.wait(lock, [&] { return remaining_ == 0; });
    job_ = nullptr;
  }

 private:
  void Work(int i) {
    uint64_t seen = 0;
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      start_.wait(lock, [&] { return generation_ != seen; });
      seen = generation_;
      if (quit_) return;
      if (i >= active_) continue;
      const std::function<void(int)>* job = job_;
      lock.unlock();
      (*job)(i);
      lock.lock();
      if (--remaining_ == 0) done_.notify_one();
    }
  }
  std::mutex mu_;
  std::condition_variable start_, done_;
  std::vector<std::thread> workers_;
  const std::function<void(int)>* job_ = nullptr;
  uint64_t generation_ = 0;
  int active_ = 0, remaining_ = 0;
  bool quit_ = false;
};
inline WorkerPool& Workers() {
  static WorkerPool pool;
  return pool;
}

// Launches `kernel` over grid x block, with `smem` bytes of dynamic shared memory.
template <typename... Params, typename... Args>
void Launch(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, const Args&... args) {
  if (block.y != 1 || block.z != 1 || block.x == 0 || block.x > 1024 || grid.z != 1)
    Fail("only 1-d blocks of 1 to 1024 threads, 2-d grids");
  if (smem > 227 * 1024) Fail("more dynamic shared memory than a Hopper block can have (227 KB)");
  g_dims = {grid, block};
  const int threads = static_cast<int>(block.x);
  for (unsigned by = 0; by < grid.y; ++by) {
    for (unsigned bx = 0; bx < grid.x; ++bx) {
      BlockState b;
      b.smem.assign(smem, 0xFF);
      b.barrier = std::make_unique<std::barrier<>>(threads);
      for (int w = 0; w < (threads + 31) / 32; ++w)
        b.warps.push_back(std::make_unique<WarpState>(std::min(32, threads - 32 * w)));
      g_block = &b;
      const std::function<void(int)> job = [&](int t) {
        ThreadState self;
        self.thread_idx = uint3{static_cast<unsigned>(t), 0, 0};
        self.block_idx = uint3{bx, by, 0};
        self.lane = t % 32;
        self.warp = t / 32;
        t_self = &self;
        kernel(args...);
        if (!self.open.empty() || !self.groups.empty())
          Fail("a thread ended with cp.async copies never waited for");
        b.warps[static_cast<size_t>(self.warp)]->barrier.arrive_and_drop();
        b.barrier->arrive_and_drop();
        t_self = nullptr;
      };
      Workers().Run(threads, job);
      g_block = nullptr;
    }
  }
}

}  // namespace moe::emu

inline void __syncthreads() { ::moe::emu::g_block->barrier->arrive_and_wait(); }

namespace moe::kernels::cuda::mma {

inline int LaneId() { return ::moe::emu::Self().lane; }

inline float ShflXor(float v, int mask) {
  uint32_t u;
  std::memcpy(&u, &v, sizeof u);
  return ::moe::emu::Exchange(&u, 1, nullptr, [&](const uint32_t(*w)[8], const void* const*) {
    float r;
    std::memcpy(&r, &w[LaneId() ^ mask][0], sizeof r);
    return r;
  });
}

// ldmatrix .x4: lane 8i + r gives the address of row r of matrix i. Result i of lane l: row l/4,
// elements 2(l%4) and 2(l%4)+1 of matrix i; with .trans, rows 2(l%4) and 2(l%4)+1 of column l/4.
inline void LdMatrix(uint32_t (&r)[4], const void* smem, bool trans) {
  ::moe::emu::CheckShared(smem, 16, 16);
  ::moe::emu::Exchange(nullptr, 0, smem, [&](const uint32_t(*)[8], const void* const* addr) {
    const int l = LaneId(), g = l / 4, t = l % 4;
    for (int i = 0; i < 4; ++i) {
      uint16_t e[2];
      for (int j = 0; j < 2; ++j) {
        const auto* row = static_cast<const unsigned char*>(addr[8 * i + (trans ? 2 * t + j : g)]);
        std::memcpy(&e[j], row + 2 * (trans ? g : 2 * t + j), 2);
      }
      r[i] = static_cast<uint32_t>(e[0]) | static_cast<uint32_t>(e[1]) << 16;
    }
    return 0;
  });
}
inline void LdMatrixX4(uint32_t (&r)[4], const void* smem) { LdMatrix(r, smem, false); }
inline void LdMatrixX4Trans(uint32_t (&r)[4], const void* smem) { LdMatrix(r, smem, true); }

// mma.m16n8k16 bf16: a_i (i < 8, two per register, the lower index in the low half) at row
// g + 8*((i/2)%2), column 2t + (i%2) + 8*(i/4); b_i (i < 4) at row (k) 2t + (i%2) + 8*(i/2), column
// g; c_i at row g + 8*(i/2), column 2t + (i%2). g = lane/4, t = lane%4.
inline void MmaBf16(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
  const uint32_t in[6] = {a[0], a[1], a[2], a[3], b[0], b[1]};
  ::moe::emu::Exchange(in, 6, nullptr, [&](const uint32_t(*w)[8], const void* const*) {
    float A[16][16], B[16][8];
    for (int l = 0; l < 32; ++l) {
      const int g = l / 4, t = l % 4;
      for (int i = 0; i < 8; ++i)
        A[g + 8 * ((i / 2) % 2)][2 * t + i % 2 + 8 * (i / 4)] =
            ::moe::emu::Bf16Half(w[l][i / 2], i % 2);
      for (int i = 0; i < 4; ++i)
        B[2 * t + i % 2 + 8 * (i / 2)][g] = ::moe::emu::Bf16Half(w[l][4 + i / 2], i % 2);
    }
    const int g = LaneId() / 4, t = LaneId() % 4;
    for (int i = 0; i < 4; ++i) {
      const int row = g + 8 * (i / 2), col = 2 * t + i % 2;
      float acc = d[i];
      for (int k = 0; k < 16; ++k) acc += A[row][k] * B[k][col];
      d[i] = acc;
    }
    return 0;
  });
}

// mma.m16n8k8 tf32: a0 (g, t), a1 (g+8, t), a2 (g, t+4), a3 (g+8, t+4); b0 (k t, n g), b1 (k t+4, n
// g); c as above.
inline void MmaTf32(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
  const uint32_t in[6] = {a[0], a[1], a[2], a[3], b[0], b[1]};
  ::moe::emu::Exchange(in, 6, nullptr, [&](const uint32_t(*w)[8], const void* const*) {
    float A[16][8], B[8][8];
    for (int l = 0; l < 32; ++l) {
      const int g = l / 4, t = l % 4;
      for (int i = 0; i < 4; ++i) A[g + 8 * (i % 2)][t + 4 * (i / 2)] = ::moe::emu::Tf32(w[l][i]);
      for (int i = 0; i < 2; ++i) B[t + 4 * i][g] = ::moe::emu::Tf32(w[l][4 + i]);
    }
    const int g = LaneId() / 4, t = LaneId() % 4;
    for (int i = 0; i < 4; ++i) {
      const int row = g + 8 * (i / 2), col = 2 * t + i % 2;
      float acc = d[i];
      for (int k = 0; k < 8; ++k) acc += A[row][k] * B[k][col];
      d[i] = acc;
    }
    return 0;
  });
}

// cvt.rna.tf32.f32: round to nearest, ties away from zero, at 10 mantissa bits.
inline uint32_t ToTf32(float x) {
  uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  if ((u & 0x7f800000u) == 0x7f800000u) return u;  // inf, NaN
  return (u + 0x1000u) & 0xffffe000u;
}

inline void CpAsync16(void* smem, const void* gmem, bool valid) {
  ::moe::emu::CheckShared(smem, 16, 16);
  if (valid && reinterpret_cast<uintptr_t>(gmem) % 16 != 0)
    ::moe::emu::Fail("a misaligned cp.async source");
  std::memset(smem, 0xFF, 16);
  ::moe::emu::Self().open.push_back({smem, gmem, valid});
}
inline void CpAsyncCommit() {
  auto& self = ::moe::emu::Self();
  self.groups.push_back(std::move(self.open));
  self.open.clear();
}
template <int N>
void CpAsyncWait() {
  auto& self = ::moe::emu::Self();
  while (self.groups.size() > static_cast<size_t>(N)) {
    for (const auto& c : self.groups.front()) {
      if (c.valid) {
        std::memcpy(c.dst, c.src, 16);
      } else {
        std::memset(c.dst, 0, 16);
      }
    }
    self.groups.pop_front();
  }
}

}  // namespace moe::kernels::cuda::mma

// The routing kernels' primitives (kernels/cuda/routing_kernels.cuh): a warp ballot through the
// same exchange as the other warp collectives; atomics on host memory that the block's threads
// share.
namespace moe::kernels::cuda::routing {

inline unsigned Ballot(bool p) {
  const uint32_t in = p ? 1u : 0u;
  return ::moe::emu::Exchange(&in, 1, nullptr, [](const uint32_t(*w)[8], const void* const*) {
    unsigned mask = 0;
    for (int l = 0; l < 32; ++l) mask |= (w[l][0] & 1u) << l;
    return mask;
  });
}
inline int PopCount(unsigned x) { return __builtin_popcount(x); }
inline void AtomicAdd(unsigned* p, unsigned v) { std::atomic_ref<unsigned>(*p).fetch_add(v); }
inline void AtomicAdd(unsigned long long* p, unsigned long long v) {
  std::atomic_ref<unsigned long long>(*p).fetch_add(v);
}
inline void AtomicOr(unsigned* p, unsigned v) { std::atomic_ref<unsigned>(*p).fetch_or(v); }

}  // namespace moe::kernels::cuda::routing

// The element-wise families' built-ins (kernels/cuda/device_common.cuh and the <family>_kernels.cuh
// headers).
template <typename T>
T __shfl_xor_sync(unsigned /*mask: every lane takes part, as the kernels use it*/, T v, int mask) {
  static_assert(sizeof(T) == 4 || sizeof(T) == 8, "__shfl_xor_sync: 4- or 8-byte values");
  uint32_t in[2] = {0, 0};
  std::memcpy(in, &v, sizeof(T));
  return ::moe::emu::Exchange(in, 2, nullptr, [&](const uint32_t(*w)[8], const void* const*) {
    T r;
    std::memcpy(&r, &w[::moe::emu::Self().lane ^ mask][0], sizeof(T));
    return r;
  });
}
template <typename T>
T atomicAdd(T* p, T v) {
  static_assert(std::is_arithmetic_v<T>, "atomicAdd: a number");
  return std::atomic_ref<T>(*p).fetch_add(v);
}
inline unsigned atomicOr(unsigned* p, unsigned v) {
  return std::atomic_ref<unsigned>(*p).fetch_or(v);
}
inline float rsqrtf(float x) { return 1.f / sqrtf(x); }
template <typename A, typename B>
std::common_type_t<A, B> min(A a, B b) {
  return b < a ? b : a;
}
template <typename A, typename B>
std::common_type_t<A, B> max(A a, B b) {
  return a < b ? b : a;
}
