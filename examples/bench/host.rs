//! Pinned host memory: the workloads `host_pair` and `h2d`.
//!
//! * `host_pair`: allocate + free of pinned host memory on one stream, by
//!   size: the vendor pool of pinned host memory through the raw calls
//!   (`raw`, the reference), `HostBuffer` on it (`somalloc`), the stream
//!   cache tier over it through the resource trait (`cache`) and under a
//!   `HostBuffer` (`cache+buf`), against the synchronous `cudaMallocHost` /
//!   `cudaFreeHost` (`mallochost`) and `cudaHostAlloc` / `cudaFreeHost`
//!   (`hostalloc`); HIP: `hipHostMalloc` / `hipHostFree` for both.
//! * `h2d`: one 64 MiB host-to-device copy, enqueued and waited for, from a
//!   `HostBuffer` of the pool (`somalloc`), from `cudaMallocHost` memory
//!   (`mallochost`) and from pageable memory (`pageable`, the reference);
//!   the rows carry GB/s.
//!
//! Where the runtime has no pools of pinned host memory (HIP; CUDA before
//! 12.6), the pool rows are left out and the synchronous ones still run.

use std::ffi::c_void;
use std::sync::Arc;
use std::time::Instant;

use somalloc::testkit::{raw, PinnedHost, PinnedHostCall};
use somalloc::{
    CacheConfig, CacheTier, DeviceBuffer, Error, HostBuffer, MemPool, MemoryResource, PoolProperties, Stream,
};

use crate::alloc::cache_extra;
use crate::results::{self, Row, RAW};
use crate::workloads::{size_param, Ctx, KIB, MIB};

/// The sizes of `host_pair`.
pub const HOST_SIZES: [usize; 4] = [4 * KIB, 64 * KIB, MIB, 64 * MIB];
/// The size of the `h2d` copy.
pub const H2D_BYTES: usize = 64 * MIB;
/// The allocators of `host_pair`, in the order they run.
pub const HOST_PAIR_ALLOCATORS: [&str; 6] = [RAW, "somalloc", "cache", "cache+buf", MALLOCHOST, HOSTALLOC];
/// The sources of `h2d`.
pub const H2D_SOURCES: [&str; 3] = ["somalloc", MALLOCHOST, PAGEABLE];
pub const MALLOCHOST: &str = "mallochost";
pub const HOSTALLOC: &str = "hostalloc";
/// The reference of `h2d` (see `results::reference_allocator`).
pub const PAGEABLE: &str = "pageable";

/// What the host allocators mean (`vendor`: `cuda` or `hip`), for the
/// results file's allocator table.
pub fn describe(vendor: &str) -> [(&'static str, String); 3] {
    let (malloc_host, host_alloc, free_host) = if vendor == "hip" {
        ("hipHostMalloc", "hipHostMalloc", "hipHostFree")
    } else {
        ("cudaMallocHost", "cudaHostAlloc", "cudaFreeHost")
    };
    [
        (
            MALLOCHOST,
            format!("testkit::PinnedHost: synchronous {malloc_host} / {free_host}"),
        ),
        (
            HOSTALLOC,
            format!("testkit::PinnedHost: synchronous {host_alloc} (default flag) / {free_host}"),
        ),
        (
            PAGEABLE,
            "a Vec<u8> (pageable host memory): the runtime stages the copy".into(),
        ),
    ]
}

/// The label of the `h2d` parameter.
pub fn h2d_param() -> String {
    format!("{}, host to device", size_param(H2D_BYTES))
}

/// A pool of pinned host memory for `ctx`'s device, keeping what it frees:
/// `Location::Host`, else NUMA node 0 (CUDA 12.6-12.9); `None` where the
/// runtime has neither.
fn host_pool(ctx: &Ctx) -> somalloc::Result<Option<MemPool>> {
    let pool = match MemPool::create(&ctx.dev, PoolProperties::host()) {
        Ok(p) => p,
        Err(Error::Unsupported { .. }) => match MemPool::create(&ctx.dev, PoolProperties::host_numa(0)) {
            Ok(p) => p,
            Err(Error::Unsupported { .. }) => return Ok(None),
            Err(e) => return Err(e),
        },
        Err(e) => return Err(e),
    };
    pool.set_release_threshold(usize::MAX)?;
    Ok(Some(pool))
}

/// The note of a row: what the pool rows allocate from, or why they are
/// missing.
pub fn pool_note(name: &str, have_pool: bool) -> Option<&'static str> {
    match (name, have_pool) {
        (MALLOCHOST | HOSTALLOC | PAGEABLE, true) => None,
        ("cache" | "cache+buf", true) => {
            Some("on a pool of pinned host memory; one tier for every size and repeat")
        }
        (_, true) => Some("on a pool of pinned host memory"),
        (_, false) => Some("no pools of pinned host memory on this runtime"),
    }
}

