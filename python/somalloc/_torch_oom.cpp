// Entry points for PyTorch's pluggable allocator that raise PyTorch's own
// out-of-memory error.
//
// somalloc's C entry points (somalloc_torch_alloc / somalloc_torch_free)
// return NULL when a request cannot be met, and PyTorch's pluggable path
// has no error channel: it turns a NULL into a storage whose address is 0.
// These two functions forward to somalloc's and, on a NULL for a non-empty
// request, throw c10::OutOfMemoryError, the exception PyTorch's own
// allocators throw, which Python sees as torch.OutOfMemoryError
// (torch.cuda.OutOfMemoryError). somalloc.torch.enable() compiles this file
// against the installed PyTorch's headers and libc10 on first use, and
// hands it somalloc's functions through somalloc_oom_init before PyTorch
// loads it as the allocator.
//
// Like PyTorch's own allocators, it clears the runtime's last error that
// the failed allocation left (cudaErrorMemoryAllocation / hipErrorOutOfMemory,
// code 2 in both runtimes): PyTorch checks that error after every kernel
// launch, and would otherwise report the handled out-of-memory at the next
// unrelated launch. A different pending error is left alone.
#include <c10/util/Exception.h>

#include <cstddef>
#include <cstdio>
#include <string>

namespace {
using AllocFn = void* (*)(size_t, int, void*);
using FreeFn = void (*)(void*, size_t, int, void*);
using MessageFn = const char* (*)();
using LastErrorFn = int (*)();

constexpr int kOutOfMemory = 2;

AllocFn g_alloc = nullptr;
FreeFn g_free = nullptr;
MessageFn g_message = nullptr;
LastErrorFn g_peek = nullptr;
LastErrorFn g_get = nullptr;
}  // namespace

extern "C" {

// Called once, before PyTorch is given the allocator: somalloc's three
// functions, and the runtime's cudaPeekAtLastError / cudaGetLastError (or
// the hip ones), which may be NULL (then nothing is cleared). Returns 0, or
// -1 when one of somalloc's functions is missing.
int somalloc_oom_init(void* alloc, void* free, void* message, void* peek, void* get) {
  if (alloc == nullptr || free == nullptr || message == nullptr) {
    return -1;
  }
  g_alloc = reinterpret_cast<AllocFn>(alloc);
  g_free = reinterpret_cast<FreeFn>(free);
  g_message = reinterpret_cast<MessageFn>(message);
  if (peek != nullptr && get != nullptr) {
    g_peek = reinterpret_cast<LastErrorFn>(peek);
    g_get = reinterpret_cast<LastErrorFn>(get);
  }
  return 0;
}

void* somalloc_oom_alloc(size_t size, int device, void* stream) {
  TORCH_CHECK(g_alloc != nullptr, "somalloc: the allocator was used before somalloc_oom_init");
  void* p = g_alloc(size, device, stream);
  if (p == nullptr && size != 0) {
    // Formatted without iostreams: the message needs no locale.
    const char* why = g_message();
    char text[768];
    std::snprintf(text, sizeof text, "somalloc: out of memory: could not allocate %zu bytes on device %d (%s)",
                  size, device, why != nullptr && why[0] != 0 ? why : "no reason given");
    if (g_peek != nullptr && g_peek() == kOutOfMemory) {
      g_get();
    }
    throw c10::OutOfMemoryError(c10::SourceLocation{__func__, __FILE__, static_cast<uint32_t>(__LINE__)},
                                std::string(text));
  }
  return p;
}

void somalloc_oom_free(void* ptr, size_t size, int device, void* stream) {
  if (g_free != nullptr) {
    g_free(ptr, size, device, stream);
  }
}

}  // extern "C"
