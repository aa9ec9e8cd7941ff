//! What a run leaves behind: the table on stdout and in `table.txt`,
//! `results.json`, and the pictures; reading a results file back; and the
//! format test of that path.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use crate::alloc::Kind;
use crate::results::{self, Results, READS, SYNC};
use crate::{placeholder, plot};

/// Writes `results.json`, `table.txt` and the pictures; prints the table.
pub fn write_outputs(res: &Results, out: &Path, write_json: bool) -> Result<Vec<PathBuf>, String> {
    std::fs::create_dir_all(out).map_err(|e| format!("creating {}: {e}", out.display()))?;
    let table = results::table(res);
    print!("{table}");
    let mut written = Vec::new();
    if write_json {
        let json = serde_json::to_string_pretty(res).map_err(|e| e.to_string())?;
        let path = out.join("results.json");
        std::fs::write(&path, json + "\n").map_err(|e| format!("writing {}: {e}", path.display()))?;
        written.push(path);
    }
    let path = out.join("table.txt");
    std::fs::write(&path, &table).map_err(|e| format!("writing {}: {e}", path.display()))?;
    written.push(path);
    written.extend(plot::plot_all(res, out)?);
    Ok(written)
}

pub fn read_results(file: &Path) -> Result<Results, String> {
    let text = std::fs::read_to_string(file).map_err(|e| format!("reading {}: {e}", file.display()))?;
    let res: Results =
        serde_json::from_str(&text).map_err(|e| format!("{}: not a results file: {e}", file.display()))?;
    if !READS.contains(&res.format.as_str()) {
        return Err(format!(
            "{}: format '{}', this program reads {}",
            file.display(),
            res.format,
            READS.join(", ")
        ));
    }
    Ok(res)
}

pub fn plot_only(file: &Path, out: &Path) -> ExitCode {
    let done = read_results(file).and_then(|res| write_outputs(&res, out, false));
    match done {
        Ok(written) => {
            println!("\nwrote {}", list(&written));
            ExitCode::SUCCESS
        }
        Err(msg) => {
            eprintln!("bench --plot-only: {msg}");
            ExitCode::FAILURE
        }
    }
}

pub fn list(paths: &[PathBuf]) -> String {
    paths
        .iter()
        .map(|p| p.display().to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

/// The JSON → plot path on placeholder values: write, read back, draw,
/// check that every picture is there and not empty.
pub fn format_test(out: &Path) -> ExitCode {
    let run = || -> Result<usize, String> {
        let res = placeholder::placeholder_results(42);
        std::fs::create_dir_all(out).map_err(|e| format!("creating {}: {e}", out.display()))?;
        let json = out.join("results.json");
        let text = serde_json::to_string_pretty(&res).map_err(|e| e.to_string())?;
        std::fs::write(&json, text).map_err(|e| format!("writing {}: {e}", json.display()))?;
        let back = read_results(&json)?;
        if back.rows.len() != res.rows.len() || back.timelines.len() != res.timelines.len() {
            return Err("the results file did not read back whole".into());
        }
        write_outputs(&back, out, false)?;
        for name in plot::PICTURES {
            let path = out.join(name);
            let len = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
            if len == 0 {
                return Err(format!("{} is missing or empty", path.display()));
            }
            let text = std::fs::read_to_string(&path).map_err(|e| e.to_string())?;
            if !text.contains("<svg") || !text.contains("format test") {
                return Err(format!("{} is not the expected SVG", path.display()));
            }
        }
        Ok(plot::PICTURES.len())
    };
    match run() {
        Ok(n) => {
            println!(
                "format test: ok, results.json read back and {n} pictures in {}",
                out.display()
            );
            ExitCode::SUCCESS
        }
        Err(msg) => {
            eprintln!("format test: FAILED: {msg}");
            ExitCode::FAILURE
        }
    }
}

/// What each allocator name means (`vendor`: `cuda` or `hip`).
pub fn allocators(vendor: &str) -> BTreeMap<String, String> {
    let mut all: BTreeMap<String, String> = Kind::ALL
        .iter()
        .map(|k| (k.name().to_string(), k.describe(vendor)))
        .collect();
    all.insert(
        SYNC.into(),
        format!("testkit::SyncBuffer: synchronous {vendor}Malloc / {vendor}Free"),
    );
    all.extend(crate::host::describe(vendor).map(|(k, v)| (k.to_string(), v)));
    all
}
