//! The allocation benchmark: every workload of `WORKLOADS.md` (shared with
//! the project) on every allocator under test, each figure beside the raw
//! vendor call measured in the same run.
//!
//! ```text
//! cargo build --release --features cuda,kernels --example bench
//! target/release/examples/bench                  # default run, writes bench-out/
//! target/release/examples/bench --quick          # fewer iterations and repeats
//! target/release/examples/bench --plot-only bench-out/results.json --out pictures/
//! ```
//!
//! Figures are host nanoseconds per operation (`std::time::Instant`), the
//! median over a few repeats; the seed pipeline is timed with events around
//! each loop, as the seeds do. Output: a table on stdout (and `table.txt`),
//! `results.json`, and SVG pictures: a bar chart per workload family, the
//! thread-scaling line chart and the allocation timeline. With no GPU it
//! prints one line and exits 0.
//!
//! The allocators under test are [`Kind::ALL`]: the raw vendor calls,
//! somalloc's buffer on the vendor pool, the stream cache tier, used
//! through the resource trait (`cache`) and under a buffer (`cache+buf`),
//! and somalloc's virtual-memory arena, alone (`arena`) and under the cache
//! tier (`cache+arena`; see `arena.rs`).
//! Adding one is a variant there, name/describe arms, a [`StreamAlloc`] impl
//! and one arm in [`with_alloc!`].

mod alloc;
mod arena;
mod cli;
mod graph;
mod host;
mod lent;
mod output;
mod placeholder;
mod plot;
mod replay;
mod results;
mod workloads;

use std::process::ExitCode;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use somalloc::testkit::TestKernels;
use somalloc::{Device, Error, MemPool, Stream};

use alloc::Kind;
use cli::{Args, Plan};
use output::{allocators, format_test, list, plot_only, write_outputs};
use results::{Meta, Results, FORMAT};
use workloads::*;

// main

pub fn main() -> ExitCode {
    let args = match cli::parse_args() {
        Ok(a) => a,
        Err(msg) => {
            eprintln!("bench: {msg}\n\n{}", cli::USAGE);
            return ExitCode::from(2);
        }
    };
    if args.help {
        println!("{}", cli::USAGE);
        return ExitCode::SUCCESS;
    }
    if let Some(file) = &args.plot_only {
        return plot_only(file, &args.out);
    }
    if args.format_test {
        return format_test(&args.out);
    }
    match run(&args) {
        Ok(code) => code,
        Err(e @ (Error::RuntimeNotFound { .. } | Error::NoDevice { .. })) => {
            println!("somalloc bench: no GPU, nothing measured ({e})");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("somalloc bench: error: {e}");
            ExitCode::FAILURE
        }
    }
}

pub fn selected(args: &Args, workload: &str) -> bool {
    args.only.as_ref().is_none_or(|o| o.iter().any(|w| w == workload))
}

