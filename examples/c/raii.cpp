// raii.cpp: somalloc's C library from C++. A buffer owns its allocation and
// frees it in its destructor, in the order of the stream it was allocated on;
// failures are exceptions carrying the status. Without a GPU (or without the
// vendor runtime) it says so with the status's text and exits 0.
//
// Built against an installed somalloc, as hello.c (pkg-config or CMake):
//
//   c++ -std=c++17 raii.cpp $(pkg-config --cflags --libs somalloc)
//       -Wl,-rpath,$(pkg-config --variable=libdir somalloc) -o raii     (one line)
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <utility>

#include <somalloc.h>

namespace {

// A failed somalloc call: its status, and the text of the status and of this
// failure.
class Error : public std::runtime_error {
 public:
  Error(const char* what, SomallocStatus status)
      : std::runtime_error(std::string(what) + ": " + somalloc_status_string(status) + " (" +
                           somalloc_last_error_message() + ")"),
        status_(status) {}
  SomallocStatus status() const { return status_; }

 private:
  SomallocStatus status_;
};

void check(const char* what, SomallocStatus status) {
  if (status != SOMALLOC_STATUS_OK) throw Error(what, status);
}

// `size` bytes of `device`, allocated in the order of `stream` and freed in
// it when the buffer goes out of scope. Moves, does not copy.
class DeviceBuffer {
 public:
  DeviceBuffer(std::size_t size, int device, void* stream)
      : size_(size), device_(device), stream_(stream) {
    check("somalloc_malloc", somalloc_malloc(&ptr_, size, device, stream));
  }
  ~DeviceBuffer() { release(); }

  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& other) noexcept
      : ptr_(std::exchange(other.ptr_, nullptr)),
        size_(std::exchange(other.size_, 0)),
        device_(other.device_),
        stream_(other.stream_) {}
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept {
    if (this != &other) {
      release();
      ptr_ = std::exchange(other.ptr_, nullptr);
      size_ = std::exchange(other.size_, 0);
      device_ = other.device_;
      stream_ = other.stream_;
    }
    return *this;
  }

  void* get() const { return ptr_; }
  std::size_t size() const { return size_; }

 private:
  // A destructor does not throw: a refused free is reported and counted by
  // somalloc (`failed_frees`).
  void release() noexcept {
    if (ptr_ == nullptr) return;
    SomallocStatus status = somalloc_free(ptr_, size_, device_, stream_);
    if (status != SOMALLOC_STATUS_OK)
      std::fprintf(stderr, "raii: free failed: %s\n", somalloc_status_string(status));
    ptr_ = nullptr;
  }

  void* ptr_ = nullptr;
  std::size_t size_;
  int device_;
  void* stream_;
};

SomallocStats stats(int device) {
  SomallocStats s{};
  check("somalloc_stats", somalloc_stats(device, &s, sizeof s));
  return s;
}

}  // namespace

int main() {
  std::printf("raii: somalloc %s (%s), header %d.%d.%d\n", somalloc_version(), somalloc_backend(),
              SOMALLOC_VERSION_MAJOR, SOMALLOC_VERSION_MINOR, SOMALLOC_VERSION_PATCH);
  int devices = 0;
  SomallocStatus status = somalloc_device_count(&devices);
  if (status == SOMALLOC_STATUS_RUNTIME_NOT_FOUND || status == SOMALLOC_STATUS_NO_DEVICE ||
      (status == SOMALLOC_STATUS_OK && devices == 0)) {
    if (status != SOMALLOC_STATUS_OK) std::printf("raii: %s\n", somalloc_last_error_message());
    std::printf("raii: no GPU: %s\n",
                somalloc_status_string(status == SOMALLOC_STATUS_OK ? SOMALLOC_STATUS_NO_DEVICE : status));
    return 0;
  }
  try {
    check("somalloc_device_count", status);
    const int device = 0;
    void* const stream = nullptr;  // the legacy default stream; any stream of the device works
    {
      DeviceBuffer a(std::size_t{1} << 20, device, stream);
      DeviceBuffer b(4096, device, stream);
      DeviceBuffer c = std::move(a);  // `a` is empty now; `c` frees its memory
      std::printf("raii: %zu and %zu bytes at %p and %p; live %llu\n", c.size(), b.size(), c.get(),
                  b.get(), static_cast<unsigned long long>(stats(device).live_allocations));
    }  // b and c are freed here, in the order of the stream
    SomallocStats s = stats(device);
    std::printf("raii: after the scope: live %llu, %llu allocation(s), %llu free(s)\n",
                static_cast<unsigned long long>(s.live_allocations),
                static_cast<unsigned long long>(s.allocations), static_cast<unsigned long long>(s.frees));
    return s.live_allocations == 0 ? 0 : 1;
  } catch (const Error& e) {
    std::fprintf(stderr, "raii: %s\n", e.what());
    return 1;
  }
}
