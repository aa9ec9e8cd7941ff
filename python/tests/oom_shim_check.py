"""Checks, without a GPU and without PyTorch, how somalloc.torch makes its
raising entry points, against a stand-in "torch" whose headers and libc10
declare just what they use. The compiled route (_torch_oom.cpp) must build
with a compiler that links the C++ runtime dynamically, find the build in
its cache the second time, forward allocations and frees to the functions
it is given, and explain every way it can fail. The built-in route (no
compiler) must find its symbols in the stand-in libc10 and the C++ runtime,
and the extension's entry points must throw c10::OutOfMemoryError for out
of memory and c10::Error for other refusals, with somalloc's reason, caught
by C++ as PyTorch catches them; enable() without a compiler must take it.

    python3 python/tests/oom_shim_check.py WORKDIR   (after installing the wheel)
"""

import ctypes
import os
import shutil
import subprocess
import sys
import types

import somalloc.torch as st

work = os.path.abspath(sys.argv[1])
checks = []


def check(name, ok, detail=""):
    checks.append(bool(ok))
    print("%s %s %s" % ("ok  " if ok else "FAIL", name, detail), flush=True)


cxx = shutil.which("g++") or shutil.which("c++")
if cxx is None:
    print("SKIP oom_shim_check: no C++ compiler on this machine")
    sys.exit(0)

# The stand-in torch: torch/__init__.py (never imported), include/, lib/libc10.so.
root = os.path.join(work, "fake", "torch")
os.makedirs(os.path.join(root, "include", "c10", "util"), exist_ok=True)
os.makedirs(os.path.join(root, "lib"), exist_ok=True)
open(os.path.join(root, "__init__.py"), "w").close()
with open(os.path.join(root, "include", "c10", "util", "Exception.h"), "w") as f:
    f.write(
        """#pragma once
#include <cstdint>
#include <stdexcept>
#include <string>
namespace c10 {
struct SourceLocation { const char* function; const char* file; uint32_t line; };
struct Error : std::runtime_error { Error(SourceLocation where, std::string what); };
struct OutOfMemoryError : Error { using Error::Error; };
}
#define TORCH_CHECK(cond, ...) \\
  do { if (!(cond)) throw ::c10::Error({__func__, __FILE__, static_cast<uint32_t>(__LINE__)}, "check failed"); } while (0)
"""
    )
with open(os.path.join(work, "c10.cpp"), "w") as f:
    f.write('#include <c10/util/Exception.h>\nc10::Error::Error(SourceLocation, std::string what) : std::runtime_error(what) {}\n')
subprocess.run([cxx, "-shared", "-fPIC", "-I", os.path.join(root, "include"), os.path.join(work, "c10.cpp"), "-o", os.path.join(root, "lib", "libc10.so")], check=True)

torch = types.SimpleNamespace(__file__=os.path.join(root, "__init__.py"), __version__="0.0-stand-in", _C=types.SimpleNamespace(_GLIBCXX_USE_CXX11_ABI=True))
os.environ["SOMALLOC_CACHE_DIR"] = os.path.join(work, "cache")
os.environ["CXX"] = cxx

path, why = st._oom_shim(torch)
check("it builds against the stand-in", path is not None and os.path.isfile(path), str(why)[:300])
with open(path, "rb") as f:
    check("the build links the C++ runtime dynamically", b"libstdc++.so" in f.read())
mtime = os.stat(path).st_mtime_ns
again, _ = st._oom_shim(torch)
check("the second call finds it in the cache", again == path and os.stat(path).st_mtime_ns == mtime)
check("the cache holds nothing else", os.listdir(os.environ["SOMALLOC_CACHE_DIR"]) == [os.path.basename(path)], str(os.listdir(os.environ["SOMALLOC_CACHE_DIR"])))

# Forwarding: allocations and frees reach the functions handed to init.
shim = ctypes.CDLL(path)
ALLOC = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_void_p)
FREE = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_void_p)
MSG = ctypes.CFUNCTYPE(ctypes.c_char_p)
calls = []
alloc = ALLOC(lambda size, dev, stream: calls.append(("alloc", size, dev, stream)) or 0x1000 + size)
free = FREE(lambda p, size, dev, stream: calls.append(("free", p, size, dev, stream)))
msg = MSG(lambda: b"why")
shim.somalloc_oom_init.argtypes = [ctypes.c_void_p] * 5
check("init refuses a missing function", shim.somalloc_oom_init(None, ctypes.cast(free, ctypes.c_void_p), ctypes.cast(msg, ctypes.c_void_p), None, None) == -1)
check("init takes somalloc's functions without the runtime's", shim.somalloc_oom_init(*[ctypes.cast(f, ctypes.c_void_p) for f in (alloc, free, msg)], None, None) == 0)
shim.somalloc_oom_alloc.restype = ctypes.c_void_p
shim.somalloc_oom_alloc.argtypes = [ctypes.c_size_t, ctypes.c_int, ctypes.c_void_p]
shim.somalloc_oom_free.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_void_p]
p = shim.somalloc_oom_alloc(256, 3, 0x77)
shim.somalloc_oom_free(p, 256, 3, 0x77)
check("an allocation and a free are forwarded with their arguments", p == 0x1100 and calls == [("alloc", 256, 3, 0x77), ("free", 0x1100, 256, 3, 0x77)], str(calls))

