"""somalloc under CuPy, on a GPU: a plain script that ends with
"N passed, N failed".

    python3 python/tests/cupy_gpu.py [CONF]
"""

import sys

import cupy

import somalloc
import somalloc.cupy

results = []


def check(name, ok, detail=""):
    results.append(bool(ok))
    print("%s %s%s" % ("ok  " if ok else "FAIL", name, (": " + detail) if detail else ""), flush=True)


def main():
    conf = sys.argv[1] if len(sys.argv) > 1 else None
    print("cupy %s, somalloc %s (%s), conf %r" % (cupy.__version__, somalloc.__version__, somalloc.backend(), conf), flush=True)
    somalloc.cupy.enable(conf)
    sizes = [1, 100, 4096, 1 << 20, (5 << 20) + 3, 64 << 20]
    for name, stream in [("null stream", cupy.cuda.Stream.null), ("a created stream", cupy.cuda.Stream(non_blocking=True))]:
        with stream:
            arrays = [(cupy.full(n, i + 1, dtype=cupy.uint8), i + 1) for i, n in enumerate(sizes)]
            ptrs = [a.data.ptr for a, _ in arrays]
            ok = all(bool((a == v).all()) for a, v in arrays)
            del arrays
            again = cupy.arange(1 << 20, dtype=cupy.int64)
            total = int(again.sum())
            stream.synchronize()
        check("%s: arrays of %d sizes hold their contents" % (name, len(sizes)), ok and total == (1 << 20) * ((1 << 20) - 1) // 2)
        check("%s: allocated by somalloc on CuPy's current stream" % name, len(set(ptrs)) == len(ptrs))
    st = somalloc.stats(0)
    check("statistics count CuPy's allocations", st["allocations"] >= 2 * len(sizes) and st["failed_frees"] == 0, str({k: st[k] for k in ("allocations", "frees", "cache_hits", "failed_frees")}))
    free, total = cupy.cuda.runtime.memGetInfo()
    try:
        cupy.empty(total * 2, dtype=cupy.uint8)
        check("an allocation larger than the device is cupy's OutOfMemoryError", False, "it succeeded")
    except cupy.cuda.memory.OutOfMemoryError as e:
        check("an allocation larger than the device is cupy's OutOfMemoryError", True, str(e)[:80])
    somalloc.empty_cache()
    st = somalloc.stats(0)
    check("empty_cache leaves nothing cached and lets the streams go", st["cache_cached_bytes"] == 0 and not somalloc.cupy._streams, str(st["cache_cached_bytes"]))
    passed = sum(results)
    print("%d passed, %d failed" % (passed, len(results) - passed), flush=True)
    return 0 if passed == len(results) else 1


if __name__ == "__main__":
    sys.exit(main())
