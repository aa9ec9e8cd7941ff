//! The main job: shows the device and its pools, runs the seeds'
//! synchronous-versus-stream-ordered pipeline, and prints pool statistics.
//!
//! ```text
//! cargo run --release --features cuda,kernels --example pipeline
//! cargo run --release --features cuda,kernels --example pipeline -- --record pipeline.trace
//! ```
//!
//! The pipeline is 100 × (allocate 4 MiB, run a kernel over 1<<20 floats,
//! free), once with the synchronous `cudaMalloc`/`cudaFree` (`hipMalloc` /
//! `hipFree`) and once stream-ordered through somalloc, timed with events
//! around each loop. With no GPU it prints one line and exits.
//!
//! `--record FILE` records the stream-ordered loop's allocations into a
//! trace (a `RecordingAdaptor` over the pool, installed as the device's
//! current resource, so the loop itself is unchanged), for the benchmark's
//! replay and the `somalloc-trace` tool.

use std::process::ExitCode;

use std::path::PathBuf;
use std::sync::Arc;

use somalloc::adaptors::RecordingAdaptor;
use somalloc::testkit::{SyncBuffer, TestKernels};
use somalloc::trace::RecordOptions;
use somalloc::{Device, DeviceBuffer, Error, Event, MemPool, Stream};

const N: usize = 1 << 20;
const ITERATIONS: usize = 100;

fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    let mut record = None;
    while let Some(a) = args.next() {
        match (a.as_str(), args.next()) {
            ("--record", Some(file)) => record = Some(PathBuf::from(file)),
            _ => {
                eprintln!("usage: pipeline [--record FILE]");
                return ExitCode::from(2);
            }
        }
    }
    match run(record) {
        Ok(code) => code,
        Err(e @ (Error::RuntimeNotFound { .. } | Error::NoDevice { .. })) => {
            println!("somalloc pipeline: no GPU, nothing to run ({e})");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("somalloc pipeline: error: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(record: Option<PathBuf>) -> somalloc::Result<ExitCode> {
    let count = Device::count()?;
    println!(
        "backend {} (runtime {}), {count} device(s)",
        Device::backend(),
        Device::runtime_version()?
    );
    for ordinal in 0..count {
        let d = Device::get(ordinal)?;
        println!(
            "  device {ordinal}: {}, {:.1} GiB total, {:.1} GiB free, memory pools: {}",
            d.name()?,
            gib(d.total_memory()? as u64),
            gib(d.free_memory()? as u64),
            if d.supports_memory_pools()? { "yes" } else { "no" }
        );
    }

    let dev = Device::get(0)?;
    let pool = MemPool::default_for(&dev)?;
    let current = MemPool::current(&dev)?;
    println!(
        "default pool {:p} (current: {}), release threshold {}, reuse policy {:?}",
        pool.as_raw(),
        if current == pool { "yes" } else { "no" },
        pool.release_threshold()?,
        pool.reuse_policy()?
    );
    // Keep freed memory in the pool between iterations, as the seeds advise
    // (process-wide: every user of the default pool in the process keeps it).
    pool.set_release_threshold(usize::MAX)?;
    println!("  set release threshold to usize::MAX; stats: {}", pool.stats()?);

    let kernels = TestKernels::load(&dev)?;
    let stream = Stream::new(&dev)?;
    let bytes = N * std::mem::size_of::<f32>();

    // Warm both paths once (module load, first pool reservation).
    drop(SyncBuffer::new(&dev, bytes)?);
    drop(DeviceBuffer::<f32>::new(N, &stream)?);
    stream.synchronize()?;
    pool.reset_peaks()?;

    let start = Event::with_timing(&dev)?;
    let stop = Event::with_timing(&dev)?;

    start.record(&stream)?;
    for _ in 0..ITERATIONS {
        let data = SyncBuffer::new(&dev, bytes)?; // synchronises
        kernels.process(&data, &stream)?;
        drop(data); // cudaFree / hipFree: synchronises
    }
    stop.record(&stream)?;
    stop.synchronize()?;
    let sync_ms = start.elapsed_ms(&stop)?;

    // With --record: every DeviceBuffer::new on this device goes through a
    // recording adaptor over the pool from here on.
    let recording = match &record {
        Some(path) => {
            let rec = Arc::new(RecordingAdaptor::to_file(
                Arc::new(pool.clone()),
                path,
                RecordOptions::default(),
            )?);
            somalloc::set_current_resource(&dev, rec.clone())?;
            Some(rec)
        }
        None => None,
    };

    start.record(&stream)?;
    let mut last = None;
    for i in 0..ITERATIONS {
        let data = DeviceBuffer::<f32>::new(N, &stream)?; // enqueued, no sync
        kernels.process(&data, &stream)?;
        if i + 1 == ITERATIONS {
            last = Some(data); // kept to check the result below
        } // else: the free is enqueued on `stream`
    }
    stream.synchronize()?;
    stop.record(&stream)?;
    stop.synchronize()?;
    let async_ms = start.elapsed_ms(&stop)?;

    if let Some(data) = last {
        let host = data.to_vec()?;
        let wrong = host
            .iter()
            .enumerate()
            .filter(|(i, &v)| v != (*i as f32).sqrt())
            .count();
        if wrong != 0 {
            eprintln!("somalloc pipeline: {wrong} of {N} elements differ from sqrt(i)");
            return Ok(ExitCode::FAILURE);
        }
        println!("result check: {N} elements equal sqrt(i)");
    }

    println!("pipeline: {ITERATIONS} x (allocate 4 MiB, kernel over 1<<20 floats, free)");
    println!("  synchronous (malloc/free):  {sync_ms:8.3} ms");
    println!("  stream-ordered (somalloc):  {async_ms:8.3} ms");
    println!("  speedup:                    {:8.1}x", sync_ms / async_ms);
    let s = pool.stats()?;
    println!(
        "default pool after the run: used {} B (peak {} B), reserved {:.1} MiB (peak {:.1} MiB)",
        s.used_current,
        s.used_peak,
        mib(s.reserved_current),
        mib(s.reserved_peak)
    );
    if let Some(rec) = recording {
        somalloc::reset_current_resource(&dev);
        let recorder = Arc::clone(rec.recorder());
        drop(rec);
        // What a replay of the trace compares its reserved peak with.
        recorder.set_meta("pool_reserved_peak", &s.reserved_peak.to_string());
        let stats = recorder.finish()?;
        if let Some(path) = &record {
            println!("recorded {}: {stats}", path.display());
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn gib(b: u64) -> f64 {
    b as f64 / (1u64 << 30) as f64
}

fn mib(b: usize) -> f64 {
    b as f64 / (1usize << 20) as f64
}