# A refused allocation throws c10::OutOfMemoryError with somalloc's reason,
# and clears the runtime's last error only when it is out-of-memory (2):
# caught by a C++ caller, as PyTorch catches it.
with open(os.path.join(work, "caller.cpp"), "w") as f:
    f.write(
        r"""#include <c10/util/Exception.h>
#include <dlfcn.h>
#include <cstdio>
#include <cstring>
static int last = 2, cleared = 0;
static void* no_alloc(size_t, int, void*) { return nullptr; }
static void no_free(void*, size_t, int, void*) {}
static const char* reason() { return "pool exhausted"; }
static int peek() { return last; }
static int get() { int l = last; last = 0; ++cleared; return l; }
int main(int, char** argv) {
  void* h = dlopen(argv[1], RTLD_NOW);
  if (!h) { std::printf("dlopen: %s\n", dlerror()); return 1; }
  auto init = reinterpret_cast<int (*)(void*, void*, void*, void*, void*)>(dlsym(h, "somalloc_oom_init"));
  auto alloc = reinterpret_cast<void* (*)(size_t, int, void*)>(dlsym(h, "somalloc_oom_alloc"));
  init((void*)no_alloc, (void*)no_free, (void*)reason, (void*)peek, (void*)get);
  int ok = 0;
  try { alloc(1 << 20, 1, nullptr); } catch (const c10::OutOfMemoryError& e) {
    ok = std::strstr(e.what(), "could not allocate 1048576 bytes on device 1 (pool exhausted)") != nullptr;
    std::printf("caught: %s\n", e.what());
  }
  last = 700;  // another error pending: left alone
  try { alloc(64, 0, nullptr); } catch (const c10::OutOfMemoryError&) {}
  std::printf("cleared %d, last %d\n", cleared, last);
  return ok && cleared == 1 && last == 700 ? 0 : 1;
}
"""
    )
exe = os.path.join(work, "caller")
subprocess.run([cxx, "-I", os.path.join(root, "include"), os.path.join(work, "caller.cpp"), "-o", exe, "-L", os.path.join(root, "lib"), "-lc10", "-Wl,-rpath," + os.path.join(root, "lib"), "-ldl"], check=True)
r = subprocess.run([exe, path], capture_output=True, text=True)
check("a refused allocation throws c10::OutOfMemoryError with the reason, and clears only an out-of-memory last error", r.returncode == 0, (r.stdout + r.stderr).strip()[:200])

# Failures are explained, never raised.
st_which = st.shutil.which
st.shutil.which = lambda name: None
del os.environ["CXX"]
os.environ["SOMALLOC_CACHE_DIR"] = os.path.join(work, "cache2")
p2, why2 = st._oom_shim(torch)
check("no compiler: none, and why", p2 is None and "no C++ compiler" in why2, why2)
os.environ["CXX"] = "/bin/false"
p3, why3 = st._oom_shim(torch)
check("a failing compiler: none, why, and nothing left in the cache", p3 is None and "failed" in why3 and os.listdir(os.path.join(work, "cache2")) == [], why3[:120])
st.shutil.which = st_which
bare = types.SimpleNamespace(__file__=os.path.join(work, "nowhere", "__init__.py"), __version__="0", _C=None)
p4, why4 = st._oom_shim(bare)
check("no headers: none, and why", p4 is None and "headers" in why4, why4[:120])

# The built-in route, which needs no compiler: the extension throws the
# exception itself with the stand-in libc10's constructor of c10::Error,
# loaded as PyTorch would have loaded it. A C++ caller catches what the
# raising entry points throw.
st.shutil.which = lambda name: None
os.environ.pop("CXX", None)
c10 = ctypes.CDLL(os.path.join(root, "lib", "libc10.so"))
syms, why = st._cxx_symbols(torch)
check("the built-in route finds its symbols in the stand-in libc10 and the C++ runtime", syms is not None, str(why))
import somalloc