/// One repeat's figure: host ns per operation and the row's other numbers.
struct Timed {
    ns: f64,
    ops: u64,
    extra: Vec<(&'static str, f64)>,
}

/// Runs `f` for every (parameter, allocator) `repeats` times, alternating
/// the allocators' order between repeats, and reduces each to a row: the
/// median of its repeats.
fn measure<P: Copy>(
    ctx: &Ctx,
    workload: &str,
    params: &[(String, P)],
    names: &[&str],
    note: impl Fn(&str) -> Option<&'static str>,
    mut f: impl FnMut(P, &str) -> somalloc::Result<Timed>,
) -> somalloc::Result<Vec<Row>> {
    let mut samples: Vec<Vec<Vec<Timed>>> = (0..params.len())
        .map(|_| (0..names.len()).map(|_| Vec::new()).collect())
        .collect();
    for rep in 0..ctx.plan.repeats {
        for (pi, (label, p)) in params.iter().enumerate() {
            let mut order: Vec<usize> = (0..names.len()).collect();
            if rep % 2 == 1 {
                order.reverse();
            }
            for ni in order {
                ctx.pb
                    .set_message(format!("{workload} {label} {} (repeat {})", names[ni], rep + 1));
                samples[pi][ni].push(f(*p, names[ni])?);
                ctx.pb.inc(1);
            }
        }
    }
    let mut rows = Vec::new();
    for (pi, (label, _)) in params.iter().enumerate() {
        for (ni, name) in names.iter().enumerate() {
            let s = &samples[pi][ni];
            let ns: Vec<f64> = s.iter().map(|t| t.ns).collect();
            let mut extra = std::collections::BTreeMap::<String, Vec<f64>>::new();
            for t in s {
                for (k, v) in &t.extra {
                    extra.entry(k.to_string()).or_default().push(*v);
                }
            }
            rows.push(Row {
                workload: workload.into(),
                param: label.clone(),
                allocator: name.to_string(),
                ns_per_op: results::median(&ns),
                ratio_to_raw: None,
                ops: s.last().map_or(0, |t| t.ops),
                samples: ns,
                extra: extra.into_iter().map(|(k, v)| (k, results::median(&v))).collect(),
                note: note(name).map(String::from),
            });
        }
    }
    Ok(rows)
}

/// `n` timed pairs of `alloc` then `free`, after 64 untimed ones, with the
/// stream synchronised at the end (inside the timing).
fn pairs<B>(
    stream: &Stream,
    n: u64,
    mut alloc: impl FnMut() -> somalloc::Result<B>,
    mut free: impl FnMut(B) -> somalloc::Result<()>,
) -> somalloc::Result<Timed> {
    for _ in 0..64 {
        let b = alloc()?;
        free(b)?;
    }
    stream.synchronize()?;
    let t0 = Instant::now();
    for _ in 0..n {
        let b = alloc()?;
        free(b)?;
    }
    stream.synchronize()?;
    Ok(Timed {
        ns: t0.elapsed().as_nanos() as f64 / n as f64,
        ops: n,
        extra: Vec::new(),
    })
}

/// `host_pair`: the pool's pinned pairs against the synchronous calls.
pub fn host_pair(ctx: &Ctx, rows: &mut Vec<Row>) -> somalloc::Result<()> {
    let pool = host_pool(ctx)?;
    let stream = &ctx.stream;
    let tier = pool
        .as_ref()
        .map(|p| CacheTier::new(Arc::new(p.clone()), CacheConfig::default()))
        .transpose()?;
    let cache: Option<Arc<dyn MemoryResource>> = match &tier {
        Some(t) => Some(t.for_stream(stream)?),
        None => None,
    };
    let names: Vec<&str> = HOST_PAIR_ALLOCATORS
        .into_iter()
        .filter(|n| pool.is_some() || [MALLOCHOST, HOSTALLOC].contains(n))
        .collect();
    let note = |name: &str| pool_note(name, pool.is_some());
    let params: Vec<(String, usize)> = HOST_SIZES.iter().map(|&b| (size_param(b), b)).collect();
    let mut r = measure(ctx, "host_pair", &params, &names, note, |bytes, name| {
        // The synchronous calls pin pages each time: fewer of them for the
        // large sizes.
        let sync_n = (ctx.plan.sync_iters * MIB as u64 / bytes as u64).clamp(10, ctx.plan.sync_iters);
        let mut t = match (name, &pool, &cache) {
            (MALLOCHOST, ..) => pairs(
                stream,
                sync_n,
                || PinnedHost::new(bytes, PinnedHostCall::MallocHost),
                |b| {
                    drop(b);
                    Ok(())
                },
            )?,
            (HOSTALLOC, ..) => pairs(
                stream,
                sync_n,
                || PinnedHost::new(bytes, PinnedHostCall::HostAlloc),
                |b| {
                    drop(b);
                    Ok(())
                },
            )?,
            (RAW, Some(pool), _) => pairs(
                stream,
                ctx.plan.pair_iters,
                || raw::malloc_from_pool_async(bytes, pool, stream),
                // SAFETY: from the allocation just above on this stream,
                // freed once, never used.
                |p: *mut c_void| unsafe { raw::free_async(p, stream) },
            )?,
            ("somalloc", Some(pool), _) => pairs(
                stream,
                ctx.plan.pair_iters,
                || HostBuffer::<u8>::new_in(bytes, pool, stream),
                HostBuffer::release,
            )?,
            ("cache", _, Some(cache)) => pairs(
                stream,
                ctx.plan.pair_iters,
                || cache.allocate(bytes, stream),
                // SAFETY: from this resource's allocate on this stream,
                // freed once, never used.
                |p| unsafe { cache.deallocate(p, bytes, stream) },
            )?,
            ("cache+buf", _, Some(cache)) => pairs(
                stream,
                ctx.plan.pair_iters,
                || HostBuffer::<u8>::new_with(bytes, cache, stream),
                HostBuffer::release,
            )?,
            _ => unreachable!("a pool allocator without a pool"),
        };
        t.extra.push(("bytes", bytes as f64));
        if name.starts_with("cache") {
            if let Some(tier) = &tier {
                t.extra.extend(cache_extra(&tier.stats().total));
            }
        }
        Ok(t)
    })?;
    // The pool pair over each synchronous call, measured in this run.
    for param in params.iter().map(|(p, _)| p) {
        let ns = |name: &str| {
            r.iter()
                .find(|x| &x.param == param && x.allocator == name)
                .map(|x| x.ns_per_op)
        };
        let (Some(pool_ns), Some(mh), Some(ha)) = (ns("somalloc"), ns(MALLOCHOST), ns(HOSTALLOC)) else {
            continue;
        };
        for row in r
            .iter_mut()
            .filter(|x| &x.param == param && x.allocator == "somalloc")
        {
            row.extra.insert("x_faster_than_mallochost".into(), mh / pool_ns);
            row.extra.insert("x_faster_than_hostalloc".into(), ha / pool_ns);
        }
    }
    drop(tier);
    stream.synchronize()?;
    rows.extend(r);
    Ok(())
}

/// One copy of `bytes` from `src` into `dst`, enqueued on `dst`'s stream and
/// waited for, timed on the host; GB/s in the extra figures.
fn timed_copies(
    stream: &Stream,
    n: u64,
    bytes: usize,
    mut copy: impl FnMut() -> somalloc::Result<()>,
) -> somalloc::Result<Timed> {
    copy()?;
    stream.synchronize()?;
    let t0 = Instant::now();
    for _ in 0..n {
        copy()?;
        stream.synchronize()?;
    }
    let ns = t0.elapsed().as_nanos() as f64 / n as f64;
    Ok(Timed {
        ns,
        ops: n,
        extra: vec![("bytes", bytes as f64), ("gb_per_s", bytes as f64 / ns)],
    })
}

/// `h2d`: 64 MiB from pool memory, `cudaMallocHost` memory and pageable
/// memory to the device.
pub fn h2d(ctx: &Ctx, rows: &mut Vec<Row>) -> somalloc::Result<()> {
    const N: usize = H2D_BYTES;
    let stream = &ctx.stream;
    let pool = host_pool(ctx)?;
    let mut dst = DeviceBuffer::<u8>::new_in(N, &ctx.pool, stream)?;
    let mut from_pool = match &pool {
        Some(p) => {
            let mut h = HostBuffer::<u8>::new_in(N, p, stream)?;
            h.wait_slice_mut()?.fill(0x5A);
            Some(h)
        }
        None => None,
    };
    let mut pinned = PinnedHost::new(N, PinnedHostCall::MallocHost)?;
    pinned.as_mut_slice().fill(0x5A);
    let pageable = vec![0x5Au8; N];
    let names: Vec<&str> = H2D_SOURCES
        .into_iter()
        .filter(|n| from_pool.is_some() || *n != "somalloc")
        .collect();
    let note = |name: &str| pool_note(name, pool.is_some());
    let iters = (ctx.plan.sync_iters / 5).max(10);
    let params = [(h2d_param(), ())];
    let r = measure(ctx, "h2d", &params, &names, note, |(), name| match name {
        "somalloc" => {
            let h = from_pool.as_mut().expect("filtered above");
            timed_copies(stream, iters, N, || h.copy_to_device(&mut dst))
        }
        // SAFETY (both): the source outlives the copy, which is waited for
        // (stream synchronised) before the next statement, and is not
        // written meanwhile.
        MALLOCHOST => timed_copies(stream, iters, N, || unsafe {
            dst.copy_from_host_async(pinned.as_slice())
        }),
        _ => timed_copies(stream, iters, N, || unsafe {
            dst.copy_from_host_async(&pageable)
        }),
    })?;
    rows.extend(r);
    // Check what arrived (the last copy was from whichever ran last; all
    // sources hold the same bytes).
    if dst.to_vec()?.iter().any(|&b| b != 0x5A) {
        return Err(Error::InvalidArgument {
            reason: somalloc::InvalidReason::Other,
            why: "h2d: the device buffer does not hold the copied bytes".into(),
        });
    }
    drop(from_pool);
    stream.synchronize()?;
    Ok(())
}
