// Does this compute-sanitizer's racecheck finish a program whose host
// threads use the GPU at the same time? ci/sanitize.sh runs it before the
// racecheck pass and decides from the answer which tests racecheck can run.
//
// Plain CUDA runtime, no somalloc: THREADS host threads (default 8), each
// with its own stream, repeat ITERATIONS times (default 200): stream-ordered
// allocate, fill kernel, verify kernel, copy the mismatch count back,
// synchronize, stream-ordered free. Without a tool it finishes in about a
// second; exit 0 means every thread finished with no bad byte.
//
//   racecheck-probe [THREADS [ITERATIONS]]
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

#define CHECK(call)                                                                     \
    do {                                                                                \
        cudaError_t err_ = (call);                                                      \
        if (err_ != cudaSuccess) {                                                      \
            std::fprintf(stderr, "racecheck-probe: %s: %s\n", #call, cudaGetErrorString(err_)); \
            std::exit(2);                                                               \
        }                                                                               \
    } while (0)

__device__ unsigned char probe_byte(size_t i, unsigned seed) { return (unsigned char)(i * 31u + seed); }

__global__ void probe_fill(unsigned char* p, size_t n, unsigned seed) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        p[i] = probe_byte(i, seed);
}

__global__ void probe_verify(const unsigned char* p, size_t n, unsigned seed, unsigned long long* bad) {
    unsigned long long count = 0;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        count += p[i] != probe_byte(i, seed);
    if (count != 0) atomicAdd(bad, count);
}

int main(int argc, char** argv) {
    const int threads = argc > 1 ? std::atoi(argv[1]) : 8;
    const int iterations = argc > 2 ? std::atoi(argv[2]) : 200;
    CHECK(cudaFree(nullptr));
    std::atomic<unsigned long long> bad_total{0};
    std::atomic<int> finished{0};
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t) {
        pool.emplace_back([&, t] {
            cudaStream_t s;
            CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
            for (int i = 0; i < iterations; ++i) {
                const size_t n = 256 + (size_t)((t * 7919 + i * 104729) % (2 << 20));
                const unsigned seed = (unsigned)(t * 1000 + i);
                unsigned char* data;
                unsigned long long* bad;
                unsigned long long host = 0;
                CHECK(cudaMallocAsync(reinterpret_cast<void**>(&data), n, s));
                CHECK(cudaMallocAsync(reinterpret_cast<void**>(&bad), sizeof *bad, s));
                CHECK(cudaMemsetAsync(bad, 0, sizeof *bad, s));
                probe_fill<<<256, 256, 0, s>>>(data, n, seed);
                probe_verify<<<256, 256, 0, s>>>(data, n, seed, bad);
                CHECK(cudaGetLastError());
                CHECK(cudaMemcpyAsync(&host, bad, sizeof host, cudaMemcpyDeviceToHost, s));
                CHECK(cudaStreamSynchronize(s));
                bad_total += host;
                CHECK(cudaFreeAsync(bad, s));
                CHECK(cudaFreeAsync(data, s));
            }
            CHECK(cudaStreamSynchronize(s));
            CHECK(cudaStreamDestroy(s));
            ++finished;
        });
    }
    for (auto& th : pool) th.join();
    std::printf("racecheck-probe: %d of %d threads finished %d iterations, %llu bad bytes\n", finished.load(), threads,
                iterations, bad_total.load());
    return bad_total.load() == 0 && finished.load() == threads ? 0 : 1;
}
