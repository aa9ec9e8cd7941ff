//! `somalloc-trace`: looks at a memory history recorded by somalloc's
//! `RecordingAdaptor` (or logged by RMM's `logging_resource_adaptor`).
//!
//! ```text
//! somalloc-trace summary run.trace              # peaks, per stream, the largest live at the peak
//! somalloc-trace html run.trace -o run.html     # one self-contained page: open it in a browser
//! somalloc-trace convert rmm-log.csv -o run.trace
//! somalloc-trace synth --events 1000000 -o big.trace
//! somalloc-trace simulate run.trace           # what other allocators would have reserved
//! somalloc-trace steps run.trace              # the repeated step, planned and served again
//! ```
//!
//! The trace format is read, and the repeated step planned, with the
//! library's own code (`src/format.rs` and `src/plan/`, compiled in here),
//! so the tool builds without a GPU backend and runs anywhere.
//!
//! Depends on those files of the library and on clap (proptest for its
//! tests); `analysis` reads a
//! trace into peaks and live sets, `html` draws the page, `simulate` replays
//! a trace through models of other allocators.

#[path = "../../src/format.rs"]
#[allow(dead_code)]
mod format;

mod analysis;
mod html;
#[path = "../../src/plan/mod.rs"]
#[allow(dead_code, unused_imports)]
mod plan;
mod simulate;
mod steps;
mod summary;
mod synth;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use clap::{Parser, Subcommand};

use analysis::Analysis;
use format::Trace;

#[derive(Parser)]
#[command(
    name = "somalloc-trace",
    version,
    about = "Summarise a memory trace and draw it as a web page"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Prints the peaks (in all, per device, per stream), when they were
    /// reached and the largest allocations live at the peak.
    Summary {
        /// A somalloc trace or an RMM logging-adaptor CSV.
        trace: PathBuf,
        /// How many of the allocations live at the peak to list.
        #[arg(long, default_value_t = 20)]
        top: usize,
    },
    /// Writes one self-contained HTML page (no network): live bytes over
    /// time per stream, and the allocations as blocks in address order over
    /// time, with hover details (size, stream, backtrace).
    Html {
        /// A somalloc trace or an RMM logging-adaptor CSV.
        trace: PathBuf,
        /// The page to write (default: the trace's name with `.html`).
        #[arg(short, long)]
        out: Option<PathBuf>,
        /// Allocations drawn as blocks of their own (the largest); the
        /// others are drawn together as a raster.
        #[arg(long, default_value_t = 20_000)]
        max_blocks: usize,
        /// Time buckets of the live-bytes chart.
        #[arg(long, default_value_t = 1200)]
        buckets: usize,
    },
    /// Converts a trace (an RMM CSV, say) into somalloc's format.
    Convert {
        /// A somalloc trace or an RMM logging-adaptor CSV.
        trace: PathBuf,
        /// The somalloc trace to write.
        #[arg(short, long)]
        out: PathBuf,
    },
    /// Replays the trace's allocations and frees through models of other
    /// allocators (PyTorch's caching allocator, with and without expandable
    /// segments; an arena of 2 MiB pages, ideal and lazy; a planned
    /// placement) and prints the device memory each would have reserved.
    Simulate {
        /// A somalloc trace or an RMM logging-adaptor CSV.
        trace: PathBuf,
        /// The models, comma-separated: caching, expandable, pages,
        /// segments:SIZE:LIMIT (shared segments of SIZE MiB for requests
        /// under LIMIT MiB), remap, remap:MIB (remap with a slack of MIB
        /// MiB; remap is remap:0), plan.
        #[arg(
            long,
            default_value = "caching,expandable,pages,remap,remap:256,plan",
            value_delimiter = ','
        )]
        models: Vec<String>,
        /// Every stream of a device takes from the same free blocks, as if
        /// a block freed on one stream were ready on the others at once: the
        /// bound of sharing blocks between streams.
        #[arg(long)]
        one_pool: bool,
    },
    /// Finds the step the program repeats on each stream, plans a recorded
    /// step's placement (lifetimes known, blocks that live into the next
    /// step included) and serves the last step from that plan, each block
    /// checked against the live ones: what an allocator that plans steps
    /// would hold.
    Steps {
        /// A somalloc trace or an RMM logging-adaptor CSV.
        trace: PathBuf,
        /// How many slots ahead an allocation looks for a slot of its size.
        #[arg(long, default_value_t = 16)]
        window: usize,
        /// How the plan whose streams share one arena passes bytes between
        /// them (the C ABI's plan_share): a host lag in milliseconds,
        /// `device` or `device+MS` (by the trace's device times); several
        /// rules separated by commas (e.g. device+5,device+15,device+25)
        /// print one plan each, to choose a margin by the memory it keeps.
        #[arg(long, default_value = "10")]
        share: String,
    },
    /// Writes a synthetic trace (threads, streams, random sizes, address
    /// reuse), to try the tool and the page on a trace of any size.
    Synth {
        /// Events to write.
        #[arg(long, default_value_t = 1_000_000)]
        events: u64,
        /// Threads (two streams each).
        #[arg(long, default_value_t = 4)]
        threads: u32,
        /// Seed of the random choices.
        #[arg(long, default_value_t = 42)]
        seed: u64,
        /// The trace to write.
        #[arg(short, long)]
        out: PathBuf,
    },
}

