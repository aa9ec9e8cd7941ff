/* The cost of one allocation and its free through somalloc's C ABI, in the
 * configuration SOMALLOC_CONF gives, beside the runtime's own
 * cudaMallocAsync / cudaFreeAsync (hipMallocAsync / hipFreeAsync) called
 * directly in the same process, on the same stream, with the same sizes.
 *
 *   SOMALLOC_CONF=... capi_cost STEPS [legacy]
 *
 * A step is 8 rounds of 8 allocations (256 B to 8 MiB) freed in the reverse
 * order, on a stream the program creates (with `legacy`: on the legacy
 * default stream, handle 0, which PyTorch's default stream is). Prints one line: nanoseconds per
 * allocation + free for the runtime and for somalloc, their ratio, and
 * somalloc's plan and cache counters, then what the two questions somalloc
 * asks the runtime on every call cost here: is the stream capturing
 * (StreamGetCaptureInfo) and which device is current (GetDevice). With
 * `trace:PATH` the run records the
 * trace that a later `plan:PATH` run is served from. Without a GPU: one
 * SKIP line. */
#define _POSIX_C_SOURCE 199309L
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "runtime.h" /* capi/tests/c */
#include "somalloc.h"

typedef int (*stream_create_t)(void **, unsigned);
typedef int (*stream_void_t)(void *);
typedef int (*malloc_async_t)(void **, size_t, void *);
typedef int (*free_async_t)(void *, void *);
typedef int (*capture_info_t)(void *, int *, unsigned long long *);
typedef int (*get_device_t)(int *);
static stream_create_t stream_create;
static capture_info_t capture_info;
static get_device_t get_device;
static stream_void_t stream_sync;
static malloc_async_t malloc_async;
static free_async_t free_async;

static int load_runtime(void) {
  if (!open_runtime()) return 0;
  RUNTIME_FN(stream_create, stream_create_t, "StreamCreateWithFlags")
  RUNTIME_FN(stream_sync, stream_void_t, "StreamSynchronize")
  RUNTIME_FN(malloc_async, malloc_async_t, "MallocAsync")
  RUNTIME_FN(free_async, free_async_t, "FreeAsync")
  RUNTIME_FN(get_device, get_device_t, "GetDevice")
  /* The capture query under either of its names (CUDA 12 had a _v2). */
  capture_info = (capture_info_t)runtime_fn("StreamGetCaptureInfo");
  if (!capture_info) capture_info = (capture_info_t)runtime_fn("StreamGetCaptureInfo_v2");
  return 1;
}

static const size_t SIZES[8] = {256, 4096, 65536, 1 << 20, 3 << 20, 512, 8 << 20, 100000};

static double now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e9 + (double)t.tv_nsec;
}

/* Runs `steps` steps through somalloc (`raw` 0) or the runtime (`raw` 1);
 * returns nanoseconds per allocation + free, or a negative value on an
 * error. */
static double run(int raw, long steps, void *stream) {
  void *ptr[8];
  double t0 = now_ns();
  for (long s = 0; s < steps; s++) {
    for (int r = 0; r < 8; r++) {
      for (int i = 0; i < 8; i++) {
        if (raw) {
          if (malloc_async(&ptr[i], SIZES[i], stream)) return -1;
        } else if (somalloc_malloc(&ptr[i], SIZES[i], 0, stream) != SOMALLOC_STATUS_OK) {
          return -1;
        }
      }
      for (int i = 7; i >= 0; i--) {
        if (raw) {
          if (free_async(ptr[i], stream)) return -1;
        } else if (somalloc_free(ptr[i], SIZES[i], 0, stream) != SOMALLOC_STATUS_OK) {
          return -1;
        }
      }
    }
  }
  double t1 = now_ns();
  return (t1 - t0) / ((double)steps * 64);
}

/* Nanoseconds per call of the runtime's capture query (`what` 0) or of
 * GetDevice (`what` 1), `n` calls. */
static double question(int what, long n, void *stream) {
  int status = 0, dev = 0;
  unsigned long long id = 0;
  double t0 = now_ns();
  for (long i = 0; i < n; i++) {
    if (what == 0 ? capture_info(stream, &status, &id) : get_device(&dev)) return -1;
  }
  return (now_ns() - t0) / (double)n;
}

int main(int argc, char **argv) {
  long steps = argc > 1 ? strtol(argv[1], NULL, 10) : 1000;
  int legacy = argc > 2 && strcmp(argv[2], "legacy") == 0;
  if (steps < 1 || (argc > 2 && !legacy)) {
    fprintf(stderr, "usage: capi_cost STEPS [legacy]\n");
    return 2;
  }
  int count = 0;
  if (somalloc_device_count(&count) != SOMALLOC_STATUS_OK || count == 0) {
    printf("SKIP capi_cost: no GPU (%s)\n", somalloc_last_error_message());
    return 0;
  }
  if (!load_runtime()) {
    printf("capi_cost: the runtime loads in somalloc but not here (dlopen)\n");
    return 1;
  }
  void *stream = NULL;
  if (!legacy && stream_create(&stream, 1)) {
    printf("capi_cost: no stream\n");
    return 1;
  }
  /* One step each first, untimed: the pools grow to what a step needs. */
  if (run(1, 1, stream) < 0 || run(0, 1, stream) < 0) {
    printf("capi_cost: an allocation failed (%s)\n", somalloc_last_error_message());
    return 1;
  }
  double raw = run(1, steps, stream);
  double ours = run(0, steps, stream);
  stream_sync(stream);
  if (raw < 0 || ours < 0) {
    printf("capi_cost: an allocation failed (%s)\n", somalloc_last_error_message());
    return 1;
  }
  SomallocStats st;
  memset(&st, 0, sizeof st);
  somalloc_stats(0, &st, sizeof st);
  const char *conf = getenv("SOMALLOC_CONF");
  printf("capi_cost: %s%s: %ld steps of 64; runtime %.1f ns, somalloc %.1f ns per allocate + free "
         "(%.3f x); plan served %llu, refused %llu; cache hits %llu, misses %llu\n",
         conf ? conf : "(defaults)", legacy ? ", legacy stream" : "", steps, raw, ours, ours / raw,
         (unsigned long long)st.plan_served, (unsigned long long)st.plan_refused,
         (unsigned long long)st.cache_hits, (unsigned long long)st.cache_misses);
  if (capture_info) {
    long n = steps * 64;
    printf("capi_cost: the runtime's questions: capture query %.1f ns, current device %.1f ns per call\n",
           question(0, n, stream), question(1, n, stream));
  }
  return 0;
}
