//! The planning adaptor on the device: a run recorded through a
//! `RecordingAdaptor`, then more steps of it served from the plan of its
//! trace, every buffer filled and verified by a kernel (a block handed out
//! over a live one would lose its pattern), and a planned block freed on
//! another stream than its own.

use std::sync::Arc;

use somalloc::adaptors::{PlanningAdaptor, RecordingAdaptor};
use somalloc::plan::{DeviceProgram, Plan, Sharing};
use somalloc::trace::{Action, RecordOptions, Trace};
use somalloc::{DeviceBuffer, MemoryResource};

use crate::common::{say, setup, setup_alone, Ctx};

const SIZES: [usize; 5] = [1 << 20, (3 << 20) + 7, 64 << 10, 17 << 20, 4096];

/// `steps` steps: buffers of every size filled with the step's seeds and
/// verified, and one carried into the next step (as a gradient is),
/// verified there.
fn run(ctx: &Ctx, res: &Arc<dyn MemoryResource>, steps: u32) {
    let mut carried: Option<(DeviceBuffer<u8>, u32)> = None;
    for step in 0..steps {
        if let Some((buf, seed)) = carried.take() {
            assert_eq!(
                ctx.k.verify(&buf, seed, &ctx.stream).unwrap(),
                0,
                "step {step}: carried"
            );
        }
        let mut live = Vec::new();
        for (i, &n) in SIZES.iter().enumerate() {
            let mut b = DeviceBuffer::<u8>::new_with(n, res, &ctx.stream).unwrap();
            let seed = step * 100 + i as u32;
            ctx.k.fill(&mut b, seed, &ctx.stream).unwrap();
            live.push((b, seed));
        }
        for (b, seed) in &live {
            assert_eq!(ctx.k.verify(b, *seed, &ctx.stream).unwrap(), 0, "step {step}");
        }
        drop(live);
        let mut g = DeviceBuffer::<u8>::new_with(2 << 20, res, &ctx.stream).unwrap();
        ctx.k.fill(&mut g, 7000 + step, &ctx.stream).unwrap();
        carried = Some((g, 7000 + step));
    }
}

#[test]
fn a_recorded_run_is_served_from_its_plan() {
    let Some(ctx) = setup("plan::a_recorded_run_is_served_from_its_plan") else {
        return;
    };
    let path = std::env::temp_dir().join(format!("somalloc-plan-conformance-{}.trace", std::process::id()));
    let recording = Arc::new(
        RecordingAdaptor::to_file(Arc::new(ctx.pool.clone()), &path, RecordOptions::default()).unwrap(),
    );
    let res: Arc<dyn MemoryResource> = recording.clone();
    run(&ctx, &res, 3);
    drop(res);
    recording.recorder().finish().unwrap();
    let trace = Trace::read(&path).unwrap();
    let _ = std::fs::remove_file(&path);

    let planned = Arc::new(PlanningAdaptor::new(Arc::new(ctx.pool.clone()), &trace).unwrap());
    let res: Arc<dyn MemoryResource> = planned.clone();
    run(&ctx, &res, 12);
    let (served, refused) = planned.counts();
    say(&format!(
        "plan::a_recorded_run_is_served_from_its_plan: {served} served, {refused} refused, arena {} bytes",
        planned.arena_bytes()
    ));
    assert_eq!(served + refused, 12 * 6);
    assert!(served >= 12 * 6 - 2, "{served} served, {refused} refused");

    // A planned block freed on another stream: its own stream waits for
    // that one before the slot is handed out again.
    let other = ctx.new_stream();
    let first = SIZES[0];
    let p = res.allocate(first, &ctx.stream).unwrap();
    // SAFETY: allocated above, unused, freed once.
    unsafe { res.deallocate(p, first, &other).unwrap() };
    let mut again = DeviceBuffer::<u8>::new_with(first, &res, &ctx.stream).unwrap();
    ctx.k.fill(&mut again, 1, &ctx.stream).unwrap();
    assert_eq!(ctx.k.verify(&again, 1, &ctx.stream).unwrap(), 0);
    drop(again);
    drop(res);
    ctx.stream.synchronize().unwrap();
    assert!(planned.release(&ctx.stream).unwrap());
    ctx.finish(&[&other]);
}

