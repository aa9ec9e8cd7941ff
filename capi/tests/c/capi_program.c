/* A C program on libsomalloc.so: configuration and bad input first (no GPU
 * needed), then, on a GPU, allocations on several streams (the legacy and
 * per-thread default streams included) with their contents checked,
 * statistics, refused frees, out of memory, threads, flush/trim/empty-cache.
 * Prints one SKIP line without a GPU, else "N passed, N failed". */
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime.h"
#include "somalloc.h"

static int passed = 0, failed = 0;

#define CHECK(cond, ...)                                           \
  do {                                                             \
    if (cond) {                                                    \
      passed++;                                                    \
    } else {                                                       \
      failed++;                                                    \
      fprintf(stderr, "FAILED %s:%d: %s: ", __FILE__, __LINE__, #cond); \
      fprintf(stderr, __VA_ARGS__);                                \
      fprintf(stderr, " (last error: %s)\n", somalloc_last_error_message()); \
    }                                                              \
  } while (0)

/* The few runtime calls the checks need, looked up by name: the same
 * signatures in CUDA and HIP. */
typedef int (*stream_create_t)(void **, unsigned);
typedef int (*stream_void_t)(void *);
typedef int (*memset_t)(void *, int, size_t, void *);
typedef int (*memcpy_t)(void *, const void *, size_t, int, void *);
static stream_create_t stream_create;
static stream_void_t stream_sync, stream_destroy;
static memset_t memset_async;
static memcpy_t memcpy_async;

static int load_runtime(void) {
  if (!open_runtime()) return 0;
  RUNTIME_FN(stream_create, stream_create_t, "StreamCreateWithFlags")
  RUNTIME_FN(stream_sync, stream_void_t, "StreamSynchronize")
  RUNTIME_FN(stream_destroy, stream_void_t, "StreamDestroy")
  RUNTIME_FN(memset_async, memset_t, "MemsetAsync")
  RUNTIME_FN(memcpy_async, memcpy_t, "MemcpyAsync")
  return 1;
}

/* Fills `size` bytes on `stream` with `value` and reads back the first and
 * last byte on the same stream. */
static int filled(void *p, size_t size, int value, void *stream) {
  unsigned char first = 0, last = 0;
  if (memset_async(p, value, size, stream)) return 0;
  if (memcpy_async(&first, p, 1, 2, stream)) return 0;
  if (memcpy_async(&last, (char *)p + size - 1, 1, 2, stream)) return 0;
  if (stream_sync(stream)) return 0;
  return first == (unsigned char)value && last == (unsigned char)value;
}

static void stats_of(int device, SomallocStats *s) {
  memset(s, 0, sizeof *s);
  SomallocStatus st = somalloc_stats(device, s, sizeof *s);
  CHECK(st == SOMALLOC_STATUS_OK, "stats: %d", st);
}

struct worker {
  int device, errors;
  void *own;
};

/* Each thread: its per-thread default stream and a stream of its own. */
static void *work(void *arg) {
  struct worker *w = arg;
  void *streams[2] = {(void *)0x2, w->own};
  for (int i = 0; i < 400; i++) {
    void *s = streams[i % 2], *p = NULL;
    size_t size = (size_t)256 << (i % 12);
    if (somalloc_malloc(&p, size, w->device, s) != SOMALLOC_STATUS_OK || !p) {
      w->errors++;
      continue;
    }
    if (i % 50 == 0 && !filled(p, size, i & 0xff, s)) w->errors++;
    if (somalloc_free(p, size, w->device, s) != SOMALLOC_STATUS_OK) w->errors++;
  }
  if (stream_sync((void *)0x2) || stream_sync(w->own)) w->errors++;
  return NULL;
}

int main(void) {
  /* --- No GPU needed: configuration and argument checks. --- */
  CHECK(somalloc_configure("bogus:1") == SOMALLOC_STATUS_CONFIG, "an unknown key");
  CHECK(strstr(somalloc_last_error_message(), "bogus") != NULL, "the text names the key");
  CHECK(somalloc_last_error() == SOMALLOC_STATUS_CONFIG, "the last error");
  CHECK(somalloc_configure("trace:on") == SOMALLOC_STATUS_CONFIG, "trace needs a path");
  /* CAPI_PROGRAM_TRACE: record everything into that trace file too.
   * CAPI_PROGRAM_PLAN: a plan (plan:) from a file no plan can be made of:
   * every check passes all the same, the plan not used. */
  const char *trace = getenv("CAPI_PROGRAM_TRACE");
  const char *plan = getenv("CAPI_PROGRAM_PLAN");
  char conf[2048];
  snprintf(conf, sizeof conf, "cache:on, cache_per_stream_cap:64MiB, release_threshold:max%s%s%s%s",
           trace ? ", trace:" : "", trace ? trace : "", plan ? ", plan:" : "", plan ? plan : "");
  CHECK(somalloc_configure(conf) == SOMALLOC_STATUS_OK, "a good configuration");
  CHECK(somalloc_last_error() == SOMALLOC_STATUS_OK && somalloc_last_error_message()[0] == 0,
        "a success clears the last error");
  CHECK(somalloc_malloc(NULL, 16, 0, NULL) == SOMALLOC_STATUS_INVALID_ARGUMENT, "NULL out-pointer");
  CHECK(somalloc_free(NULL, 0, 0, NULL) == SOMALLOC_STATUS_OK, "free(NULL, 0) does nothing");
  CHECK(somalloc_stats(0, NULL, 0) == SOMALLOC_STATUS_INVALID_ARGUMENT, "NULL stats");
  CHECK(somalloc_plan_status(0, NULL, NULL, 0) == SOMALLOC_STATUS_INVALID_ARGUMENT, "NULL plan status");
  CHECK(strcmp(somalloc_backend(), "cuda") == 0 || strcmp(somalloc_backend(), "rocm") == 0, "backend");

  int count = 0;
  SomallocStatus st = somalloc_device_count(&count);
  if (st == SOMALLOC_STATUS_RUNTIME_NOT_FOUND || st == SOMALLOC_STATUS_NO_DEVICE) {
    /* Without a GPU the allocation calls say so too, with a status. */
    void *p = (void *)1;
    CHECK(somalloc_malloc(&p, 4096, 0, NULL) == st && p == NULL, "malloc without a GPU");
    CHECK(strlen(somalloc_last_error_message()) > 0, "a text");
    if (failed) {
      printf("%d passed, %d failed\n", passed, failed);
      return 1;
    }
    printf("SKIP capi_program: no GPU (%s)\n", somalloc_last_error_message());
    return 0;
  }
  CHECK(st == SOMALLOC_STATUS_OK && count > 0, "device count %d, status %d", count, st);
  if (!load_runtime()) {
    printf("capi_program: the runtime loads in somalloc but not here (dlopen)\n");
    return 1;
  }

  /* --- Several streams of device 0, the default streams included. --- */
  void *s1 = NULL, *s2 = NULL;
  CHECK(stream_create(&s1, 1) == 0 && stream_create(&s2, 1) == 0, "streams");
  void *streams[4] = {NULL, (void *)0x2, s1, s2};
  const char *names[4] = {"legacy", "per-thread", "s1", "s2"};
  size_t sizes[] = {1, 255, 4096, 1 << 20, (3 << 20) + 5, 100 << 20};
  SomallocStats before, after;
  stats_of(0, &before);
  for (int s = 0; s < 4; s++) {
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
      for (int round = 0; round < 2; round++) {
        void *p = NULL;
        st = somalloc_malloc(&p, sizes[i], 0, streams[s]);
        CHECK(st == SOMALLOC_STATUS_OK && p != NULL, "%s: malloc %zu", names[s], sizes[i]);
        if (!p) continue;
        CHECK(((uintptr_t)p & 255) == 0, "aligned");
        CHECK(filled(p, sizes[i], 0x40 + s + (int)i, streams[s]), "%s: contents of %zu bytes", names[s], sizes[i]);
        CHECK(somalloc_free(p, sizes[i], 0, streams[s]) == SOMALLOC_STATUS_OK, "%s: free", names[s]);
      }
    }
  }
  stats_of(0, &after);
  CHECK(after.allocations - before.allocations == 48, "allocations counted: %llu",
        (unsigned long long)(after.allocations - before.allocations));
  CHECK(after.frees - before.frees == 48, "frees counted");
  CHECK(after.cache_enabled == 1, "the cache tier is on");
  /* Second rounds of cacheable sizes on the three cached streams hit
   * (the per-thread stream goes to the pool). */
  CHECK(after.cache_hits - before.cache_hits >= 3 * 5, "hits: %llu",
        (unsigned long long)(after.cache_hits - before.cache_hits));
  CHECK(after.cache_streams == 3, "caches for legacy, s1, s2 only: %llu",
        (unsigned long long)after.cache_streams);
  CHECK(after.live_allocations == 0 && after.live_bytes == 0, "nothing live");

  /* --- What became of plan: (none asked for, or one not used). --- */
  uint64_t plan_status = 99;
  char why[512] = "unset";
  CHECK(somalloc_plan_status(0, &plan_status, why, sizeof why) == SOMALLOC_STATUS_OK, "plan status");
  CHECK(plan_status == (uint64_t)(plan ? SOMALLOC_PLAN_NOT_USED : SOMALLOC_PLAN_OFF), "plan status %llu",
        (unsigned long long)plan_status);
  CHECK(after.plan_status == plan_status, "the statistic says the same");
  CHECK((why[0] != 0) == (plan != NULL), "a reason only for a plan not used: %s", why);
  CHECK(after.plan_arena_bytes == 0 && after.plan_served == 0, "nothing served from a plan");
  char tiny[4] = "xxx";
  CHECK(somalloc_plan_status(0, &plan_status, tiny, 1) == SOMALLOC_STATUS_OK && tiny[0] == 0,
        "a reason cut to fit");

  /* --- Bad frees are refused and change nothing. --- */
  void *p = NULL;
  CHECK(somalloc_malloc(&p, 1000, 0, s1) == SOMALLOC_STATUS_OK, "malloc");
  CHECK(somalloc_free(p, 999, 0, s1) == SOMALLOC_STATUS_WRONG_SIZE, "wrong size");
  CHECK(strstr(somalloc_last_error_message(), "1000 bytes") != NULL, "the text says the size");
  st = somalloc_free(p, 1000, count, s1);
  CHECK(st == SOMALLOC_STATUS_INVALID_DEVICE, "a device that does not exist: %d", st);
  if (count > 1) {
    CHECK(somalloc_free(p, 1000, 1, NULL) == SOMALLOC_STATUS_WRONG_DEVICE, "another device");
  }
  CHECK(somalloc_free((char *)p + 256, 1000, 0, s1) == SOMALLOC_STATUS_UNKNOWN_POINTER, "inside a block");
  CHECK(somalloc_free(p, 1000, 0, s1) == SOMALLOC_STATUS_OK, "the right free");
  CHECK(somalloc_free(p, 1000, 0, s1) == SOMALLOC_STATUS_UNKNOWN_POINTER, "a second free");
  CHECK(somalloc_free((void *)0x1234500, 64, 0, s1) == SOMALLOC_STATUS_UNKNOWN_POINTER, "a foreign pointer");
  CHECK(somalloc_free(NULL, 64, 0, s1) == SOMALLOC_STATUS_UNKNOWN_POINTER, "NULL with a size");
  p = (void *)1;
  CHECK(somalloc_malloc(&p, 64, -1, NULL) == SOMALLOC_STATUS_INVALID_DEVICE && p == NULL, "device -1");
  CHECK(somalloc_malloc(&p, 0, 0, NULL) == SOMALLOC_STATUS_OK && p == NULL, "0 bytes: NULL");
  stats_of(0, &after);
  CHECK(after.failed_frees - before.failed_frees >= 4, "refused frees counted: %llu",
        (unsigned long long)(after.failed_frees - before.failed_frees));
  CHECK(after.live_allocations == 0, "nothing live after the refusals");

  /* --- Out of memory is a status and a text. --- */
  p = (void *)1;
  st = somalloc_malloc(&p, (size_t)1 << 50, 0, s1);
  CHECK(st == SOMALLOC_STATUS_OUT_OF_MEMORY && p == NULL, "1 PiB: status %d", st);
  CHECK(strstr(somalloc_last_error_message(), "out of memory") != NULL, "the text");

  /* --- A block freed on another stream than its own. --- */
  CHECK(somalloc_malloc(&p, 1 << 16, 0, s1) == SOMALLOC_STATUS_OK, "malloc on s1");
  CHECK(filled(p, 1 << 16, 7, s1), "contents");
  CHECK(somalloc_free(p, 1 << 16, 0, s2) == SOMALLOC_STATUS_OK, "freed on s2");
  void *q = NULL;
  CHECK(somalloc_malloc(&q, 1 << 16, 0, s1) == SOMALLOC_STATUS_OK, "again on s1");
  CHECK(somalloc_free(q, 1 << 16, 0, s1) == SOMALLOC_STATUS_OK, "free");

  /* --- Threads: each on its per-thread stream and a stream of its own. --- */
  struct worker w[4];
  pthread_t t[4];
  for (int i = 0; i < 4; i++) {
    w[i].device = 0;
    w[i].errors = 0;
    CHECK(stream_create(&w[i].own, 1) == 0, "a thread's stream");
    pthread_create(&t[i], NULL, work, &w[i]);
  }
  for (int i = 0; i < 4; i++) {
    pthread_join(t[i], NULL);
    CHECK(w[i].errors == 0, "thread %d: %d errors", i, w[i].errors);
    CHECK(somalloc_stream_forget(0, w[i].own) == SOMALLOC_STATUS_OK, "forget");
    CHECK(stream_sync(w[i].own) == 0 && stream_destroy(w[i].own) == 0, "destroy");
  }

  /* --- Flush, trim, empty the caches, forget. --- */
  CHECK(somalloc_flush(0) == SOMALLOC_STATUS_OK, "flush");
  stats_of(0, &after);
  CHECK(after.cache_cached_bytes == 0, "nothing cached after a flush");
  CHECK(somalloc_trim(-1, 0) == SOMALLOC_STATUS_OK, "trim");
  CHECK(somalloc_empty_cache(-1) == SOMALLOC_STATUS_OK, "empty cache");
  stats_of(0, &after);
  CHECK(after.pool_used_bytes == 0, "the pool holds nothing used: %llu",
        (unsigned long long)after.pool_used_bytes);
  CHECK(somalloc_stream_forget(0, s1) == SOMALLOC_STATUS_OK, "forget s1");
  CHECK(somalloc_stream_forget(0, s2) == SOMALLOC_STATUS_OK, "forget s2");
  CHECK(stream_destroy(s1) == 0 && stream_destroy(s2) == 0, "destroy");
  CHECK(somalloc_configure("cache:off") == SOMALLOC_STATUS_BUSY, "configuration after use");
  CHECK(somalloc_configure(conf) == SOMALLOC_STATUS_OK, "the same configuration again");

  printf("%d passed, %d failed\n", passed, failed);
  return failed ? 1 : 0;
}
