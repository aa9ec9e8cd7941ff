//! The planning adaptor on the device: a run recorded through a
//! `RecordingAdaptor`, then more steps of it served from the plan of its
//! trace, every buffer filled and verified by a kernel (a block handed out
//! over a live one would lose its pattern), and a planned block freed on
//! another stream than its own.

use std::sync::Arc;

use somalloc::adaptors::{PlanningAdaptor, RecordingAdaptor};
use somalloc::trace::{RecordOptions, Trace};
use somalloc::{DeviceBuffer, MemoryResource};

use crate::common::{say, setup, Ctx};

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
