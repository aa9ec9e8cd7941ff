//! Build script: checks that exactly one backend is selected and, with the
//! `kernels` feature, compiles kernels/ with the vendor compiler and embeds the
//! result.
//!
//! `kernels` is for somalloc's own tests, examples and benchmarks (unstable,
//! off by default): only then is nvcc or hipcc needed. Cargo unifies
//! features across a dependency graph, so a crate that turned it on would
//! make every build of the graph need the compiler; when none is found, the
//! error says so and how to find that crate.

use std::env;
use std::path::{Path, PathBuf};
use std::process::{exit, Command};

/// `cuda`, and the former CUDA-version features, which are now aliases of
/// it (each enables `cuda`; kept for one release so existing users build).
const CUDA_FEATURES: &[&str] = &[
    "CUDA",
    "CUDA_12060",
    "CUDA_12080",
    "CUDA_12090",
    "CUDA_13010",
    "CUDA_13020",
];

const KERNEL_SOURCE: &str = "kernels/somalloc_kernels.cu";
const DEFAULT_CUDA_ARCHS: &str = "sm_80,sm_90,compute_90";
const DEFAULT_HIP_ARCHS: &str = "gfx90a,gfx1030";

fn feature(name: &str) -> bool {
    env::var_os(format!("CARGO_FEATURE_{name}")).is_some()
}

/// What a missing kernel compiler error adds: the feature is not for users.
const KERNELS_ARE_INTERNAL: &[&str] = &[
    "somalloc: (`kernels` builds the test kernels of somalloc's own tests, examples and",
    "somalloc: benchmarks; it is unstable and no library or application needs it. If another",
    "somalloc: crate turned it on, `cargo tree -e features -i somalloc` shows which.)",
];

fn fail(lines: &[&str]) -> ! {
    for line in lines {
        eprintln!("{line}");
    }
    exit(1);
}

fn main() {
    println!("cargo::rustc-check-cfg=cfg(somalloc_cuda)");
    println!("cargo::rustc-check-cfg=cfg(somalloc_rocm)");
    println!("cargo::rustc-check-cfg=cfg(somalloc_kernels)");
    // The model-checked tests (`RUSTFLAGS="--cfg loom"`, ci/loom.sh).
    println!("cargo::rustc-check-cfg=cfg(loom)");
    println!("cargo::rerun-if-changed=build.rs");

    // Any of the CUDA features selects the one CUDA backend.
    let cuda: Vec<&str> = CUDA_FEATURES.iter().copied().filter(|f| feature(f)).collect();
    let rocm = feature("ROCM");
    let picked = usize::from(!cuda.is_empty()) + usize::from(rocm);
    if picked != 1 {
        let what = if picked == 0 {
            "no backend is selected".to_string()
        } else {
            let mut names: Vec<String> = cuda.iter().map(|f| f.to_lowercase().replace('_', "-")).collect();
            if rocm {
                names.push("rocm".into());
            }
            format!("more than one backend is selected ({})", names.join(", "))
        };
        fail(&[
            &format!("somalloc: {what}."),
            "somalloc: enable exactly one backend feature: `cuda` (NVIDIA) or `rocm` (AMD),",
            "somalloc: e.g. `cargo build --features cuda` or `cargo build --features rocm`.",
            "somalloc: (`cuda-12060`, `cuda-12080`, ... are deprecated aliases of `cuda`.)",
        ]);
    }
    let backend = if rocm { "rocm" } else { "cuda" };
    println!("cargo::rustc-cfg=somalloc_{backend}");

    if feature("KERNELS") {
        println!("cargo::rustc-cfg=somalloc_kernels");
        println!("cargo::rerun-if-changed={KERNEL_SOURCE}");
        let out = PathBuf::from(env::var_os("OUT_DIR").unwrap_or_default()).join("somalloc_kernels.bin");
        // The rocm backend normally takes AMD code objects from hipcc. For the
        // HIP-on-NVIDIA test fixture it takes an NVIDIA fatbin instead.
        println!("cargo::rerun-if-env-changed=SOMALLOC_HIP_KERNELS");
        let hip_kernels_by_nvcc = rocm && env::var("SOMALLOC_HIP_KERNELS").as_deref() == Ok("nvcc");
        if rocm && !hip_kernels_by_nvcc {
            build_hip(&out);
        } else {
            build_cuda(&out);
        }
    }
}

/// Finds a compiler: an explicit variable, then PATH, then the usual homes.
fn find_tool(tool: &str, explicit_var: &str, home_vars: &[&str], fallbacks: &[&str]) -> Option<PathBuf> {
    println!("cargo::rerun-if-env-changed={explicit_var}");
    println!("cargo::rerun-if-env-changed=PATH");
    if let Some(p) = env::var_os(explicit_var) {
        return Some(PathBuf::from(p));
    }
    if let Some(paths) = env::var_os("PATH") {
        for dir in env::split_paths(&paths) {
            let candidate = dir.join(tool);
            if candidate.is_file() {
                return Some(candidate);
            }
        }
    }
    for var in home_vars {
        println!("cargo::rerun-if-env-changed={var}");
        if let Some(home) = env::var_os(var) {
            let candidate = Path::new(&home).join("bin").join(tool);
            if candidate.is_file() {
                return Some(candidate);
            }
        }
    }
    fallbacks.iter().map(PathBuf::from).find(|p| p.is_file())
}

