//! Builds the C program `tests/c/capi_program.c` (and the cost benchmark
//! `benches/capi_cost.c`) with the `cc` crate against
//! this crate's `libsomalloc.so` and the committed header, runs it, and
//! passes on its verdict: one SKIP line without a GPU; on a GPU, its checks
//! (allocations on the legacy, per-thread and created streams with their
//! contents read back, statistics, refused frees, out of memory, threads,
//! flush / trim / empty-cache) must all pass, and pass again while recording
//! a trace (`trace:PATH`), which must then hold the program's allocations.
//! `tests/c/vmm_program.c` does the same for `pool:vmm` (the arena's
//! statistics, its segments, trim), with and without the cache tier; and a
//! program built from the header checks that the statistics' layout is the
//! library's.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

use somalloc_rs::trace::{Action, Trace};

fn say(line: &str) {
    let _ = writeln!(std::io::stderr().lock(), "{line}");
}

/// The folder with `libsomalloc.so`: Cargo builds the cdylib next to the
/// test binary (`target/<profile>/deps`).
fn library_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("the test binary's path");
    let deps = exe.parent().expect("its folder").to_path_buf();
    for dir in [
        deps.clone(),
        deps.parent().map(Path::to_path_buf).unwrap_or_default(),
    ] {
        if dir.join("libsomalloc.so").exists() {
            return dir;
        }
    }
    panic!("libsomalloc.so is not next to {}", exe.display());
}

/// Builds the C file `source` (relative to this crate, or absolute) into `exe` against
/// `libsomalloc.so`, warnings as errors.
fn build_c(source: &str, exe: &Path) {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let lib = library_dir();
    let target = format!("{}-unknown-linux-gnu", std::env::consts::ARCH);
    let compiler = cc::Build::new()
        .cargo_metadata(false)
        .target(&target)
        .host(&target)
        .opt_level(1)
        .warnings(true)
        .extra_warnings(true)
        .flag("-Werror")
        .flag("-std=c11")
        .include(manifest.join("include"))
        .include(manifest.join("tests/c"))
        .try_get_compiler()
        .expect("a C compiler");
    let built = compiler
        .to_command()
        .arg(manifest.join(source))
        .arg("-o")
        .arg(exe)
        .arg(format!("-L{}", lib.display()))
        .arg("-lsomalloc")
        .arg(format!("-Wl,-rpath,{}", lib.display()))
        .args(["-ldl", "-lpthread"])
        .output()
        .expect("the C compiler runs");
    assert!(
        built.status.success(),
        "{source} does not build:\n{}{}",
        String::from_utf8_lossy(&built.stdout),
        String::from_utf8_lossy(&built.stderr)
    );
}

#[test]
fn the_c_program_passes_or_skips() {
    let out = std::env::temp_dir().join(format!("somalloc-capi-program-{}", std::process::id()));
    std::fs::create_dir_all(&out).unwrap();
    let exe = out.join("capi_program");
    build_c("tests/c/capi_program.c", &exe);
    let verdict = run(&exe, None, None);
    if verdict.starts_with("SKIP") {
        let _ = std::fs::remove_dir_all(&out);
        return;
    }
    // Again, recording into a trace (SOMALLOC_CONF's `trace:PATH`, `%p` the
    // process id): the file is complete at exit, with every allocation and
    // free the program made, the markers of its flush and trims, and the
    // pool's reserved peak.
    let template = out.join("run-%p.trace");
    run(&exe, Some(&template), None);
    // Again, with a plan of a file that is no trace: not used (one line
    // on stderr says why), and every check passes as without it.
    let broken = out.join("broken.plan");
    std::fs::write(&broken, b"not a trace").unwrap();
    run(&exe, None, Some(&broken));
    std::fs::remove_file(&broken).unwrap();
    let traces: Vec<PathBuf> = std::fs::read_dir(&out)
        .unwrap()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "trace"))
        .collect();
    assert_eq!(traces.len(), 1, "one trace file, named with the pid: {traces:?}");
    let t = Trace::read(&traces[0]).expect("the trace reads");
    let _ = std::fs::remove_dir_all(&out);
    assert!(t.complete, "the end record was written at exit");
    let count = |a: Action| t.events.iter().filter(|e| e.action == a).count();
    let (allocs, frees) = (count(Action::Allocate), count(Action::Free));
    say(&format!(
        "c_program: trace of {} events ({allocs} allocations, {frees} frees, {} threads, {} streams), {} dropped",
        t.events.len(),
        t.threads.len(),
        t.streams.len(),
        t.dropped
    ));
    assert!(allocs > 100 && frees > 100, "{allocs} allocations, {frees} frees");
    assert!(
        count(Action::FailedAllocate) >= 1,
        "the out-of-memory check is recorded"
    );
    assert!(count(Action::Flush) >= 1 && count(Action::Trim) >= 1, "markers");
    assert!(t.threads.len() > 1, "the program's threads");
    assert!(t
        .meta("pool_reserved_peak")
        .is_some_and(|v| v.parse::<u64>().is_ok_and(|n| n > 0)));
}

