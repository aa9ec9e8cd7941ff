//! The cost of recording: the cache tier with and without a
//! `RecordingAdaptor` in front.

use std::path::PathBuf;
use std::sync::Arc;

use somalloc::adaptors::RecordingAdaptor;
use somalloc::testkit::TestKernels;
use somalloc::trace::{RecordOptions, Recorder};
use somalloc::{MemoryResource, Stream};

use super::CACHE_REC;
use crate::alloc::{new_tier, CacheBlock, StreamAlloc};
use crate::results::{self, Check, Row, CACHE};
use crate::workloads::{pair, Ctx, Sample, KIB};

/// The cache tier behind a `RecordingAdaptor`: `allocate` / `deallocate`
/// on the adaptor (a static call; the adaptor calls the stream's cache
/// through the resource trait).
pub struct RecAlloc {
    rec: RecordingAdaptor,
    stream: Stream,
}

impl StreamAlloc for RecAlloc {
    type Block = CacheBlock;
    #[inline(always)]
    fn alloc(&self, bytes: usize) -> somalloc::Result<CacheBlock> {
        let ptr = self.rec.allocate(bytes, &self.stream)?;
        Ok(CacheBlock { ptr, bytes })
    }
    #[inline(always)]
    fn free(&self, block: CacheBlock) -> somalloc::Result<()> {
        // SAFETY: from `allocate` of this adaptor with these bytes, on this
        // stream, freed once; nothing used the block.
        unsafe { self.rec.deallocate(block.ptr, block.bytes, &self.stream) }
    }
    fn stream(&self) -> &Stream {
        &self.stream
    }
    fn process(&self, k: &TestKernels, block: &CacheBlock, _: usize) -> somalloc::Result<()> {
        // SAFETY: a live block of `block.bytes` usable on this stream,
        // freed by its caller on this stream after the kernel.
        let range = unsafe { somalloc::testkit::RawRange::new(block.ptr, block.bytes, &self.stream) };
        k.process(&range, &self.stream)
    }
}

/// Where the recording workload's trace goes (removed afterwards).
fn recording_file() -> PathBuf {
    std::env::temp_dir().join(format!("somalloc-bench-recording-{}.trace", std::process::id()))
}

/// One measurement: `n` 64 KiB pairs on a fresh tier, recorded or not.
fn recording_sample(ctx: &Ctx, recorded: bool) -> somalloc::Result<Sample> {
    const BYTES: usize = 64 * KIB;
    let n = ctx.plan.pair_iters;
    let tier = new_tier(&ctx.pool)?;
    let cache = tier.for_stream(&ctx.stream)?;
    if !recorded {
        let a = crate::alloc::CacheAlloc::new(&tier, &ctx.stream)?;
        return pair(&a, BYTES, n);
    }
    // Room for every event of the measurement, so that none is dropped
    // (a dropped event would cost less than a recorded one).
    let events = (2 * n as usize + 1024).next_power_of_two();
    let options = RecordOptions::default().buffer_events(events).markers(false);
    let recorder = Recorder::to_file(recording_file(), options)?;
    let a = RecAlloc {
        rec: RecordingAdaptor::new(cache, Arc::clone(&recorder)),
        stream: ctx.stream.clone(),
    };
    let mut s = pair(&a, BYTES, n)?;
    drop(a);
    let stats = recorder.finish()?;
    let _ = std::fs::remove_file(recording_file());
    s.extra.push(("events_written", stats.events as f64));
    s.extra.push(("events_dropped", stats.dropped as f64));
    Ok(s)
}

/// The recording workload: `cache` and `cache+rec` rows, each repeat in
/// alternating order, the median of each.
pub fn recording(ctx: &Ctx, rows: &mut Vec<Row>) -> somalloc::Result<()> {
    let param = "64 KiB pairs".to_string();
    let names = [CACHE, CACHE_REC];
    let mut samples: [Vec<Sample>; 2] = [Vec::new(), Vec::new()];
    for rep in 0..ctx.plan.repeats {
        let order: [usize; 2] = if rep % 2 == 0 { [0, 1] } else { [1, 0] };
        for i in order {
            ctx.pb
                .set_message(format!("recording {param} {} (repeat {})", names[i], rep + 1));
            samples[i].push(recording_sample(ctx, i == 1)?);
            ctx.pb.inc(1);
        }
    }
    let mut out: Vec<Row> = Vec::new();
    for (i, s) in samples.iter().enumerate() {
        let ns: Vec<f64> = s.iter().map(|x| x.ns_per_op).collect();
        let mut extra: std::collections::BTreeMap<String, Vec<f64>> = std::collections::BTreeMap::new();
        for x in s {
            for (k, v) in &x.extra {
                extra.entry(k.to_string()).or_default().push(*v);
            }
        }
        out.push(Row {
            workload: "recording".into(),
            param: param.clone(),
            allocator: names[i].into(),
            ns_per_op: results::median(&ns),
            ratio_to_raw: None,
            ops: s.last().map_or(0, |x| x.ops),
            samples: ns,
            extra: extra.into_iter().map(|(k, v)| (k, results::median(&v))).collect(),
            note: None,
        });
    }
    // Two events (an allocation and a free) per pair.
    let per_event = (out[1].ns_per_op - out[0].ns_per_op) / 2.0;
    out[1].extra.insert("ns_per_event_over_cache".into(), per_event);
    rows.extend(out);
    Ok(())
}

/// The recording target: at most 50 ns per event over the cache tier.
pub fn checks(rows: &[Row]) -> Vec<Check> {
    rows.iter()
        .filter(|r| r.workload == "recording" && r.allocator == CACHE_REC)
        .filter_map(|r| r.extra.get("ns_per_event_over_cache").map(|v| (r, *v)))
        .map(|(r, v)| {
            Check::at_most(
                format!("recording {}: ns per event over the cache tier", r.param),
                v,
                50.0,
                " ns",
            )
        })
        .collect()
}