fn run(mut cmd: Command, what: &str) {
    eprintln!("somalloc: running {cmd:?}");
    match cmd.status() {
        Ok(s) if s.success() => {}
        Ok(s) => fail(&[&format!(
            "somalloc: {what} failed ({s}); the command is printed above."
        )]),
        Err(e) => fail(&[&format!("somalloc: could not start {what}: {e}")]),
    }
}

fn arch_list(var: &str, default: &str) -> Vec<String> {
    println!("cargo::rerun-if-env-changed={var}");
    let list = env::var(var).unwrap_or_else(|_| default.to_string());
    let archs: Vec<String> = list
        .split(',')
        .map(|a| a.trim().to_string())
        .filter(|a| !a.is_empty())
        .collect();
    if archs.is_empty() {
        fail(&[&format!(
            "somalloc: {var} is set but names no architecture (e.g. {default})."
        )]);
    }
    archs
}

fn build_cuda(out: &Path) {
    let Some(nvcc) = find_tool(
        "nvcc",
        "SOMALLOC_NVCC",
        &["CUDA_HOME", "CUDA_PATH"],
        &["/usr/local/cuda/bin/nvcc"],
    )
    .or_else(setup_nvcc) else {
        fail(&[
            "somalloc: the `kernels` feature needs nvcc, and none was found",
            "somalloc: (looked at $SOMALLOC_NVCC, PATH, $CUDA_HOME/bin, $CUDA_PATH/bin, /usr/local/cuda/bin).",
            "somalloc: install it without a GPU or a CUDA install from PyPI, e.g.",
            "somalloc:   python3 -m venv .venv-cuda && .venv-cuda/bin/pip install \"nvidia-cuda-nvcc==13.0.*\" \"nvidia-nvvm==13.0.*\" \\",
            "somalloc:     \"nvidia-cuda-crt==13.0.*\" \"nvidia-cuda-runtime==13.0.*\" \"nvidia-cuda-cccl==13.0.*\"",
            "somalloc: then set SOMALLOC_NVCC=.venv-cuda/lib/python3.*/site-packages/nvidia/cu13/bin/nvcc",
            "somalloc: (or `source ci/setup.sh cuda`, which installs it where this build looks by itself).",
            KERNELS_ARE_INTERNAL[0],
            KERNELS_ARE_INTERNAL[1],
            KERNELS_ARE_INTERNAL[2],
        ]);
    };
    let mut cmd = Command::new(&nvcc);
    cmd.arg("--fatbin").arg("-O3");
    for arch in arch_list("SOMALLOC_CUDA_ARCHS", DEFAULT_CUDA_ARCHS) {
        // sm_XY: machine code for that GPU; compute_XY: PTX that later GPUs JIT.
        let (kind, num) = match arch.split_once('_') {
            Some((k, n)) if (k == "sm" || k == "compute") && !n.is_empty() => (k.to_string(), n.to_string()),
            _ => fail(&[&format!(
                "somalloc: SOMALLOC_CUDA_ARCHS entry `{arch}` is neither sm_XY nor compute_XY."
            )]),
        };
        cmd.arg(format!("-gencode=arch=compute_{num},code={kind}_{num}"));
    }
    cmd.arg("-o").arg(out).arg(KERNEL_SOURCE);
    run(cmd, "nvcc");
}

/// The nvcc that `ci/setup.sh cuda` installs from PyPI, if it is there.
fn setup_nvcc() -> Option<PathBuf> {
    println!("cargo::rerun-if-env-changed=SOMALLOC_TOOLS");
    let tools = env::var_os("SOMALLOC_TOOLS")
        .map(PathBuf::from)
        .or_else(|| env::var_os("HOME").map(|h| Path::new(&h).join(".cache/somalloc")))?;
    let lib = tools.join("venv-cuda13/lib");
    std::fs::read_dir(&lib)
        .ok()?
        .filter_map(|e| e.ok())
        .map(|e| e.path().join("site-packages/nvidia/cu13/bin/nvcc"))
        .find(|p| p.is_file())
}

fn build_hip(out: &Path) {
    let Some(hipcc) = find_tool(
        "hipcc",
        "SOMALLOC_HIPCC",
        &["ROCM_PATH", "HIP_PATH"],
        &["/opt/rocm/bin/hipcc", "/usr/bin/hipcc"],
    ) else {
        fail(&[
            "somalloc: the `kernels` feature with `rocm` needs hipcc, and none was found",
            "somalloc: (looked at $SOMALLOC_HIPCC, PATH, $ROCM_PATH/bin, $HIP_PATH/bin, /opt/rocm/bin).",
            "somalloc: on Debian or Ubuntu: `apt-get install hipcc libamdhip64-dev`",
            "somalloc: (or `source ci/setup.sh rocm`).",
            KERNELS_ARE_INTERNAL[0],
            KERNELS_ARE_INTERNAL[1],
            KERNELS_ARE_INTERNAL[2],
        ]);
    };
    let mut cmd = Command::new(&hipcc);
    cmd.arg("--genco").arg("-O3");
    // Without an explicit list hipcc quietly builds for one old target.
    for arch in arch_list("SOMALLOC_HIP_ARCHS", DEFAULT_HIP_ARCHS) {
        cmd.arg(format!("--offload-arch={arch}"));
    }
    cmd.arg("-o").arg(out).arg(KERNEL_SOURCE);
    run(cmd, "hipcc");
}