/// Runs the C program (recording into `trace` when given, configured with
/// `plan:PLAN` when `plan` is) and checks its verdict; returns the verdict
/// line.
fn run(exe: &Path, trace: Option<&Path>, plan: Option<&Path>) -> String {
    let mut cmd = Command::new(exe);
    cmd.env_remove("SOMALLOC_CONF")
        .env_remove("CAPI_PROGRAM_TRACE")
        .env_remove("CAPI_PROGRAM_PLAN");
    if let Some(t) = trace {
        cmd.env("CAPI_PROGRAM_TRACE", t);
    }
    if let Some(p) = plan {
        cmd.env("CAPI_PROGRAM_PLAN", p);
    }
    let ran = cmd.output().expect("the C program runs");
    let stdout = String::from_utf8_lossy(&ran.stdout);
    for line in stdout.lines().chain(String::from_utf8_lossy(&ran.stderr).lines()) {
        say(line);
    }
    assert!(ran.status.success(), "the C program failed: {:?}", ran.status);
    let verdict = stdout.lines().last().unwrap_or_default().to_string();
    assert!(
        verdict.starts_with("SKIP capi_program: no GPU") || verdict.ends_with(" passed, 0 failed"),
        "unexpected last line: {verdict}"
    );
    verdict
}

/// The cost benchmark (`benches/capi_cost.c`) builds against the header
/// and the library, and runs: one SKIP line without a GPU, its figures
/// with one.
#[test]
fn the_cost_benchmark_builds_and_runs() {
    let out = std::env::temp_dir().join(format!("somalloc-capi-cost-{}", std::process::id()));
    std::fs::create_dir_all(&out).unwrap();
    let exe = out.join("capi_cost");
    build_c("../benches/capi_cost.c", &exe);
    let ran = Command::new(&exe)
        .arg("20")
        .env_remove("SOMALLOC_CONF")
        .output()
        .expect("the cost benchmark runs");
    let _ = std::fs::remove_dir_all(&out);
    let stdout = String::from_utf8_lossy(&ran.stdout);
    say(stdout.trim_end());
    assert!(
        ran.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&ran.stderr)
    );
    let line = stdout.lines().last().unwrap_or_default();
    assert!(
        line.starts_with("SKIP capi_cost: no GPU") || line.starts_with("capi_cost: (defaults): 20 steps"),
        "unexpected last line: {line}"
    );
}

/// `tests/c/vmm_program.c` under `SOMALLOC_CONF=pool:vmm`, with the cache
/// tier in front of the arena and without it: one SKIP line without a GPU;
/// on a GPU every check must pass.
#[test]
fn the_vmm_program_passes_or_skips() {
    let out = std::env::temp_dir().join(format!("somalloc-capi-vmm-{}", std::process::id()));
    std::fs::create_dir_all(&out).unwrap();
    let exe = out.join("vmm_program");
    build_c("tests/c/vmm_program.c", &exe);
    for conf in ["pool:vmm", "pool:vmm,cache:off"] {
        let ran = Command::new(&exe)
            .env("SOMALLOC_CONF", conf)
            .output()
            .expect("the C program runs");
        let stdout = String::from_utf8_lossy(&ran.stdout);
        for line in stdout.lines().chain(String::from_utf8_lossy(&ran.stderr).lines()) {
            say(line);
        }
        assert!(
            ran.status.success(),
            "{conf}: the C program failed: {:?}",
            ran.status
        );
        let verdict = stdout.lines().last().unwrap_or_default();
        assert!(
            verdict.starts_with("SKIP vmm_program: no GPU") || verdict.ends_with(" passed, 0 failed"),
            "{conf}: unexpected last line: {verdict}"
        );
        if verdict.starts_with("SKIP") {
            break;
        }
    }
    let _ = std::fs::remove_dir_all(&out);
}

