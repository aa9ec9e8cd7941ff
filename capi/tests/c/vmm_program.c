/* pool:vmm through the C ABI: argument checks first (no GPU needed), then,
 * on a GPU, allocations on the legacy, per-thread and a created stream with
 * their contents checked, the arena's statistics, its segments (every live
 * allocation lies inside them, but those of the per-thread default stream,
 * which the device's pool serves: the handle names another stream on every
 * thread), and trim / empty-cache giving the arena's
 * idle chunks back to the device. Configured from SOMALLOC_CONF when it is
 * set (it must name pool:vmm; e.g. "pool:vmm,cache:off"), else with
 * "pool:vmm". Prints one SKIP line without a GPU, else "N passed, N failed". */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime.h"
#include "somalloc.h"

static int passed = 0, failed = 0;

#define CHECK(cond, ...)                                                     \
  do {                                                                       \
    if (cond) {                                                              \
      passed++;                                                              \
    } else {                                                                 \
      failed++;                                                              \
      fprintf(stderr, "FAILED %s:%d: %s: ", __FILE__, __LINE__, #cond);      \
      fprintf(stderr, __VA_ARGS__);                                          \
      fprintf(stderr, " (last error: %s)\n", somalloc_last_error_message()); \
    }                                                                        \
  } while (0)

#define MIB ((uint64_t)1 << 20)
#define U(x) ((unsigned long long)(x))

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

static SomallocStats stats_of(int device) {
  SomallocStats s;
  memset(&s, 0, sizeof s);
  SomallocStatus st = somalloc_stats(device, &s, sizeof s);
  CHECK(st == SOMALLOC_STATUS_OK, "stats: %d", st);
  return s;
}

/* The arena's segments of device 0 (malloc'd; *n of them). */
static SomallocSegment *segments_of(size_t *n) {
  *n = 0;
  CHECK(somalloc_segments(0, NULL, 0, n) == SOMALLOC_STATUS_OK, "count the segments");
  SomallocSegment *seg = calloc(*n + 1, sizeof *seg);
  size_t again = 0;
  CHECK(somalloc_segments(0, seg, *n, &again) == SOMALLOC_STATUS_OK && again == *n, "list %zu segments: %zu",
        *n, again);
  return seg;
}

/* Whether [p, p + size) lies inside the segments (address order; a block
 * may span adjacent ones). */
static int inside(const SomallocSegment *seg, size_t n, const void *p, size_t size) {
  uint64_t at = (uint64_t)(uintptr_t)p, end = at + size;
  for (size_t i = 0; i < n && at < end; i++)
    if (seg[i].address <= at && at < seg[i].address + seg[i].bytes) at = seg[i].address + seg[i].bytes;
  return at >= end;
}

/* The per-thread default stream's handle: its blocks are the pool's. */
#define PER_THREAD ((void *)0x2)

/* Checks the segments against the statistics and the live blocks: the
 * arena's inside a segment, the per-thread stream's (the pool's) outside. */
static void check_segments(const char *when, void **ptrs, const size_t *sizes, void **on, int count) {
  SomallocStats s = stats_of(0);
  size_t n = 0;
  SomallocSegment *seg = segments_of(&n);
  uint64_t total = 0;
  int ordered = 1;
  for (size_t i = 0; i < n; i++) {
    total += seg[i].bytes;
    if (i > 0 && seg[i - 1].address + seg[i - 1].bytes > seg[i].address) ordered = 0;
  }
  CHECK(ordered, "%s: segments in address order, none overlapping", when);
  CHECK(total == s.arena_mapped_bytes, "%s: segments add up to the mapped bytes: %llu of %llu", when, U(total),
        U(s.arena_mapped_bytes));
  int outside = 0, pools_inside = 0;
  for (int i = 0; i < count; i++) {
    if (!ptrs[i]) continue;
    int in = inside(seg, n, ptrs[i], sizes[i]);
    if (on[i] == PER_THREAD)
      pools_inside += in;
    else
      outside += !in;
  }
  CHECK(outside == 0, "%s: every live allocation of the arena inside a segment (%d outside, %zu segments)", when,
        outside, n);
  CHECK(pools_inside == 0, "%s: the per-thread stream's blocks (the pool's) in no segment (%d inside)", when,
        pools_inside);
  free(seg);
}

/* The bound trim must reach: 1.1 x the live bytes + 20 MiB. */
static void check_trimmed(const char *when) {
  SomallocStats s = stats_of(0);
  uint64_t bound = s.live_bytes + s.live_bytes / 10 + 20 * MIB;
  printf("vmm_program: %s: live %llu, mapped %llu (peak %llu), idle %llu, maps %llu, unmaps %llu\n", when,
         U(s.live_bytes), U(s.arena_mapped_bytes), U(s.arena_mapped_peak_bytes), U(s.arena_idle_bytes),
         U(s.arena_maps), U(s.arena_unmaps));
  CHECK(s.arena_mapped_bytes <= bound, "%s: mapped %llu <= 1.1 x live %llu + 20 MiB", when,
        U(s.arena_mapped_bytes), U(s.live_bytes));
}

enum { STREAMS = 3, SIZES = 8, BLOCKS = STREAMS * SIZES };

int main(void) {
  /* --- No GPU needed: configuration and argument checks. --- */
  const char *env = getenv("SOMALLOC_CONF");
  if (env) {
    CHECK(strstr(env, "pool:vmm") != NULL, "SOMALLOC_CONF names pool:vmm: %s", env);
  } else {
    CHECK(somalloc_configure("pool:vmm") == SOMALLOC_STATUS_OK, "configure pool:vmm");
  }
  CHECK(somalloc_configure("pool:arena") == SOMALLOC_STATUS_CONFIG, "an unknown pool");
  CHECK(strstr(somalloc_last_error_message(), "own, default or vmm") != NULL, "the text names the choices");
  size_t n = 7;
  CHECK(somalloc_segments(0, NULL, 0, NULL) == SOMALLOC_STATUS_INVALID_ARGUMENT, "NULL count");
  CHECK(somalloc_segments(0, NULL, 4, &n) == SOMALLOC_STATUS_INVALID_ARGUMENT && n == 7,
        "NULL segments with a capacity: nothing written");

  int count = 0;
  SomallocStatus st = somalloc_device_count(&count);
  if (st == SOMALLOC_STATUS_RUNTIME_NOT_FOUND || st == SOMALLOC_STATUS_NO_DEVICE) {
    CHECK(somalloc_segments(0, NULL, 0, &n) == st && n == 7, "segments without a GPU: the same status");
    if (failed) {
      printf("%d passed, %d failed\n", passed, failed);
      return 1;
    }
    printf("SKIP vmm_program: no GPU (%s)\n", somalloc_last_error_message());
    return 0;
  }
  CHECK(st == SOMALLOC_STATUS_OK && count > 0, "device count %d, status %d", count, st);
  if (!load_runtime()) {
    printf("vmm_program: the runtime loads in somalloc but not here (dlopen)\n");
    return 1;
  }

  SomallocStats s = stats_of(0);
  CHECK(s.arena_enabled == 1, "an arena serves device 0 (if not, a line on stderr says why)");
  if (s.arena_enabled != 1) {
    printf("%d passed, %d failed\n", passed, failed);
    return 1;
  }

  /* --- Blocks of many sizes live at once on three streams. --- */
  void *s1 = NULL;
  CHECK(stream_create(&s1, 1) == 0, "a stream");
  void *streams[STREAMS] = {NULL, PER_THREAD, s1};
  const size_t each[SIZES] = {256, 4096, MIB, MIB + 1, 3 * MIB + 5, 17 * MIB, 64 * MIB, 100 * MIB};
  void *ptrs[BLOCKS] = {0};
  size_t sizes[BLOCKS] = {0};
  void *on[BLOCKS] = {0};
  for (int i = 0; i < BLOCKS; i++) {
    sizes[i] = each[i % SIZES];
    on[i] = streams[i / SIZES];
    st = somalloc_malloc(&ptrs[i], sizes[i], 0, on[i]);
    CHECK(st == SOMALLOC_STATUS_OK && ptrs[i], "malloc %zu on stream %d: %d", sizes[i], i / SIZES, st);
    if (ptrs[i]) CHECK(filled(ptrs[i], sizes[i], 0x20 + i, on[i]), "contents of block %d", i);
  }
  s = stats_of(0);
  uint64_t pools = 0;
  for (int i = 0; i < BLOCKS; i++)
    if (ptrs[i] && on[i] == PER_THREAD) pools += sizes[i];
  CHECK(s.arena_mapped_bytes >= s.live_bytes - pools && s.live_bytes > pools,
        "mapped %llu covers the arena's live %llu (of %llu live)", U(s.arena_mapped_bytes), U(s.live_bytes - pools),
        U(s.live_bytes));
  CHECK(s.arena_maps > 0 && s.arena_reserved_bytes >= s.arena_mapped_bytes, "maps %llu, reserved %llu",
        U(s.arena_maps), U(s.arena_reserved_bytes));
  CHECK(s.arena_mapped_peak_bytes >= s.arena_mapped_bytes, "the peak");
  CHECK(s.arena_fragmentation_ppm <= 1000000, "fragmentation %llu ppm", U(s.arena_fragmentation_ppm));
  CHECK(s.arena_largest_free_bytes <= s.arena_mapped_bytes, "the largest free range");
  CHECK(s.arena_pool_allocations == 0, "the arena served every block: %llu from the pool",
        U(s.arena_pool_allocations));
  check_segments("all live", ptrs, sizes, on, BLOCKS);

  /* A capacity below the count: the count says how many, one is written. */
  size_t all = 0;
  CHECK(somalloc_segments(0, NULL, 0, &all) == SOMALLOC_STATUS_OK && all > 0, "segments: %zu", all);
  SomallocSegment two[2];
  memset(two, 0xab, sizeof two);
  size_t got = 0;
  CHECK(somalloc_segments(0, two, 1, &got) == SOMALLOC_STATUS_OK && got == all, "the count with capacity 1");
  CHECK(two[0].bytes > 0 && two[1].bytes == 0xababababababababull, "one segment written, no more");

  /* A caller built with an older header gets the fields it knows. */
  SomallocStats old;
  memset(&old, 0xff, sizeof old);
  CHECK(somalloc_stats(0, &old, offsetof(SomallocStats, arena_enabled)) == SOMALLOC_STATUS_OK, "older stats");
  CHECK(old.arena_enabled == UINT64_MAX && old.live_bytes == s.live_bytes, "only the fields asked for");

  /* --- Free all but the largest and the smallest block of s1; trim. A
   * chunk holds at most 20 MiB by default, so the live blocks keep at most
   * one chunk each mapped beyond their bytes. --- */
  for (int i = 0; i < BLOCKS; i++) {
    if (on[i] == s1 && (sizes[i] == 100 * MIB || sizes[i] == 256)) continue;
    CHECK(somalloc_free(ptrs[i], sizes[i], 0, on[i]) == SOMALLOC_STATUS_OK, "free block %d", i);
    ptrs[i] = NULL;
  }
  CHECK(somalloc_trim(0, 0) == SOMALLOC_STATUS_OK, "trim");
  s = stats_of(0);
  if (!s.cache_enabled) check_trimmed("after a trim");
  CHECK(somalloc_empty_cache(0) == SOMALLOC_STATUS_OK, "empty cache");
  check_trimmed("after emptying the cache");
  s = stats_of(0);
  CHECK(s.arena_unmaps > 0, "chunks were given back");
  check_segments("after the trim", ptrs, sizes, on, BLOCKS);
  for (int i = 0; i < BLOCKS; i++)
    if (ptrs[i]) CHECK(filled(ptrs[i], sizes[i], 0x70 + i, on[i]), "block %d still usable", i);

  /* --- The arena grows again after a trim; then everything goes. --- */
  void *p = NULL;
  CHECK(somalloc_malloc(&p, 40 * MIB, 0, s1) == SOMALLOC_STATUS_OK && p, "malloc after the trim");
  if (p) {
    CHECK(filled(p, 40 * MIB, 9, s1), "its contents");
    size_t k = 0;
    SomallocSegment *seg = segments_of(&k);
    CHECK(inside(seg, k, p, 40 * MIB), "inside a segment");
    free(seg);
    CHECK(somalloc_free(p, 40 * MIB, 0, s1) == SOMALLOC_STATUS_OK, "free it");
  }
  for (int i = 0; i < BLOCKS; i++)
    if (ptrs[i]) CHECK(somalloc_free(ptrs[i], sizes[i], 0, on[i]) == SOMALLOC_STATUS_OK, "free block %d", i);
  CHECK(somalloc_empty_cache(-1) == SOMALLOC_STATUS_OK, "empty every cache");
  check_trimmed("with nothing live");
  s = stats_of(0);
  CHECK(s.live_allocations == 0 && s.failed_frees == 0, "nothing live, no refused free");
  CHECK(somalloc_stream_forget(0, s1) == SOMALLOC_STATUS_OK, "forget s1");
  CHECK(stream_sync(s1) == 0 && stream_destroy(s1) == 0, "destroy");

  printf("%d passed, %d failed\n", passed, failed);
  return failed ? 1 : 0;
}
