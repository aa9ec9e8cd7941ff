//! Generates the check program.
//!
//! For every header set named in `SOMALLOC_BINDGEN_SETS` (`vendor:include-dir`
//! pairs separated by `;`, e.g. `hip:/usr/include;cuda:/opt/cuda-12.8/include`)
//! this runs bindgen on the vendor's runtime header, then reads both sides with
//! syn: the generated bindings, and the hand-written ones of
//! `backends/<vendor>/` (`sys.rs`, and the `runtime_api!` block of `mod.rs`,
//! which `shared_runtime_api!` of `backends/shared.rs` writes: the checker
//! expands it, `build/expand.rs`).
//! What the source text decides (is a name declared, do the parameter counts
//! and kinds agree, which symbol a runtime of the header's version loads) is
//! decided here; what needs the compiler (sizes, alignments, offsets, constant
//! values) becomes code in `$OUT_DIR/checks.rs`, which `src/main.rs` includes
//! and runs. The rules, and the `header-check` lines that state per-version
//! expectations, are described in `ci/bindgen/README.md`.

#[path = "build/emit.rs"]
mod emit;
#[path = "build/expand.rs"]
mod expand;
#[path = "build/hand.rs"]
mod hand;
#[path = "build/model.rs"]
mod model;

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use quote::ToTokens;
use syn::Item;

use crate::hand::Hand;
use crate::model::Model;

fn main() {
    println!("cargo:rerun-if-env-changed=SOMALLOC_BINDGEN_SETS");
    println!("cargo:rerun-if-env-changed=SOMALLOC_BINDGEN_BACKENDS");
    let manifest = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").unwrap());
    let backends = match std::env::var("SOMALLOC_BINDGEN_BACKENDS") {
        Ok(dir) if !dir.is_empty() => PathBuf::from(dir),
        _ => manifest.join("../../backends"),
    };
    let backends = backends
        .canonicalize()
        .unwrap_or_else(|e| panic!("backends directory {}: {e}", backends.display()));
    let out = PathBuf::from(std::env::var("OUT_DIR").unwrap());
    let sets = std::env::var("SOMALLOC_BINDGEN_SETS").unwrap_or_default();

    let mut code = String::new();
    let mut runs = Vec::new();
    let mut hands = BTreeMap::new();
    for (i, spec) in sets.split(';').filter(|s| !s.trim().is_empty()).enumerate() {
        let (vendor, dir) = spec
            .split_once(':')
            .unwrap_or_else(|| panic!("bad header set {spec:?}: want vendor:include-dir"));
        let vendor = Vendor::from_name(vendor.trim());
        let hand = hands
            .entry(vendor.name)
            .or_insert_with(|| Hand::read(vendor, &backends.join(vendor.dir)));
        // The entry-point types `sys.rs` declares (`PFN_...`), which bindgen
        // keeps besides the vendor's allowlist.
        let entry_points: Vec<String> = hand
            .sys
            .aliases
            .keys()
            .filter(|n| n.starts_with("PFN_"))
            .cloned()
            .collect();
        let mut gen_file = syn::parse_file(&generate(vendor, Path::new(dir.trim()), &entry_points))
            .expect("bindgen output parses");
        let members = name_anonymous_members(&mut gen_file);
        let mut gen = Model::from_items(&gen_file.items, &expand::Macros::new());
        for (name, anonymous) in members {
            if let Some(fields) = gen.structs.get(&anonymous).cloned() {
                gen.structs.insert(name, fields);
            }
        }
        // The program compares types, constants and layouts; it never calls
        // a function, so the extern blocks are not compiled.
        gen_file.items.retain(|i| !matches!(i, Item::ForeignMod(_)));
        let gen_path = out.join(format!("gen_{i}.rs"));
        std::fs::write(&gen_path, gen_file.to_token_stream().to_string()).unwrap();
        let set = Set::new(vendor, dir.trim(), &gen);
        let module = format!("set_{i}");
        code += &emit::emit_set(&module, &set, hand, &gen, &gen_path);
        runs.push(module);
    }
    // The macros `sys.rs` imports from `crate::common`, at the same path.
    let mut common = BTreeMap::new();
    for hand in hands.values() {
        for f in &hand.files {
            println!("cargo:rerun-if-changed={}", f.display());
        }
        code += &hand.emit_module();
        common.extend(hand.common_macros.clone());
    }
    code += "#[allow(unused_macros, unused_imports)]\npub mod common {\n";
    for (name, src) in &common {
        let _ = writeln!(code, "    {src}\n    pub(crate) use {name};");
    }
    code += "}\n";
    code += "#[allow(unused_variables)]\npub fn run_all(r: &mut crate::Report) {\n";
    for m in &runs {
        let _ = writeln!(code, "    {m}::run(r);");
    }
    code += "}\n";
    std::fs::write(out.join("checks.rs"), code).unwrap();
}

