//! Build script of the C ABI: the SONAME of an installed `libsomalloc.so`.
//!
//! Cargo names the library `libsomalloc.so` whichever backend it is built
//! with. An installed copy is named per backend, so that the CUDA and the
//! ROCm builds can be installed side by side: `libsomalloc-cuda.so.0` and
//! `libsomalloc-rocm.so.0` (the major version of the crate last). With
//! `SOMALLOC_CAPI_SONAME=1` in the environment (`capi/install.sh` sets it)
//! the library is linked with that SONAME, which programs linked against
//! it then load. Without it (the default) the library has no SONAME, as a
//! build-tree library that programs link by its file name, and run with an
//! rpath to `target/`, must not have: they would look for a file that is not
//! there.

use std::env;

fn main() {
    println!("cargo::rerun-if-changed=build.rs");
    println!("cargo::rerun-if-env-changed=SOMALLOC_CAPI_SONAME");
    let versioned = match env::var("SOMALLOC_CAPI_SONAME").as_deref() {
        Err(_) | Ok("") | Ok("0") => false,
        Ok("1") => true,
        Ok(other) => {
            eprintln!("somalloc-capi: SOMALLOC_CAPI_SONAME is 1 (a versioned SONAME) or 0, not '{other}'");
            std::process::exit(1);
        }
    };
    if !versioned {
        return;
    }
    // The root crate's build script says when no backend or both are
    // selected; this one only names the library.
    let backend = if env::var_os("CARGO_FEATURE_ROCM").is_some() {
        "rocm"
    } else {
        "cuda"
    };
    let major = env::var("CARGO_PKG_VERSION_MAJOR").unwrap_or_else(|_| "0".into());
    println!("cargo::rustc-cdylib-link-arg=-Wl,-soname,libsomalloc-{backend}.so.{major}");
}