/// One step of two streams that share bytes: on `a`, a 16 MiB buffer
/// filled, held by a 20 ms spin, then copied into `keep_a` and freed; on
/// `b`, a buffer allocated after that free (the same bytes, when shared)
/// and filled at once. Unless `b` waits for `a`'s free, its fill lands
/// during `a`'s spin and `keep_a` gets `b`'s pattern. A small block each
/// makes the step long enough to repeat. `settle`: the host waits for `a`
/// before `b` allocates, so the device has passed `a`'s frees by then.
fn two_stream_step(
    ctx: &Ctx,
    res: &Arc<dyn MemoryResource>,
    b: &somalloc::Stream,
    keep: (&mut DeviceBuffer<u8>, &mut DeviceBuffer<u8>),
    seed: u32,
    settle: bool,
) {
    let a = &ctx.stream;
    let mut x = DeviceBuffer::<u8>::new_with(16 << 20, res, a).unwrap();
    let small_a = DeviceBuffer::<u8>::new_with(4096, res, a).unwrap();
    ctx.k.fill(&mut x, seed, a).unwrap();
    ctx.k.spin(crate::common::spin_cycles(20), a).unwrap();
    keep.0.copy_from_device(&x).unwrap();
    drop(small_a);
    drop(x);
    if settle {
        a.synchronize().unwrap();
    }
    let mut y = DeviceBuffer::<u8>::new_with(16 << 20, res, b).unwrap();
    let small_b = DeviceBuffer::<u8>::new_with(4096, res, b).unwrap();
    ctx.k.fill(&mut y, seed + 1, b).unwrap();
    keep.1.copy_from_device(&y).unwrap();
    drop(small_b);
    drop(y);
}

/// The buffers `two_stream_step` copies each stream's block into, one on
/// each stream.
type Keep = (DeviceBuffer<u8>, DeviceBuffer<u8>);

/// Stream b, and the buffers `two_stream_step` copies into (one on each
/// stream).
fn second_stream(ctx: &Ctx) -> (somalloc::Stream, Keep) {
    let b = ctx.new_stream();
    let keep = (
        DeviceBuffer::<u8>::new_in(16 << 20, &ctx.pool, &ctx.stream).unwrap(),
        DeviceBuffer::<u8>::new_in(16 << 20, &ctx.pool, &b).unwrap(),
    );
    (b, keep)
}

/// Three steps of `two_stream_step` recorded through `ctx.pool` with
/// `options`: the trace, and the recorder's figures.
fn record_two_stream_steps(
    ctx: &Ctx,
    b: &somalloc::Stream,
    keep: &mut Keep,
    name: &str,
    options: RecordOptions,
) -> (Trace, somalloc::trace::RecorderStats) {
    let path = std::env::temp_dir().join(format!("somalloc-plan-{name}-{}.trace", std::process::id()));
    let recording = Arc::new(RecordingAdaptor::to_file(Arc::new(ctx.pool.clone()), &path, options).unwrap());
    let res: Arc<dyn MemoryResource> = recording.clone();
    for step in 0..3 {
        two_stream_step(ctx, &res, b, (&mut keep.0, &mut keep.1), 10 * step, false);
    }
    drop(res);
    ctx.stream.synchronize().unwrap();
    b.synchronize().unwrap();
    let stats = recording.recorder().finish().unwrap();
    let trace = Trace::read(&path).unwrap();
    let _ = std::fs::remove_file(&path);
    (trace, stats)
}

/// Stream b, the buffers `two_stream_step` copies into, and three steps of
/// it recorded (the trace named after `name`).
fn two_streams_recorded(ctx: &Ctx, name: &str) -> (somalloc::Stream, Keep, Trace) {
    let (b, mut keep) = second_stream(ctx);
    let (trace, _) = record_two_stream_steps(ctx, &b, &mut keep, name, RecordOptions::default());
    (b, keep, trace)
}

