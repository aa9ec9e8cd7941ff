// Self-check of the shim's virtual memory calls (vmm.cpp), run on the GPU
// machine by run-on-nvidia.sh (see run.sh) once as the ROCm the shim reports
// by default and once with HIP_ON_CUDA_VERSION=50221153:
//
//   vmm_check path/to/libamdhip64.so.5
//
// It is a HIP client written against each ROCm's hipMemAllocationProp (the
// two layouts are spelled out below, independently of the shim's own
// definitions): it asks hipRuntimeGetVersion which ROCm it talks to and
// builds the struct that ROCm's header would, then reserves 64 MiB, creates a
// 2 MiB chunk (the granularity, if larger), maps it, sets access, fills it
// with hipMemsetAsync and with a copy, reads it back, retains the handle from
// an interior address, shares a second chunk through a POSIX file descriptor,
// checks the error codes of an out-of-memory and a misaligned request, and
// unmaps, releases and frees. One PASS / FAIL (or SKIP) line per check; exit
// status 1 if any check failed.
//
// Without a GPU only the checks the shim answers itself run (arguments it
// refuses, the struct of the other layout, the attribute ROCm 5.2 lacks); the
// rest print one SKIP line, unless HIP_ON_CUDA_EXPECT_GPU=1, which makes
// "no GPU" a failure.

#include <dlfcn.h>
#include <unistd.h>

#include <cstdarg>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

