/* hello.c: somalloc's C library from C. Allocates a buffer in the order of
 * a stream, frees it, and prints the device's statistics. Without a GPU (or
 * without the vendor runtime) it says so with the status's text and exits 0.
 *
 * Built against an installed somalloc (bash capi/install.sh --backend cuda
 * --prefix /opt/somalloc):
 *
 *   export PKG_CONFIG_PATH=/opt/somalloc/lib/pkgconfig
 *   cc -std=c11 hello.c $(pkg-config --cflags --libs somalloc) \
 *      -Wl,-rpath,$(pkg-config --variable=libdir somalloc) -o hello
 *
 * or with CMake (CMakeLists.txt here: find_package(somalloc), somalloc::somalloc). */
#include <stdint.h>
#include <stdio.h>

#include <somalloc.h>

/* Says what failed: the status's name and meaning, and this failure's text. */
static void report(const char *what, SomallocStatus status) {
  fprintf(stderr, "hello: %s failed: %s (%s)\n", what, somalloc_status_string(status),
          somalloc_last_error_message());
}

int main(void) {
  printf("hello: somalloc %s (%s), header %d.%d.%d\n", somalloc_version(), somalloc_backend(),
         SOMALLOC_VERSION_MAJOR, SOMALLOC_VERSION_MINOR, SOMALLOC_VERSION_PATCH);

  int devices = 0;
  SomallocStatus status = somalloc_device_count(&devices);
  if (status == SOMALLOC_STATUS_RUNTIME_NOT_FOUND || status == SOMALLOC_STATUS_NO_DEVICE ||
      (status == SOMALLOC_STATUS_OK && devices == 0)) {
    /* Not an error of the program: nothing to allocate on here. The
     * message says more (which libraries were tried, the runtime's error). */
    if (status != SOMALLOC_STATUS_OK) printf("hello: %s\n", somalloc_last_error_message());
    printf("hello: no GPU: %s\n", status == SOMALLOC_STATUS_OK
                                      ? somalloc_status_string(SOMALLOC_STATUS_NO_DEVICE)
                                      : somalloc_status_string(status));
    return 0;
  }
  if (status != SOMALLOC_STATUS_OK) {
    report("somalloc_device_count", status);
    return 1;
  }

  /* Device 0, the legacy default stream (handle 0): any stream of the
   * device works the same (a cudaStream_t or hipStream_t). */
  const int device = 0;
  void *const stream = NULL;
  const size_t size = (size_t)64 << 20;
  void *buffer = NULL;
  status = somalloc_malloc(&buffer, size, device, stream);
  if (status != SOMALLOC_STATUS_OK) {
    report("somalloc_malloc", status);
    return 1;
  }
  printf("hello: %zu bytes at %p on device %d of %d\n", size, buffer, device, devices);

  SomallocStats stats;
  status = somalloc_stats(device, &stats, sizeof stats);
  if (status != SOMALLOC_STATUS_OK) {
    report("somalloc_stats", status);
    return 1;
  }
  printf("hello: live %llu allocation(s), %llu bytes; the pool holds %llu bytes\n",
         (unsigned long long)stats.live_allocations, (unsigned long long)stats.live_bytes,
         (unsigned long long)stats.pool_reserved_bytes);

  /* Work using the buffer would be enqueued on `stream` here; the free is
   * ordered after it on the same stream. */
  status = somalloc_free(buffer, size, device, stream);
  if (status != SOMALLOC_STATUS_OK) {
    report("somalloc_free", status);
    return 1;
  }
  /* A second free is refused, and nothing is freed. */
  status = somalloc_free(buffer, size, device, stream);
  printf("hello: a second free: %s\n", somalloc_status_string(status));

  status = somalloc_stats(device, &stats, sizeof stats);
  if (status != SOMALLOC_STATUS_OK) {
    report("somalloc_stats", status);
    return 1;
  }
  printf("hello: after the free: live %llu, %llu allocation(s) and %llu free(s) so far, %llu refused\n",
         (unsigned long long)stats.live_allocations, (unsigned long long)stats.allocations,
         (unsigned long long)stats.frees, (unsigned long long)stats.failed_frees);
  return stats.live_allocations == 0 ? 0 : 1;
}
