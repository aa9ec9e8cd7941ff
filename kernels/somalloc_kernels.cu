// Test kernels for somalloc, written in the subset of C++ that both nvcc (CUDA)
// and hipcc (HIP) accept. They are loaded at run time from an embedded code
// object and launched through the backend contract; the library itself never
// needs them.
//
// Every kernel uses a grid-stride loop so that any launch shape covers any
// length, and byte-wise access so that odd sizes (1 B, 3 B, ...) work.

#if defined(__HIPCC__)
#include <hip/hip_runtime.h>
#endif

// A well-mixed byte derived from (index, seed). Neighbouring indices and
// neighbouring seeds give unrelated bytes, so an overlap between two buffers
// filled with different seeds shows up as mismatches in at least one of them.
__device__ __forceinline__ unsigned char somalloc_pattern(unsigned long long i, unsigned int seed) {
    unsigned long long x = i * 0x9E3779B97F4A7C15ull + (unsigned long long)seed * 0xBF58476D1CE4E5B9ull + 0x94D049BB133111EBull;
    x ^= x >> 31;
    x *= 0xD6E8FEB86659FD93ull;
    x ^= x >> 29;
    return (unsigned char)(x & 0xFF);
}

extern "C" __global__ void somalloc_fill(unsigned char* data, unsigned long long n, unsigned int seed) {
    unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        data[i] = somalloc_pattern(i, seed);
    }
}

// Adds the number of bytes that differ from the pattern to *mismatches.
extern "C" __global__ void somalloc_verify(const unsigned char* data, unsigned long long n, unsigned int seed,
                                           unsigned long long* mismatches) {
    unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    unsigned long long bad = 0;
    for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        if (data[i] != somalloc_pattern(i, seed)) {
            bad += 1;
        }
    }
    if (bad != 0) {
        atomicAdd(mismatches, bad);
    }
}

// Busy-waits for at least `cycles` clock cycles of the SM it runs on. One
// thread is enough: the point is to keep the stream busy, not the device.
extern "C" __global__ void somalloc_spin(unsigned long long cycles) {
    long long start = clock64();
    while ((unsigned long long)(clock64() - start) < cycles) {
    }
}

// The seeds' processKernel: data[i] = sqrt(i).
extern "C" __global__ void somalloc_process(float* data, int n) {
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx < n) {
        data[idx] = sqrtf((float)idx);
    }
}

// data[i] = i * mul + add (32-bit words, wrapping): a per-index pattern that
// a graph can write on every replay.
extern "C" __global__ void somalloc_iota_u32(unsigned int* data, unsigned long long n, unsigned int mul,
                                             unsigned int add) {
    unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        data[i] = (unsigned int)i * mul + add;
    }
}

// dst[i] += a * src[i] (wrapping): accumulates one contribution per replay,
// so that after k replays dst holds k times the sum of what each replay read.
extern "C" __global__ void somalloc_axpy_u32(unsigned int* dst, const unsigned int* src, unsigned long long n,
                                             unsigned int a) {
    unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        dst[i] += a * src[i];
    }
}

// data[i] += value (wrapping).
extern "C" __global__ void somalloc_add_u32(unsigned int* data, unsigned long long n, unsigned int value) {
    unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        data[i] += value;
    }
}