pub fn run(args: &Args) -> somalloc::Result<ExitCode> {
    let started = Instant::now();
    let unix_time = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let dev = Device::get(args.device)?;
    dev.bind_to_thread()?;
    let mut plan = if args.quick { Plan::QUICK } else { Plan::DEFAULT };
    if let Some(r) = args.repeats {
        plan.repeats = r;
    }
    let backend = Device::backend().as_str();
    let vendor = if backend == "rocm" { "hip" } else { "cuda" };
    let device_name = dev.name()?;
    let runtime = Device::runtime_version()?;
    println!(
        "somalloc bench: {device_name} ({backend} runtime {runtime}), {}; seed {}; {} repeats, median reported",
        if args.quick { "--quick" } else { "default run" },
        args.seed,
        plan.repeats
    );

    let pool = MemPool::default_for(&dev)?;
    let saved_threshold = pool.release_threshold()?;
    pool.set_release_threshold(usize::MAX)?;
    let stream = Stream::new(&dev)?;
    let kernels = TestKernels::load(&dev)?;
    // Before anything is counted: without an arena its rows are skipped.
    arena::probe(&dev);

    let workloads: Vec<&str> = WORKLOADS.iter().copied().filter(|w| selected(args, w)).collect();
    if workloads.contains(&"replay") {
        replay::prepare(&args.traces)?;
    }
    let count = |f: fn(Kind) -> bool| Kind::ALL.iter().filter(|k| f(**k)).count() as u64;
    let n_timelines = count(Kind::has_timeline);
    let units: u64 = workloads
        .iter()
        .map(|w| {
            let n_alloc = Kind::ALL.iter().filter(|k| k.runs(w)).count() as u64;
            match *w {
                "seed_pipeline" => n_alloc + 1,
                "graph_pipeline" => 2 * n_alloc,
                "pair" => PAIR_SIZES.len() as u64 * n_alloc,
                "churn" => n_alloc,
                "threads" => THREADS.len() as u64 * n_alloc,
                "threshold" => 2 * count(Kind::runs_threshold),
                "host_pair" => (host::HOST_SIZES.len() * host::HOST_PAIR_ALLOCATORS.len()) as u64,
                "h2d" => host::H2D_SOURCES.len() as u64,
                "replay" => replay::replay_units(),
                "recording" => 2,
                _ => PAIR_SIZES.len() as u64,
            }
        })
        .sum::<u64>()
        * plan.repeats as u64
        + if workloads.contains(&"churn") {
            n_timelines
        } else {
            0
        };
    let pb = ProgressBar::with_draw_target(Some(units), ProgressDrawTarget::stderr());
    pb.set_style(
        ProgressStyle::with_template("{elapsed_precise} [{bar:32}] {pos}/{len} (eta {eta}) {msg}")
            .expect("a valid progress template")
            .progress_chars("=> "),
    );
    let ctx = Ctx {
        dev,
        pool,
        stream,
        kernels,
        plan,
        seed: args.seed,
        pb,
    };

    let mut rows = Vec::new();
    let mut timelines = Vec::new();
    for w in &workloads {
        run_workload(&ctx, w, &mut rows, &mut timelines)?;
    }
    ctx.pb.finish_and_clear();
    ctx.stream.synchronize()?;
    ctx.pool.set_release_threshold(saved_threshold)?;

    results::fill_ratios(&mut rows);
    let checked: Vec<&str> = Kind::ALL
        .iter()
        .filter(|k| k.checked())
        .map(|k| k.name())
        .collect();
    let tiered: Vec<&str> = Kind::ALL
        .iter()
        .filter(|k| k.tier_checked())
        .map(|k| k.name())
        .collect();
    let mut checks = results::compute_checks(&rows, &checked);
    checks.extend(results::compute_tier_checks(&rows, &timelines, &tiered));
    checks.extend(results::compute_borrowed_checks(&rows, &alloc::borrowed()));
    checks.extend(arena::checks(&rows, &timelines));
    checks.extend(replay::checks(&rows));
    let drop_errors = somalloc::drop_errors();
    let res = Results {
        format: FORMAT.into(),
        label: String::new(),
        meta: Meta {
            somalloc_version: env!("CARGO_PKG_VERSION").into(),
            backend: backend.into(),
            runtime_version: runtime,
            device: device_name,
            seed: args.seed,
            quick: args.quick,
            repeats: plan.repeats,
            statistic: format!("median of {} repeats", plan.repeats),
            allocators: allocators(vendor),
            unix_time,
            wall_seconds: started.elapsed().as_secs_f64(),
        },
        rows,
        timelines,
        checks,
    };
    println!();
    match write_outputs(&res, &args.out, true) {
        Ok(written) => println!("\nwrote {}", list(&written)),
        Err(msg) => {
            eprintln!("somalloc bench: error: {msg}");
            return Ok(ExitCode::FAILURE);
        }
    }
    if drop_errors.count > 0 {
        eprintln!("somalloc bench: warning: {drop_errors:?}");
    }
    println!("total {:.1} s", started.elapsed().as_secs_f64());
    Ok(ExitCode::SUCCESS)
}