/// Gives the anonymous struct (or union) types of struct fields a name the
/// hand-written side can use: `STRUCT_FIELD`. bindgen names the type of
/// `allocFlags` in `struct CUmemAllocationProp_st { ...; struct { ... }
/// allocFlags; }` `CUmemAllocationProp_st__bindgen_ty_1`, a number that
/// depends on the order of declarations; the checker adds `pub type
/// CUmemAllocationProp_st_allocFlags = CUmemAllocationProp_st__bindgen_ty_1;`
/// to the generated bindings. Returns (new name, bindgen's name) pairs.
fn name_anonymous_members(file: &mut syn::File) -> Vec<(String, String)> {
    let mut names = Vec::new();
    for item in &file.items {
        let (owner, fields) = match item {
            Item::Struct(s) => (&s.ident, model::named_fields(&s.fields)),
            Item::Union(u) => (
                &u.ident,
                u.fields
                    .named
                    .iter()
                    .map(|f| (f.ident.as_ref().unwrap().to_string(), f.ty.clone()))
                    .collect(),
            ),
            _ => continue,
        };
        for (field, ty) in fields {
            if let Some(anonymous) = emit::type_name(&ty).filter(|n| n.contains("__bindgen_ty_")) {
                names.push((format!("{owner}_{}", field.trim_end_matches('_')), anonymous));
            }
        }
    }
    for (name, anonymous) in &names {
        let (name, anonymous) = (
            proc_macro2::Ident::new(name, proc_macro2::Span::call_site()),
            proc_macro2::Ident::new(anonymous, proc_macro2::Span::call_site()),
        );
        file.items.push(syn::parse_quote!(pub type #name = #anonymous;));
    }
    names
}

// ---------------------------------------------------------------------------
// Vendors and header sets.

#[derive(Clone, Copy)]
pub(crate) struct Vendor {
    pub(crate) name: &'static str,
    /// Directory under `backends/`.
    pub(crate) dir: &'static str,
    /// The header bindgen reads.
    pub(crate) header: &'static str,
    /// Headers read besides it, for the driver entry points the backend
    /// takes through the runtime (their `PFN_` types).
    pub(crate) extra_headers: &'static [&'static str],
    /// What an entry point of `extra_headers` declared `-> i32` returns.
    pub(crate) driver_error_type: &'static str,
    pub(crate) clang_args: &'static [&'static str],
    /// The runtime's error type: what a function declared `-> i32` returns.
    pub(crate) error_type: &'static str,
    /// Names bindgen keeps (everything else in the system headers is dropped).
    pub(crate) allow: &'static str,
    /// Words a `since "..."` of an optional function may start with.
    pub(crate) since_names: &'static [&'static str],
}