/// Fields `(name, offset)` of a `#[repr(C)]` struct, in the order given.
macro_rules! offsets {
    ($t:ty: $($f:ident),* $(,)?) => {
        [$((stringify!($f), std::mem::offset_of!($t, $f))),*]
    };
}

/// The statistics and the segment as a C compiler lays them out from the
/// committed header are what the library writes: every field at the same
/// offset, the same size. The fields of `SomallocStats` are only ever
/// appended: this list grows at its end only.
#[test]
fn the_header_lays_out_the_structs_as_the_library() {
    use somalloc::{SomallocSegment, SomallocStats};
    let stats = offsets!(SomallocStats:
        pool_reserved_bytes, pool_reserved_peak_bytes, pool_used_bytes, pool_used_peak_bytes,
        live_allocations, live_bytes, live_peak_bytes, allocations, frees, failed_allocations,
        failed_frees, cache_enabled, cache_streams, cache_cached_bytes, cache_hits, cache_misses,
        cache_bypassed, cache_spilled, cache_released, cache_captured, plan_arena_bytes,
        plan_served, plan_refused, plan_diverted, plan_diverted_bytes, plan_waits,
        plan_wait_events, plan_waits_timed, plan_wait_stall_ns, plan_waits_passed, plan_status,
        arena_enabled, arena_mapped_bytes, arena_mapped_peak_bytes, arena_reserved_bytes,
        arena_largest_free_bytes, arena_fragmentation_ppm, arena_idle_bytes, arena_maps,
        arena_unmaps, arena_pool_allocations, arena_moves, arena_stream_waits, arena_vmm_ns,
        arena_lock_waits, arena_lock_wait_ns, arena_vmm_calls,
    );
    let segment = offsets!(SomallocSegment: address, bytes);
    for (i, (name, at)) in stats.iter().enumerate() {
        assert_eq!(
            *at,
            i * 8,
            "SomallocStats.{name}: every field is a u64, in this order"
        );
    }
    assert_eq!(
        std::mem::size_of::<SomallocStats>(),
        stats.len() * 8,
        "no field left out of the list"
    );
    assert_eq!(std::mem::size_of::<SomallocSegment>(), 16);
    let mut c = String::from("#include <stdio.h>\n#include \"somalloc.h\"\nint main(void) {\n");
    for (ty, fields) in [("SomallocStats", &stats[..]), ("SomallocSegment", &segment[..])] {
        c += &format!("  printf(\"{ty} %zu\\n\", sizeof({ty}));\n");
        for (name, _) in fields {
            c += &format!("  printf(\"{ty}.{name} %zu\\n\", offsetof({ty}, {name}));\n");
        }
    }
    c += "  return 0;\n}\n";
    let out = std::env::temp_dir().join(format!("somalloc-capi-layout-{}", std::process::id()));
    std::fs::create_dir_all(&out).unwrap();
    let source = out.join("layout.c");
    std::fs::write(&source, c).unwrap();
    let exe = out.join("layout");
    build_c(source.to_str().unwrap(), &exe);
    let ran = Command::new(&exe).output().expect("the layout program runs");
    let _ = std::fs::remove_dir_all(&out);
    assert!(ran.status.success());
    let mut expected = format!("SomallocStats {}\n", std::mem::size_of::<SomallocStats>());
    for (name, at) in stats {
        expected += &format!("SomallocStats.{name} {at}\n");
    }
    expected += &format!("SomallocSegment {}\n", std::mem::size_of::<SomallocSegment>());
    for (name, at) in segment {
        expected += &format!("SomallocSegment.{name} {at}\n");
    }
    assert_eq!(String::from_utf8_lossy(&ran.stdout), expected);
}