native = somalloc._native
check("OutOfMemoryError's type_info, not exported by the stand-in, is made by the extension", native.torch_oom_init(syms) is True)
with open(os.path.join(work, "catcher.cpp"), "w") as f:
    f.write(
        r"""#include <c10/util/Exception.h>
#include <cstdio>
#include <exception>
using Alloc = void* (*)(size_t, int, void*);
using Raise = void (*)(size_t, int, int);
// 1: OutOfMemoryError, 2: another c10::Error, 3: something else, 0: returned.
extern "C" int try_alloc(void* fn, size_t n, char* out, size_t cap) {
  try { void* p = reinterpret_cast<Alloc>(fn)(n, 0, nullptr); std::snprintf(out, cap, "returned %p", p); return 0; }
  catch (const c10::OutOfMemoryError& e) { std::snprintf(out, cap, "%s", e.what()); return 1; }
  catch (const c10::Error& e) { std::snprintf(out, cap, "%s", e.what()); return 2; }
  catch (...) { return 3; }
}
extern "C" int try_raise(void* fn, size_t n, int oom, char* out, size_t cap) {
  try { reinterpret_cast<Raise>(fn)(n, 3, oom); return 0; }
  catch (const c10::OutOfMemoryError& e) { std::snprintf(out, cap, "%s", e.what()); return 1; }
  catch (const c10::Error& e) { std::snprintf(out, cap, "%s", e.what()); return 2; }
  catch (...) { return 3; }
}
// Caught as its base class only, then as std::exception only.
extern "C" int try_raise_base(void* fn, size_t n) {
  int r = 0;
  try { reinterpret_cast<Raise>(fn)(n, 0, 1); } catch (const c10::Error&) { r += 1; } catch (...) { r += 100; }
  try { reinterpret_cast<Raise>(fn)(n, 0, 1); } catch (const std::exception&) { r += 10; } catch (...) { r += 100; }
  return r;
}
"""
    )
catcher_so = os.path.join(work, "catcher.so")
subprocess.run([cxx, "-shared", "-fPIC", "-I", os.path.join(root, "include"), os.path.join(work, "catcher.cpp"), "-o", catcher_so, "-L", os.path.join(root, "lib"), "-lc10", "-Wl,-rpath," + os.path.join(root, "lib")], check=True)
catcher = ctypes.CDLL(catcher_so)
catcher.try_alloc.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p, ctypes.c_size_t]
catcher.try_raise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_char_p, ctypes.c_size_t]
catcher.try_raise_base.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
ext = ctypes.CDLL(somalloc.library_path())
raising = ctypes.cast(ext.somalloc_torch_alloc_raising, ctypes.c_void_p)
raise_check = ctypes.cast(ext.somalloc_torch_raise_check, ctypes.c_void_p)
buf = ctypes.create_string_buffer(1024)
r = catcher.try_alloc(raising, 1 << 20, buf, 1024)
text = buf.value.decode()
# No GPU here: the refusal's status is not out of memory, so c10::Error.
check("a refusal that is not out of memory throws c10::Error with somalloc's reason", r == 2 and text.startswith("somalloc: could not allocate 1048576 bytes on device 0 (") and len(text) > 50, "%d %s" % (r, text[:160]))
r = catcher.try_alloc(raising, 0, buf, 1024)
check("an empty request returns NULL without throwing", r == 0, buf.value.decode())
r = catcher.try_raise(raise_check, 4096, 1, buf, 1024)
text = buf.value.decode()
check("out of memory throws c10::OutOfMemoryError (the type_info made here), with the reason", r == 1 and text.startswith("somalloc: out of memory: could not allocate 4096 bytes on device 3 ("), "%d %s" % (r, text[:160]))
check("and it is caught as c10::Error and as std::exception", catcher.try_raise_base(raise_check, 64) == 11)
# With OutOfMemoryError's own type_info (the catcher's copy stands in for an
# exported one) nothing is made.
syms["oom_typeinfo"] = ctypes.cast(catcher["_ZTIN3c1016OutOfMemoryErrorE"], ctypes.c_void_p).value
check("an exported type_info is used as it is", native.torch_oom_init(syms) is False)
r = catcher.try_raise(raise_check, 4096, 1, buf, 1024)
check("and out of memory is caught as c10::OutOfMemoryError", r == 1 and "out of memory" in buf.value.decode(), "%d %s" % (r, buf.value.decode()[:120]))
bad = dict(syms, error_ctor=0)
try:
    native.torch_oom_init(bad)
    check("a missing constructor is refused", False)
except ValueError as e:
    check("a missing constructor is refused", "error_ctor" in str(e), str(e))

# enable() takes the built-in route with no compiler, against a stand-in
# PyTorch module (no GPU: somalloc's own start is skipped).
made = []


class FakePluggable:
    def __init__(self, path, alloc, free):
        self.args = (path, alloc, free)


torch.cuda = types.SimpleNamespace(memory=types.SimpleNamespace(CUDAPluggableAllocator=FakePluggable, change_current_allocator=made.append))
torch.version = types.SimpleNamespace(hip=None if somalloc.backend() == "cuda" else "6")
sys.modules["torch"] = torch
somalloc._start = lambda framework, conf: None
alloc = st.enable()
check(
    "enable() without a compiler installs the built-in raising entry point",
    made == [alloc] and alloc.args == (somalloc.library_path(), "somalloc_torch_alloc_raising", "somalloc_torch_free") and st.oom_route() == "built-in" and st.raises_oom(),
    str(getattr(alloc, "args", None)),
)

print("%d passed, %d failed" % (sum(checks), len(checks) - sum(checks)))
sys.exit(0 if all(checks) else 1)