/// The plan of `trace` over `ctx.pool`, its streams sharing every byte
/// freed before (a host lag of 0): stream b takes a's 16 MiB block's bytes.
fn shared_by_host(ctx: &Ctx, trace: &Trace) -> PlanningAdaptor {
    PlanningAdaptor::with_lag(Arc::new(ctx.pool.clone()), trace, Some(std::time::Duration::ZERO)).unwrap()
}

/// Eight steps of `two_stream_step` (with `settle`) served by `planned`,
/// both streams' copies verified; then both streams give the plan up. Returns the
/// allocations served and refused, and the arena's bytes.
fn serve_two_stream_steps(
    ctx: &Ctx,
    planned: &Arc<PlanningAdaptor>,
    b: &somalloc::Stream,
    keep: &mut Keep,
    name: &str,
    settle: bool,
) -> (u64, u64, u64) {
    let res: Arc<dyn MemoryResource> = planned.clone();
    for step in 0..8 {
        let seed = 100 + 10 * step;
        two_stream_step(ctx, &res, b, (&mut keep.0, &mut keep.1), seed, settle);
        assert_eq!(
            ctx.k.verify(&keep.0, seed, &ctx.stream).unwrap(),
            0,
            "step {step}: stream b wrote into a's block before a was done with it"
        );
        assert_eq!(ctx.k.verify(&keep.1, seed + 1, b).unwrap(), 0, "step {step}");
    }
    let (served, refused) = planned.counts();
    let arena = planned.arena_bytes();
    say(&format!(
        "plan::{name}: {served} served, {refused} refused, arena {arena} bytes"
    ));
    drop(res);
    ctx.stream.synchronize().unwrap();
    b.synchronize().unwrap();
    assert!(planned.release(b).unwrap());
    assert!(planned.release(&ctx.stream).unwrap());
    (served, refused, arena)
}

#[test]
fn streams_sharing_a_plan_wait_for_each_other() {
    let Some(ctx) = setup("plan::streams_sharing_a_plan_wait_for_each_other") else {
        return;
    };
    let (b, mut keep, trace) = two_streams_recorded(&ctx, "shared");
    let planned = Arc::new(shared_by_host(&ctx, &trace));
    let (served, refused, arena) = serve_two_stream_steps(
        &ctx,
        &planned,
        &b,
        &mut keep,
        "streams_sharing_a_plan_wait_for_each_other",
        false,
    );
    // The two 16 MiB blocks share their bytes (one arena for both streams).
    assert!(arena < 17 << 20, "arena {arena}");
    assert_eq!(served + refused, 8 * 4);
    assert!(served >= 8 * 4 - 2, "{served} served, {refused} refused");
    drop(keep);
    ctx.finish(&[&b]);
}

