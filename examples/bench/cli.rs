//! The command line (parsed with `lexopt`) and the iteration plans.

use std::path::PathBuf;

use crate::workloads::WORKLOADS;

/// Iteration counts: the default run and `--quick`.
#[derive(Clone, Copy, Debug)]
pub struct Plan {
    pub repeats: usize,
    pub pair_iters: u64,
    pub churn_steps: u64,
    pub thread_pairs: u64,
    pub threshold_iters_keep: u64,
    pub threshold_iters_release: u64,
    pub sync_iters: u64,
    /// Timeline samples per churn run (about).
    pub timeline_points: u64,
}

impl Plan {
    pub const DEFAULT: Plan = Plan {
        repeats: 7,
        pair_iters: 200_000,
        churn_steps: 400_000,
        thread_pairs: 100_000,
        threshold_iters_keep: 2_000,
        threshold_iters_release: 100,
        sync_iters: 300,
        timeline_points: 1_000,
    };
    pub const QUICK: Plan = Plan {
        repeats: 3,
        pair_iters: 20_000,
        churn_steps: 40_000,
        thread_pairs: 10_000,
        threshold_iters_keep: 200,
        threshold_iters_release: 10,
        sync_iters: 50,
        timeline_points: 400,
    };
}

/// What the command line asked for.
pub struct Args {
    pub quick: bool,
    pub out: PathBuf,
    pub plot_only: Option<PathBuf>,
    pub format_test: bool,
    pub seed: u64,
    pub repeats: Option<usize>,
    pub only: Option<Vec<String>>,
    pub device: usize,
    /// Traces for the replay workload (default: those in benches/data).
    pub traces: Vec<PathBuf>,
    pub help: bool,
}

pub const USAGE: &str = "\
usage: bench [--quick] [--out DIR] [--seed N] [--repeats N] [--only W1,W2,...] [--device N]
             [--trace FILE]...
       bench --plot-only RESULTS.json [--out DIR]
       bench --format-test [--out DIR]

  --quick           fewer iterations and 3 repeats (under 30 s on an H200)
  --out DIR         where results.json, table.txt and the SVG pictures go (default bench-out/)
  --seed N          seed of the churn workload's RNG (default 42)
  --repeats N       repeats per measurement; the median is reported (default 7, --quick 3)
  --only LIST       run only these workloads (comma-separated): seed_pipeline, graph_pipeline,
                    pair, churn, threads, threshold, synchronous, host_pair, h2d, replay, recording
  --device N        device ordinal (default 0)
  --trace FILE      a trace to replay (somalloc's format or RMM's logging CSV; repeat for more);
                    default: the *.trace and *.csv files in benches/data
  --plot-only FILE  draw the pictures (and print the table) of a results file; no GPU needed
  --format-test     write a results file of placeholder values (labelled \"format test\"), read it
                    back, draw it, and check every picture is there and non-empty; no GPU needed

exit status: 0 done (also: no GPU, after one line saying so); 1 error; 2 bad arguments";

/// Parses the process's arguments.
pub fn parse_args() -> Result<Args, String> {
    parse(lexopt::Parser::from_env())
}

fn parse(mut p: lexopt::Parser) -> Result<Args, String> {
    use lexopt::prelude::*;
    let mut a = Args {
        quick: false,
        out: PathBuf::from("bench-out"),
        plot_only: None,
        format_test: false,
        seed: 42,
        repeats: None,
        only: None,
        device: 0,
        traces: Vec::new(),
        help: false,
    };
    let err = |e: lexopt::Error| e.to_string();
    while let Some(arg) = p.next().map_err(err)? {
        match arg {
            Long("quick") => a.quick = true,
            Long("out") => a.out = p.value().map_err(err)?.into(),
            Long("plot-only") => a.plot_only = Some(p.value().map_err(err)?.into()),
            Long("format-test") => a.format_test = true,
            Long("seed") => a.seed = p.value().map_err(err)?.parse().map_err(err)?,
            Long("repeats") => {
                let n: usize = p.value().map_err(err)?.parse().map_err(err)?;
                if n == 0 {
                    return Err("--repeats must be at least 1".into());
                }
                a.repeats = Some(n);
            }
            Long("device") => a.device = p.value().map_err(err)?.parse().map_err(err)?,
            Long("trace") => a.traces.push(p.value().map_err(err)?.into()),
            Long("only") => {
                let text = p.value().map_err(err)?.string().map_err(err)?;
                let list: Vec<String> = text.split(',').map(|s| s.trim().to_string()).collect();
                if let Some(bad) = list.iter().find(|w| !WORKLOADS.contains(&w.as_str())) {
                    return Err(format!(
                        "unknown workload '{bad}' (known: {})",
                        WORKLOADS.join(",")
                    ));
                }
                a.only = Some(list);
            }
            // `cargo bench` / `cargo run` conventions that mean nothing here.
            Long("bench") => {}
            Short('h') | Long("help") => a.help = true,
            other => return Err(other.unexpected().to_string()),
        }
    }
    Ok(a)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(list: &[&str]) -> Result<Args, String> {
        parse(lexopt::Parser::from_args(list.iter().copied()))
    }

    #[test]
    fn parses_the_options() {
        let a = args(&["--quick", "--seed", "7", "--only", "pair,churn", "--out", "x"]).unwrap();
        assert!(a.traces.is_empty());
        assert!(a.quick);
        assert_eq!(a.seed, 7);
        assert_eq!(a.only.unwrap(), vec!["pair", "churn"]);
        assert_eq!(a.out, PathBuf::from("x"));
    }

    #[test]
    fn takes_traces_to_replay() {
        let a = args(&["--only", "replay", "--trace", "a.trace", "--trace", "b.csv"]).unwrap();
        assert_eq!(a.only.unwrap(), vec!["replay"]);
        assert_eq!(a.traces, vec![PathBuf::from("a.trace"), PathBuf::from("b.csv")]);
        assert!(args(&["--trace"]).is_err());
    }

    #[test]
    fn refuses_bad_input() {
        assert!(args(&["--repeats", "0"]).is_err());
        assert!(args(&["--seed", "x"]).is_err());
        assert!(args(&["--only", "nope"]).is_err());
        assert!(args(&["--what"]).is_err());
    }
}