impl Vendor {
    pub(crate) fn from_name(name: &str) -> Vendor {
        match name {
            "hip" => Vendor {
                name: "hip",
                dir: "rocm",
                header: "hip/hip_runtime_api.h",
                extra_headers: &[],
                driver_error_type: "hipError_t",
                clang_args: &["-D__HIP_PLATFORM_AMD__"],
                error_type: "hipError_t",
                allow: "^(hip|HIP|ihip).*",
                since_names: &["ROCm", "HIP"],
            },
            "cuda" => Vendor {
                name: "cuda",
                dir: "cuda",
                header: "cuda_runtime_api.h",
                // cuda.h and the entry points' types.
                extra_headers: &["cudaTypedefs.h"],
                driver_error_type: "CUresult",
                clang_args: &[],
                error_type: "cudaError_t",
                allow: "^(cuda|CUDA|CU|dim3).*",
                since_names: &["CUDA"],
            },
            other => panic!("unknown vendor {other:?} (hip or cuda)"),
        }
    }
}

pub(crate) struct Set {
    pub(crate) vendor: Vendor,
    /// The header's own version: (major, minor) for CUDA, (major, minor,
    /// patch) for HIP.
    pub(crate) version: Vec<u64>,
    /// The number a runtime of this version reports (`cudaRuntimeGetVersion`,
    /// `hipRuntimeGetVersion`): what `runtime_api!` conditions compare.
    pub(crate) runtime_version: i128,
    pub(crate) dir: String,
}

impl Set {
    pub(crate) fn new(vendor: Vendor, dir: &str, gen: &Model) -> Set {
        let num = |name: &str| {
            gen.const_value(name)
                .unwrap_or_else(|| panic!("{name} is not in the {} header", vendor.name))
        };
        let (version, runtime_version) = if vendor.name == "hip" {
            let v = [
                num("HIP_VERSION_MAJOR"),
                num("HIP_VERSION_MINOR"),
                num("HIP_VERSION_PATCH"),
            ];
            (
                v.iter().map(|&n| n as u64).collect(),
                v[0] * 10_000_000 + v[1] * 100_000 + v[2],
            )
        } else {
            let v = num("CUDART_VERSION");
            (vec![(v / 1000) as u64, (v % 1000 / 10) as u64], v)
        };
        Set {
            vendor,
            version,
            runtime_version,
            dir: dir.to_string(),
        }
    }

    pub(crate) fn label(&self) -> String {
        let v: Vec<String> = self.version.iter().map(|n| n.to_string()).collect();
        format!("{} {}", self.vendor.name, v.join("."))
    }

    /// `self.version` compared with `other`, missing parts counting as 0.
    pub(crate) fn cmp_version(&self, other: &[u64]) -> std::cmp::Ordering {
        let have: Vec<u64> = (0..other.len())
            .map(|i| self.version.get(i).copied().unwrap_or(0))
            .collect();
        have.as_slice().cmp(other)
    }
}

pub(crate) fn generate(vendor: Vendor, include: &Path, entry_points: &[String]) -> String {
    let mut wrapper = String::new();
    for h in std::iter::once(&vendor.header).chain(vendor.extra_headers) {
        let header = include.join(h);
        assert!(header.exists(), "{} does not exist", header.display());
        println!("cargo:rerun-if-changed={}", header.display());
        wrapper += &format!("#include <{h}>\n");
    }
    let mut b = bindgen::Builder::default()
        .header_contents("wrapper.h", &wrapper)
        .clang_arg(format!("-I{}", include.display()))
        .clang_args(vendor.clang_args)
        .allowlist_item(vendor.allow);
    for name in entry_points {
        b = b.allowlist_item(format!("^{name}$"));
    }
    b
        // Every C enum becomes an integer type alias plus one constant per
        // value, under the value's own C name: the same shape as the
        // hand-written constants.
        .default_enum_style(bindgen::EnumVariation::Consts)
        .prepend_enum_name(false)
        .layout_tests(false)
        .generate_comments(false)
        .derive_debug(false)
        .formatter(bindgen::Formatter::None)
        .generate()
        .unwrap_or_else(|e| panic!("bindgen on {}: {e}", include.join(vendor.header).display()))
        .to_string()
}