#[test]
fn device_times_keep_apart_the_bytes_the_device_had_not_released() {
    // Alone on the device: another test's streams could share a hardware
    // queue with stream b and order it behind a's spin.
    let Some(ctx) = setup_alone("plan::device_times_keep_apart_the_bytes_the_device_had_not_released") else {
        return;
    };
    // A pool that hands a block freed on one stream to another makes the
    // second wait for the first (internal dependencies): the recorded
    // device times would count that wait as stream b's own.
    ctx.pool.set_reuse_policy(somalloc::ReusePolicy::NONE).unwrap();
    let (b, mut keep) = second_stream(&ctx);
    // Every event timed (the default times one per 100 µs per stream).
    let options = RecordOptions::default()
        .device_times(true)
        .device_time_interval(std::time::Duration::ZERO);
    let (trace, stats) = record_two_stream_steps(&ctx, &b, &mut keep, "device", options);
    // Every allocation and free has its device time (3 steps of 4 blocks).
    assert_eq!(
        (stats.device_times, stats.device_times_missed),
        (24, 0),
        "{stats:?}"
    );
    assert!(trace.events.iter().all(|e| e.device_ns.is_some()));
    // Each stream's queue is reached in order.
    for s in 0..trace.streams.len() as u32 {
        let times: Vec<i64> = trace
            .events
            .iter()
            .filter(|e| e.stream == Some(s))
            .filter_map(|e| e.device_ns)
            .collect();
        assert!(times.windows(2).all(|w| w[0] <= w[1]), "stream {s}: {times:?}");
    }
    // In each step, stream a's free of its 16 MiB block comes after the
    // 20 ms spin on the device, stream b's allocation that follows it on
    // the host finds b idle: the device reached b's allocation first.
    let big: Vec<_> = trace.events.iter().filter(|e| e.bytes == 16 << 20).collect();
    assert_eq!(big.len(), 12);
    let mut gaps = Vec::new();
    for step in big.chunks(4) {
        let (a_free, b_alloc) = (step[1], step[2]);
        assert_eq!((a_free.action, b_alloc.action), (Action::Free, Action::Allocate));
        gaps.push((a_free.device_ns.unwrap() - b_alloc.device_ns.unwrap()) as f64 / 1e6);
    }
    say(&format!(
        "plan::device_times: a's free reached {gaps:.1?} ms after b's allocation on the device"
    ));
    assert!(gaps.iter().all(|&g| g > 5.0), "{gaps:?}");

    // Planned by device times: the blocks stay apart (b never waits for
    // a); by a host lag of 0 they share bytes (see the test above).
    let device = Some(Sharing::Device { margin_ns: 1_000_000 });
    let planned =
        Arc::new(PlanningAdaptor::with_sharing(Arc::new(ctx.pool.clone()), &trace, device).unwrap());
    let (served, refused, arena) =
        serve_two_stream_steps(&ctx, &planned, &b, &mut keep, "device_times", false);
    assert!(arena >= 32 << 20, "arena {arena}");
    assert!(served >= 8 * 4 - 2, "{served} served, {refused} refused");
    let program = DeviceProgram::of(&trace, ctx.stream.device().ordinal() as u32, |_| false);
    let by_host = Plan::for_streams_sharing(&program.ops, Sharing::HostLag(0)).unwrap();
    assert!(by_host.arena < 17 << 20, "arena {}", by_host.arena);
    drop(keep);
    ctx.finish(&[&b]);
}

#[test]
// A deprecated call, tested until it is removed.
#[allow(deprecated)]
fn a_wait_that_stalls_its_stream_diverts_its_slot() {
    // Alone on the device, as the next test, so that b reaches a's bytes
    // while a still spins.
    let Some(ctx) = setup_alone("plan::a_wait_that_stalls_its_stream_diverts_its_slot") else {
        return;
    };
    let (b, mut keep, trace) = two_streams_recorded(&ctx, "divert");
    // Stream b takes a's 16 MiB block's bytes and waits for a's 20 ms spin
    // every step. With a budget of 1 MiB that slot stays; with 64 MiB it
    // goes to the pool once its first timed wait in the repeated step is
    // read, and b stops waiting for a.
    let mut diverted = Vec::new();
    for budget in [1u64 << 20, 64 << 20] {
        let planned = Arc::new(shared_by_host(&ctx, &trace).divert_stalls(budget));
        let name = "a_wait_that_stalls_its_stream_diverts_its_slot";
        let (served, refused, arena) = serve_two_stream_steps(&ctx, &planned, &b, &mut keep, name, false);
        let (slots, bytes) = planned.diverted();
        say(&format!(
            "plan::{name}: a budget of {budget} bytes: {slots} slots diverted, {bytes} bytes"
        ));
        assert!(arena < 17 << 20, "arena {arena}: the blocks share bytes");
        assert_eq!(served + refused, 8 * 4);
        assert!(
            bytes <= budget,
            "{bytes} bytes diverted over a budget of {budget}"
        );
        diverted.push((slots, bytes, refused));
    }
    let (small, large) = (diverted[0], diverted[1]);
    assert!(
        small.1 < 16 << 20,
        "the 16 MiB slot diverted within 1 MiB: {small:?}"
    );
    assert!(
        large.1 >= 16 << 20,
        "the stalling 16 MiB slot was not diverted: {large:?}"
    );
    // Diverted at its first timed wait in the repeated step: its later
    // requests went to the pool.
    assert!(large.2 >= small.2 + 3, "{small:?} {large:?}");
    drop(keep);
    ctx.finish(&[&b]);
}