namespace {

// --- HIP's side, as a client sees it ----------------------------------------

constexpr int kInvalidValue = 1;  // hipErrorInvalidValue
constexpr int kOutOfMemory = 2;   // hipErrorOutOfMemory
constexpr int kNotSupported = 801;
constexpr int kAttrMemoryPools = 88;     // hipDeviceAttributeMemoryPoolsSupported
constexpr int kAttrVirtualMemory = 89;   // hipDeviceAttributeVirtualMemoryManagementSupported (ROCm >= 5.3)
constexpr unsigned kPinned = 1;          // hipMemAllocationTypePinned
constexpr unsigned kLocationDevice = 1;  // hipMemLocationTypeDevice
constexpr unsigned kHandleNone = 0;
constexpr unsigned kHandlePosixFd = 1;   // hipMemHandleTypePosixFileDescriptor
constexpr unsigned kReadWrite = 3;       // hipMemAccessFlagsProtReadWrite
constexpr int kMemcpyHostToDevice = 1;
constexpr int kMemcpyDeviceToHost = 2;

struct Location {
    unsigned type;
    int id;
};

struct AccessDesc {
    Location location;
    unsigned flags;
};

/// hipMemAllocationProp of ROCm 5.2.
struct PropRocm52 {
    unsigned char compressionType;
    Location location;
    unsigned requestedHandleType;
    unsigned type;
    unsigned short usage;
    void* win32HandleMetaData;
};

/// hipMemAllocationProp of ROCm >= 5.3 (CUDA's field order).
struct PropRocm53 {
    unsigned type;
    unsigned requestedHandleType;
    Location location;
    void* win32HandleMetaData;
    unsigned char compressionType;
    unsigned char gpuDirectRDMACapable;
    unsigned short usage;
};

static_assert(sizeof(PropRocm52) == 32 && sizeof(PropRocm53) == 32, "both layouts are 32 bytes");
static_assert(offsetof(PropRocm52, type) == 16 && offsetof(PropRocm53, location) == 8, "layouts");

using Handle = void*;  // hipMemGenericAllocationHandle_t

struct Hip {
    int (*get_device_count)(int*);
    int (*set_device)(int);
    int (*runtime_get_version)(int*);
    int (*get_last_error)();
    const char* (*get_error_name)(int);
    int (*device_get_attribute)(int*, int, int);
    int (*mem_get_info)(size_t*, size_t*);
    int (*memset_async)(void*, int, size_t, void*);
    int (*memcpy_async)(void*, const void*, size_t, int, void*);
    int (*stream_synchronize)(void*);
    int (*address_reserve)(void**, size_t, size_t, void*, unsigned long long);
    int (*address_free)(void*, size_t);
    int (*create)(Handle*, size_t, const void*, unsigned long long);
    int (*release)(Handle);
    int (*granularity)(size_t*, const void*, int);
    int (*map)(void*, size_t, size_t, Handle, unsigned long long);
    int (*unmap)(void*, size_t);
    int (*set_access)(void*, size_t, const AccessDesc*, size_t);
    int (*get_access)(unsigned long long*, const Location*, void*);
    int (*retain)(Handle*, void*);
    int (*export_handle)(void*, Handle, unsigned, unsigned long long);
    int (*import_handle)(Handle*, void*, unsigned);
};

template <typename F>
bool load(void* lib, const char* name, F* out) {
    *out = reinterpret_cast<F>(dlsym(lib, name));
    if (*out == nullptr) {
        std::printf("FAIL vmm_check: %s not exported\n", name);
        return false;
    }
    return true;
}

bool load_hip(void* lib, Hip* h) {
    bool ok = true;
    ok &= load(lib, "hipGetDeviceCount", &h->get_device_count);
    ok &= load(lib, "hipSetDevice", &h->set_device);
    ok &= load(lib, "hipRuntimeGetVersion", &h->runtime_get_version);
    ok &= load(lib, "hipGetLastError", &h->get_last_error);
    ok &= load(lib, "hipGetErrorName", &h->get_error_name);
    ok &= load(lib, "hipDeviceGetAttribute", &h->device_get_attribute);
    ok &= load(lib, "hipMemGetInfo", &h->mem_get_info);
    ok &= load(lib, "hipMemsetAsync", &h->memset_async);
    ok &= load(lib, "hipMemcpyAsync", &h->memcpy_async);
    ok &= load(lib, "hipStreamSynchronize", &h->stream_synchronize);
    ok &= load(lib, "hipMemAddressReserve", &h->address_reserve);
    ok &= load(lib, "hipMemAddressFree", &h->address_free);
    ok &= load(lib, "hipMemCreate", &h->create);
    ok &= load(lib, "hipMemRelease", &h->release);
    ok &= load(lib, "hipMemGetAllocationGranularity", &h->granularity);
    ok &= load(lib, "hipMemMap", &h->map);
    ok &= load(lib, "hipMemUnmap", &h->unmap);
    ok &= load(lib, "hipMemSetAccess", &h->set_access);
    ok &= load(lib, "hipMemGetAccess", &h->get_access);
    ok &= load(lib, "hipMemRetainAllocationHandle", &h->retain);
    ok &= load(lib, "hipMemExportToShareableHandle", &h->export_handle);
    ok &= load(lib, "hipMemImportFromShareableHandle", &h->import_handle);
    return ok;
}

// --- reporting ----------------------------------------------------------------

int failures = 0;
char tag[64] = "";  // which layout this run uses

void report(bool ok, const char* check, const char* fmt = nullptr, ...) {
    std::printf("%s vmm_check %s: %s", ok ? "PASS" : "FAIL", tag, check);
    if (!ok && fmt != nullptr) {
        std::printf(": ");
        va_list args;
        va_start(args, fmt);
        std::vprintf(fmt, args);
        va_end(args);
    }
    std::printf("\n");
    if (!ok) {
        ++failures;
    }
}

// --- the checks -----------------------------------------------------------------

/// A hipMemAllocationProp in one of the two layouts.
struct Prop {
    alignas(8) unsigned char bytes[32];
};

Prop make_prop(bool cuda_order, int device, unsigned handle_types) {
    Prop p;
    std::memset(&p, 0, sizeof p);
    if (cuda_order) {
        PropRocm53 s;
        std::memset(&s, 0, sizeof s);
        s.type = kPinned;
        s.requestedHandleType = handle_types;
        s.location = {kLocationDevice, device};
        std::memcpy(p.bytes, &s, sizeof s);
    } else {
        PropRocm52 s;
        std::memset(&s, 0, sizeof s);
        s.type = kPinned;
        s.requestedHandleType = handle_types;
        s.location = {kLocationDevice, device};
        std::memcpy(p.bytes, &s, sizeof s);
    }
    return p;
}

size_t round_up(size_t n, size_t to) { return (n + to - 1) / to * to; }

/// Reads `bytes` at `dev` back and counts the bytes that differ from `want`.
size_t count_differences(const Hip& hip, const void* dev, const std::vector<unsigned char>& want, int* rc) {
    std::vector<unsigned char> got(want.size(), 0);
    *rc = hip.memcpy_async(got.data(), dev, got.size(), kMemcpyDeviceToHost, nullptr);
    if (*rc == 0) {
        *rc = hip.stream_synchronize(nullptr);
    }
    size_t differ = 0;
    for (size_t i = 0; i < got.size(); ++i) {
        differ += got[i] != want[i];
    }
    return differ;
}

/// The checks the shim answers itself (no GPU needed).
void shim_checks(const Hip& hip, bool cuda_order) {
    Handle h = nullptr;
    Prop good = make_prop(cuda_order, 0, kHandleNone);
    Prop other = make_prop(!cuda_order, 0, kHandleNone);
    size_t g = 0;
    int rc = hip.create(nullptr, 2u << 20, &good, 0);
    report(rc == kInvalidValue, "hipMemCreate(NULL handle) is hipErrorInvalidValue", "got %d", rc);
    rc = hip.create(&h, 2u << 20, &other, 0);
    report(rc == kInvalidValue, "the other ROCm's hipMemAllocationProp layout is refused", "got %d", rc);
    rc = hip.get_last_error();
    report(rc == kInvalidValue && hip.get_last_error() == 0, "hipGetLastError after a refusal", "got %d", rc);
    rc = hip.granularity(&g, &good, 2);
    report(rc == kInvalidValue, "granularity option 2 is hipErrorInvalidValue", "got %d", rc);
    rc = hip.map(reinterpret_cast<void*>(uintptr_t{1} << 40), 2u << 20, 4096, reinterpret_cast<Handle>(1), 0);
    report(rc == kInvalidValue, "hipMemMap with an offset is hipErrorInvalidValue (as in ROCm)", "got %d", rc);
    rc = hip.import_handle(&h, nullptr, kHandlePosixFd);
    report(rc == kInvalidValue, "hipMemImportFromShareableHandle(NULL) is hipErrorInvalidValue", "got %d", rc);
    if (!cuda_order) {
        int v = -1;
        rc = hip.device_get_attribute(&v, kAttrVirtualMemory, 0);
        report(rc == kInvalidValue, "ROCm 5.2 has no VirtualMemoryManagementSupported attribute", "got %d", rc);
    }
    (void)hip.get_last_error();
}

/// The checks on device 0.
void gpu_checks(const Hip& hip, bool cuda_order) {
    const int dev = 0;
    {
        // A thread that has made no runtime call has no current context;
        // the shim makes the primary one current before it asks the driver.
        int trc = -1;
        void* p = nullptr;
        std::thread fresh([&] {
            trc = hip.address_reserve(&p, size_t{64} << 20, 0, nullptr, 0);
            if (trc == 0) {
                trc = hip.address_free(p, size_t{64} << 20);
            }
        });
        fresh.join();
        report(trc == 0, "hipMemAddressReserve and hipMemAddressFree on a fresh thread", "rc %d", trc);
    }
    int rc = hip.set_device(dev);
    report(rc == 0, "hipSetDevice(0)", "got %d", rc);
    int value = -1;
    rc = hip.device_get_attribute(&value, kAttrMemoryPools, dev);
    report(rc == 0 && value == 1, "memory pools supported (attribute 88)", "rc %d, value %d", rc, value);
    if (cuda_order) {
        value = -1;
        rc = hip.device_get_attribute(&value, kAttrVirtualMemory, dev);
        report(rc == 0 && value == 1, "VirtualMemoryManagementSupported (attribute 89) is 1", "rc %d, value %d", rc, value);
        // Handle types of pools (91: a mask of HIP's handle-type bits), GPU
        // Direct RDMA with VMM (94, 0 or 1), fabric handles (95: 0 here).
        const int more[] = {91, 94, 95};
        for (int a : more) {
            value = -1;
            rc = hip.device_get_attribute(&value, a, dev);
            bool ok = rc == 0 && (a == 91 ? (value & ~7) == 0 : a == 94 ? (value == 0 || value == 1) : value == 0);
            report(ok, a == 91 ? "attribute 91 (pool handle types)" : a == 94 ? "attribute 94 (RDMA with VMM)"
                                                                              : "attribute 95 (fabric handles) is 0",
                   "rc %d, value %d", rc, value);
            std::printf("     vmm_check %s: attribute %d = %d\n", tag, a, value);
        }
    }

    Prop prop = make_prop(cuda_order, dev, kHandleNone);
    size_t minimum = 0, recommended = 0;
    rc = hip.granularity(&minimum, &prop, 0);
    report(rc == 0 && minimum > 0, "hipMemGetAllocationGranularity(minimum)", "rc %d, %zu", rc, minimum);
    rc = hip.granularity(&recommended, &prop, 1);
    report(rc == 0 && recommended >= minimum && recommended > 0, "hipMemGetAllocationGranularity(recommended)",
           "rc %d, %zu", rc, recommended);
    if (minimum == 0 || recommended == 0) {
        return;
    }
    std::printf("     vmm_check %s: granularity minimum %zu, recommended %zu\n", tag, minimum, recommended);
    const size_t chunk = round_up(size_t{2} << 20, recommended);
    const size_t range = round_up(size_t{64} << 20, chunk);

    // Reserve.
    void* base = nullptr;
    rc = hip.address_reserve(&base, range, chunk, nullptr, 0);
    report(rc == 0 && base != nullptr && reinterpret_cast<uintptr_t>(base) % chunk == 0,
           "hipMemAddressReserve(64 MiB, aligned to the chunk)", "rc %d, %p", rc, base);
    if (rc != 0 || base == nullptr) {
        return;
    }
    char* const va = static_cast<char*>(base) + chunk;  // the second chunk of the range

    // Create, map, access.
    Handle h = nullptr;
    rc = hip.create(&h, chunk, &prop, 0);
    report(rc == 0 && h != nullptr, "hipMemCreate(2 MiB)", "rc %d", rc);
    bool mapped = false;
    if (rc == 0) {
        rc = hip.map(va, chunk, 0, h, 0);
        mapped = rc == 0;
        report(mapped, "hipMemMap at base + 1 chunk", "rc %d", rc);
    }
    if (mapped) {
        AccessDesc desc = {{kLocationDevice, dev}, kReadWrite};
        rc = hip.set_access(va, chunk, &desc, 1);
        report(rc == 0, "hipMemSetAccess(device 0, read-write)", "rc %d", rc);
        unsigned long long flags = 0;
        Location loc = {kLocationDevice, dev};
        rc = hip.get_access(&flags, &loc, va);
        report(rc == 0 && flags == kReadWrite, "hipMemGetAccess is read-write", "rc %d, flags %llu", rc, flags);

        // Fill by memset, read back.
        std::vector<unsigned char> want(chunk, 0xA5);
        rc = hip.memset_async(va, 0xA5, chunk, nullptr);
        int rc2 = 0;
        size_t differ = rc == 0 ? count_differences(hip, va, want, &rc2) : chunk;
        report(rc == 0 && rc2 == 0 && differ == 0, "hipMemsetAsync 0xA5 over the chunk, read back",
               "memset rc %d, copy rc %d, %zu bytes differ", rc, rc2, differ);

        // Fill by a copy, read back.
        for (size_t i = 0; i < chunk; ++i) {
            want[i] = static_cast<unsigned char>(i * 31 + 7);
        }
        rc = hip.memcpy_async(va, want.data(), chunk, kMemcpyHostToDevice, nullptr);
        differ = rc == 0 ? count_differences(hip, va, want, &rc2) : chunk;
        report(rc == 0 && rc2 == 0 && differ == 0, "hipMemcpyAsync of a pattern into the chunk, read back",
               "copy-in rc %d, copy-out rc %d, %zu bytes differ", rc, rc2, differ);

        // The handle behind an interior address.
        Handle retained = nullptr;
        rc = hip.retain(&retained, va + chunk / 2 + 123);
        report(rc == 0 && retained == h, "hipMemRetainAllocationHandle(interior address) gives the chunk's handle",
               "rc %d, %p vs %p", rc, retained, h);
        if (rc == 0) {
            rc = hip.release(retained);  // the retain's reference
            report(rc == 0, "hipMemRelease of the retained handle", "rc %d", rc);
        }
    }

    // Sharing through a POSIX file descriptor: a second chunk, exported,
    // imported again, mapped at a second address; both views see one memory.
    Prop shared_prop = make_prop(cuda_order, dev, kHandlePosixFd);
    Handle shared = nullptr;
    rc = hip.create(&shared, chunk, &shared_prop, 0);
    if (rc == kNotSupported) {
        std::printf("SKIP vmm_check %s: POSIX file descriptor sharing: hipMemCreate says hipErrorNotSupported\n", tag);
    } else {
        report(rc == 0, "hipMemCreate(2 MiB, shareable as a POSIX fd)", "rc %d", rc);
    }
    if (rc == 0) {
        int fd = -1;
        rc = hip.export_handle(&fd, shared, kHandlePosixFd, 0);
        report(rc == 0 && fd >= 0, "hipMemExportToShareableHandle(POSIX fd)", "rc %d, fd %d", rc, fd);
        Handle imported = nullptr;
        if (rc == 0 && fd > 0) {
            rc = hip.import_handle(&imported, reinterpret_cast<void*>(static_cast<intptr_t>(fd)), kHandlePosixFd);
            report(rc == 0 && imported != nullptr, "hipMemImportFromShareableHandle(the fd)", "rc %d", rc);
        }
        char* const a = static_cast<char*>(base) + 2 * chunk;
        char* const b = static_cast<char*>(base) + 3 * chunk;
        if (rc == 0 && imported != nullptr) {
            AccessDesc desc = {{kLocationDevice, dev}, kReadWrite};
            bool ok = hip.map(a, chunk, 0, shared, 0) == 0 && hip.set_access(a, chunk, &desc, 1) == 0 &&
                      hip.map(b, chunk, 0, imported, 0) == 0 && hip.set_access(b, chunk, &desc, 1) == 0;
            report(ok, "map the exported and the imported handle at two addresses");
            if (ok) {
                std::vector<unsigned char> want(chunk, 0x3C);
                rc = hip.memset_async(a, 0x3C, chunk, nullptr);
                int rc2 = 0;
                size_t differ = rc == 0 ? count_differences(hip, b, want, &rc2) : chunk;
                report(rc == 0 && rc2 == 0 && differ == 0, "bytes written through one mapping read through the other",
                       "memset rc %d, copy rc %d, %zu bytes differ", rc, rc2, differ);
                report(hip.unmap(a, chunk) == 0 && hip.unmap(b, chunk) == 0, "hipMemUnmap of both mappings");
            }
            report(hip.release(imported) == 0, "hipMemRelease of the imported handle");
        }
        if (fd >= 0) {
            close(fd);
        }
        report(hip.release(shared) == 0, "hipMemRelease of the exported handle");
    }

    // Error codes from the driver, translated.
    size_t free_bytes = 0, total = 0;
    rc = hip.mem_get_info(&free_bytes, &total);
    if (rc == 0 && total > 0) {
        Handle big = nullptr;
        rc = hip.create(&big, round_up(total, chunk) * 2, &prop, 0);
        report(rc == kOutOfMemory, "hipMemCreate(twice the GPU's memory) is hipErrorOutOfMemory", "got %d (%s)", rc,
               hip.get_error_name(rc));
        int last = hip.get_last_error();
        report(last == rc && hip.get_last_error() == 0, "hipGetLastError after it", "got %d", last);
        if (rc == 0) {
            (void)hip.release(big);
        }
    }
    Handle odd = nullptr;
    rc = hip.create(&odd, minimum + 1, &prop, 0);
    report(rc == kInvalidValue, "hipMemCreate(granularity + 1 bytes) is hipErrorInvalidValue", "got %d (%s)", rc,
           hip.get_error_name(rc));
    if (rc == 0) {
        (void)hip.release(odd);
    }
    (void)hip.get_last_error();

    // Tear down.
    if (mapped) {
        rc = hip.unmap(va, chunk);
        report(rc == 0, "hipMemUnmap", "rc %d", rc);
    }
    if (h != nullptr) {
        rc = hip.release(h);
        report(rc == 0, "hipMemRelease", "rc %d", rc);
    }
    rc = hip.address_free(base, range);
    report(rc == 0, "hipMemAddressFree", "rc %d", rc);
    rc = hip.address_free(base, range);
    report(rc != 0, "a second hipMemAddressFree of the range fails", "got %d", rc);
    (void)hip.get_last_error();
}

}  // namespace

