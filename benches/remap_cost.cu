// What a page arena's remap costs on this device: the driver's
// virtual-memory calls on pages of the allocation granularity (2 MiB on
// current NVIDIA GPUs), each timed over many pages.
//
//   nvcc -O2 -o remap_cost benches/remap_cost.cu -lcuda && ./remap_cost [pages]
//
// Prints microseconds per call for: creating a page (cuMemCreate), mapping
// it (cuMemMap), granting the device access to it (cuMemSetAccess, per page
// and once over a run of pages), unmapping it (cuMemUnmap), and a whole
// remap: unmap an idle page and map its memory at another address with
// access, as `somalloc-trace simulate`'s remap model counts them. It also
// times the wait a remap needs when the page's last user may still be
// running: a stream synchronize on an idle stream (the least it costs).
#include <cuda.h>
#include <cuda_runtime.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#define CHECK(call)                                                                  \
  do {                                                                               \
    CUresult r_ = (call);                                                            \
    if (r_ != CUDA_SUCCESS) {                                                        \
      const char* s_ = nullptr;                                                      \
      cuGetErrorString(r_, &s_);                                                     \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, s_ ? s_ : "?"); \
      std::exit(1);                                                                  \
    }                                                                                \
  } while (0)

using Clock = std::chrono::steady_clock;

static double us_since(Clock::time_point t0, size_t n) {
  return std::chrono::duration<double, std::micro>(Clock::now() - t0).count() / double(n);
}

int main(int argc, char** argv) {
  size_t pages = argc > 1 ? std::strtoul(argv[1], nullptr, 10) : 512;
  if (pages < 2) pages = 2;
  if (cudaFree(nullptr) != cudaSuccess) {
    std::fprintf(stderr, "no CUDA device\n");
    return 1;
  }
  CUdevice dev;
  CHECK(cuCtxGetDevice(&dev));
  char name[256];
  CHECK(cuDeviceGetName(name, sizeof name, dev));

  CUmemAllocationProp prop = {};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = dev;
  size_t page = 0;
  CHECK(cuMemGetAllocationGranularity(&page, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
  CUmemAccessDesc access = {};
  access.location = prop.location;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;

  // Two ranges of `pages` pages: the pages start in the first, remaps move
  // them to the second.
  CUdeviceptr base = 0;
  CHECK(cuMemAddressReserve(&base, 2 * pages * page, 0, 0, 0));
  std::vector<CUmemGenericAllocationHandle> h(pages);

  auto t0 = Clock::now();
  for (size_t i = 0; i < pages; i++) CHECK(cuMemCreate(&h[i], page, &prop, 0));
  double create = us_since(t0, pages);

  t0 = Clock::now();
  for (size_t i = 0; i < pages; i++) CHECK(cuMemMap(base + i * page, page, 0, h[i], 0));
  double map = us_since(t0, pages);

  t0 = Clock::now();
  for (size_t i = 0; i < pages; i++) CHECK(cuMemSetAccess(base + i * page, page, &access, 1));
  double access_each = us_since(t0, pages);

  t0 = Clock::now();
  for (size_t i = 0; i < pages; i++) CHECK(cuMemUnmap(base + i * page, page));
  double unmap = us_since(t0, pages);

  // Map again, then grant access once over the whole run.
  for (size_t i = 0; i < pages; i++) CHECK(cuMemMap(base + i * page, page, 0, h[i], 0));
  t0 = Clock::now();
  CHECK(cuMemSetAccess(base, pages * page, &access, 1));
  double access_run = std::chrono::duration<double, std::micro>(Clock::now() - t0).count();

  // Remaps: each page leaves the first range for the second.
  t0 = Clock::now();
  for (size_t i = 0; i < pages; i++) {
    CUdeviceptr from = base + i * page, to = base + (pages + i) * page;
    CHECK(cuMemUnmap(from, page));
    CHECK(cuMemMap(to, page, 0, h[i], 0));
    CHECK(cuMemSetAccess(to, page, &access, 1));
  }
  double remap = us_since(t0, pages);

  // The device can use the moved pages.
  CHECK(cuMemsetD8(base + pages * page, 0x5a, pages * page));
  CHECK(cuCtxSynchronize());
  unsigned char probe = 0;
  CHECK(cuMemcpyDtoH(&probe, base + (2 * pages - 1) * page + page - 1, 1));
  if (probe != 0x5a) {
    std::fprintf(stderr, "a remapped page does not hold what was written (%#x)\n", probe);
    return 1;
  }

  cudaStream_t s;
  cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  const int syncs = 1000;
  t0 = Clock::now();
  for (int i = 0; i < syncs; i++) cudaStreamSynchronize(s);
  double sync = us_since(t0, syncs);
  cudaStreamDestroy(s);

  for (size_t i = 0; i < pages; i++) CHECK(cuMemUnmap(base + (pages + i) * page, page));
  for (size_t i = 0; i < pages; i++) CHECK(cuMemRelease(h[i]));
  CHECK(cuMemAddressFree(base, 2 * pages * page));

  std::printf("%s, page %zu KiB, %zu pages\n", name, page >> 10, pages);
  std::printf("cuMemCreate             %8.2f us per page\n", create);
  std::printf("cuMemMap                %8.2f us per page\n", map);
  std::printf("cuMemSetAccess          %8.2f us per page\n", access_each);
  std::printf("cuMemSetAccess, a run   %8.2f us per page (%.1f us for %zu pages)\n",
              access_run / double(pages), access_run, pages);
  std::printf("cuMemUnmap              %8.2f us per page\n", unmap);
  std::printf("remap (unmap+map+access)%8.2f us per page\n", remap);
  std::printf("stream synchronize, idle%8.2f us\n", sync);
  return 0;
}