#[test]
fn timed_waits_add_up_how_long_their_stream_stood_still() {
    let name = "timed_waits_add_up_how_long_their_stream_stood_still";
    // Alone on the device: b must reach a's bytes while a still spins, and
    // a test loading its kernels meanwhile can hold the runtime up for
    // longer than the spin (the device has then passed a's free, and b
    // makes no wait).
    let Some(ctx) = setup_alone(&format!("plan::{name}")) else {
        return;
    };
    let (b, mut keep, trace) = two_streams_recorded(&ctx, "timed");
    // Stream b takes a's 16 MiB block's bytes every step and waits for a's
    // 20 ms spin: counted either way, timed only when asked.
    let mut seen = Vec::new();
    for timing in [false, true] {
        let planned = Arc::new(shared_by_host(&ctx, &trace).time_waits(timing));
        let (served, refused, _) = serve_two_stream_steps(&ctx, &planned, &b, &mut keep, name, false);
        let w = planned.waits();
        say(&format!(
            "plan::{name}: timing {timing}: {} waits, {} events, {} timed, {:.1} ms stood still",
            w.waits,
            w.events,
            w.timed,
            w.stalled_ns as f64 / 1e6
        ));
        assert_eq!(served + refused, 8 * 4);
        assert_eq!(planned.diverted(), (0, 0), "timing alone diverts nothing");
        // One wait of b for a per step at least, each after an event.
        assert!(w.waits >= 8 && w.events >= 1, "{w:?}");
        seen.push(w);
    }
    let (off, on) = (seen[0], seen[1]);
    assert_eq!((off.timed, off.stalled_ns), (0, 0), "untimed: {off:?}");
    // The repeated step's waits (the steps after the plan's first) timed.
    assert!(on.timed >= 4 && on.timed <= on.waits, "{on:?}");
    // Each held b behind a's 20 ms spin: 5 ms or more apiece on average.
    assert!(on.stalled_ns >= on.timed * 5_000_000, "{on:?}");
    drop(keep);
    ctx.finish(&[&b]);
}

#[test]
fn frees_the_device_has_passed_need_no_wait() {
    let name = "frees_the_device_has_passed_need_no_wait";
    let Some(ctx) = setup(&format!("plan::{name}")) else {
        return;
    };
    let (b, mut keep, trace) = two_streams_recorded(&ctx, "passed");
    let planned = Arc::new(shared_by_host(&ctx, &trace));
    // The host waits for a before b takes a's bytes, and the checks wait
    // for both streams at each step's end: the frees are behind the device
    // when their bytes are taken, so the waits are not made, and the
    // contents still check.
    let (served, refused, arena) = serve_two_stream_steps(&ctx, &planned, &b, &mut keep, name, true);
    let w = planned.waits();
    say(&format!("plan::{name}: {w:?}"));
    assert!(arena < 17 << 20, "the streams share the arena's bytes: {arena}");
    assert_eq!(served + refused, 8 * 4);
    assert!(served >= 8 * 4 - 2, "{served} served, {refused} refused");
    // Stream b takes a's 16 MiB block's bytes every step after the host
    // waited for a: passed each time. A wait can still be made where the
    // answer is not known yet: an event recorded only as the bytes are
    // taken (none was recorded at the free), which the device has not
    // reached at that instant, or a query that fails.
    assert!(w.passed >= 8 && w.waits < w.passed && w.events >= 1, "{w:?}");
    drop(keep);
    ctx.finish(&[&b]);
}