int main(int argc, char** argv) {
    if (argc != 2) {
        std::fprintf(stderr, "usage: %s path/to/libamdhip64.so.5\n", argv[0]);
        return 2;
    }
    void* lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) {
        std::printf("FAIL vmm_check: dlopen: %s\n", dlerror());
        return 1;
    }
    Hip hip;
    if (!load_hip(lib, &hip)) {
        return 1;
    }
    int version = 0;
    if (hip.runtime_get_version(&version) != 0) {
        std::printf("FAIL vmm_check: hipRuntimeGetVersion\n");
        return 1;
    }
    // As a client compiled against that ROCm's header would: CUDA's order
    // from ROCm 5.3 on, and for HIP on NVIDIA (a CUDA version number).
    const bool cuda_order = version < 10000000 || version >= 50300000;
    std::snprintf(tag, sizeof tag, "[version %d, %s hipMemAllocationProp]", version,
                  cuda_order ? "ROCm >= 5.3" : "ROCm 5.2");

    shim_checks(hip, cuda_order);

    int count = 0;
    int rc = hip.get_device_count(&count);
    (void)hip.get_last_error();
    if (rc != 0 || count == 0) {
        const char* expect = std::getenv("HIP_ON_CUDA_EXPECT_GPU");
        if (expect != nullptr && std::strcmp(expect, "1") == 0) {
            report(false, "a GPU", "HIP_ON_CUDA_EXPECT_GPU=1 but hipGetDeviceCount = %d (%s)", rc, hip.get_error_name(rc));
        } else {
            std::printf("SKIP vmm_check %s: the GPU checks: no GPU (hipGetDeviceCount: %s)\n", tag,
                        hip.get_error_name(rc));
        }
    } else {
        gpu_checks(hip, cuda_order);
    }
    std::printf("vmm_check %s: %s\n", tag, failures == 0 ? "all checks passed" : "FAILED");
    return failures == 0 ? 0 : 1;
}
