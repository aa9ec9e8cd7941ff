"""Checks, without a GPU and without PyTorch, how somalloc.torch builds its
raising entry points (_torch_oom.cpp): against a stand-in "torch" whose
headers and libc10 declare just what the file uses, it must build with a
compiler that links the C++ runtime dynamically, find the build in its cache
the second time, forward allocations and frees to the functions it is
given, and explain every way it can fail.

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

print("%d passed, %d failed" % (sum(checks), len(checks) - sum(checks)))
sys.exit(0 if all(checks) else 1)