fn read(path: &Path) -> Result<Trace, String> {
    let bytes = std::fs::read(path).map_err(|e| format!("reading {}: {e}", path.display()))?;
    Trace::parse(&bytes).map_err(|e| format!("{}: {e}", path.display()))
}

fn run(cli: Cli) -> Result<(), String> {
    match cli.command {
        Command::Summary { trace, top } => {
            let t = read(&trace)?;
            let a = Analysis::of(&t);
            print!("{}", summary::summary(&t, &a, top));
        }
        Command::Html {
            trace,
            out,
            max_blocks,
            buckets,
        } => {
            let started = Instant::now();
            let t = read(&trace)?;
            let a = Analysis::of(&t);
            let out = out.unwrap_or_else(|| trace.with_extension("html"));
            let title = trace.file_name().map_or_else(
                || trace.display().to_string(),
                |n| n.to_string_lossy().into_owned(),
            );
            let options = html::PageOptions {
                max_blocks,
                buckets: buckets.max(1),
                ..html::PageOptions::default()
            };
            let page = html::page(&t, &a, &title, options);
            std::fs::write(&out, &page).map_err(|e| format!("writing {}: {e}", out.display()))?;
            println!(
                "wrote {} ({:.1} MiB) from {} events in {:.2} s",
                out.display(),
                page.len() as f64 / (1u64 << 20) as f64,
                t.events.len(),
                started.elapsed().as_secs_f64()
            );
        }
        Command::Simulate {
            trace,
            models,
            one_pool,
        } => {
            let models = models
                .iter()
                .map(|m| {
                    simulate::Model::parse(m.trim()).ok_or_else(|| {
                        format!(
                            "unknown model {m:?}: expected caching, expandable, pages, segments:SIZE:LIMIT, remap, remap:MIB or plan"
                        )
                    })
                })
                .collect::<Result<Vec<_>, _>>()?;
            let t = read(&trace)?;
            let sim =
                simulate::simulate(&t, &models, one_pool).map_err(|e| format!("{}: {e}", trace.display()))?;
            print!("{}", simulate::report(&t, &sim));
        }
        Command::Steps { trace, window, share } => {
            let rules = share
                .split(',')
                .map(|r| plan::Sharing::parse(r).map_err(|e| format!("--share: {e}")))
                .collect::<Result<Vec<_>, _>>()?;
            let t = read(&trace)?;
            if rules.iter().any(|r| r.needs_device_times()) && !t.events.iter().any(|e| e.device_ns.is_some())
            {
                return Err(format!(
                    "--share {share}: {} has no device times (record with trace_device:on)",
                    trace.display()
                ));
            }
            let s = steps::steps(&t, window).map_err(|e| format!("{}: {e}", trace.display()))?;
            let sh = rules
                .into_iter()
                .map(|r| steps::shared(&t, r).map(|sh| (r, sh)))
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| format!("{}: {e}", trace.display()))?;
            print!("{}", steps::report(&t, &s, &sh));
        }
        Command::Convert { trace, out } => {
            let t = read(&trace)?;
            let file = std::fs::File::create(&out).map_err(|e| format!("creating {}: {e}", out.display()))?;
            let mut w = format::write_trace(&t, std::io::BufWriter::new(file))
                .map_err(|e| format!("writing {}: {e}", out.display()))?;
            w.flush().map_err(|e| format!("writing {}: {e}", out.display()))?;
            println!("wrote {} ({} events)", out.display(), t.events.len());
        }
        Command::Synth {
            events,
            threads,
            seed,
            out,
        } => {
            let file = std::fs::File::create(&out).map_err(|e| format!("creating {}: {e}", out.display()))?;
            let mut w = std::io::BufWriter::new(file);
            let n = synth::synthesize(&mut w, events, threads, seed)
                .and_then(|n| w.flush().map(|_| n))
                .map_err(|e| format!("writing {}: {e}", out.display()))?;
            println!("wrote {} ({n} events)", out.display());
        }
    }
    Ok(())
}

fn main() -> ExitCode {
    match run(Cli::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(msg) => {
            eprintln!("somalloc-trace: {msg}");
            ExitCode::FAILURE
        }
    }
}
