//! Code generation for one header set: the checks decided from the source
//! text, and Rust code for the ones the compiler decides.

use std::fmt::Write as _;
use std::path::Path;

use quote::ToTokens;
use syn::Type;

use crate::hand::{parse_version, ApiFn, Eval, Expectation, Hand};
use crate::model::{compatible, is_opaque, show, Kind, Model, Scope};
use crate::Set;

// ---------------------------------------------------------------------------
// Code generation for one header set.

/// Collects the calls of the generated `run` function.
pub(crate) struct Emit {
    pub(crate) body: String,
}

impl Emit {
    pub(crate) fn pass(&mut self, what: &str) {
        let _ = writeln!(self.body, "    r.pass({what:?});");
    }
    pub(crate) fn fail(&mut self, what: &str, why: &str) {
        let _ = writeln!(self.body, "    r.fail({what:?}, {why:?});");
    }
    pub(crate) fn note(&mut self, what: &str) {
        let _ = writeln!(self.body, "    r.note({what:?});");
    }
    /// A comparison made when the program runs: `hand` and `header` are Rust
    /// expressions; `expected` replaces the hand value when an expectation
    /// says the header differs.
    pub(crate) fn compare(&mut self, what: &str, hand: &str, header: &str, expected: Option<&Expectation>) {
        let (hand, at) = match expected {
            Some(e) => (format!("{}i128", e.value), format!("Some({:?})", e.origin)),
            None => (format!("({hand}) as i128"), "None".to_string()),
        };
        let _ = writeln!(
            self.body,
            "    r.compare({what:?}, {hand}, ({header}) as i128, {at});"
        );
    }
    /// Like `compare`, for a storage struct: the hand value may be larger.
    pub(crate) fn at_least(&mut self, what: &str, hand: &str, header: &str, origin: &str) {
        let _ = writeln!(
            self.body,
            "    r.at_least({what:?}, ({hand}) as i128, ({header}) as i128, {origin:?});"
        );
    }
}

/// Rust code for `size_of::<ty>()`, with `ty` named in the scope of one side.
pub(crate) fn size_in(side: &str, ty: &Type) -> String {
    let ty = ty.to_token_stream();
    format!("{{ #[allow(unused_imports)] use {side}::*; ::core::mem::size_of::<{ty}>() }}")
}

/// The last path segment of a type (`sys::X` -> `X`).
pub(crate) fn type_name(ty: &Type) -> Option<String> {
    match ty {
        Type::Path(p) => Some(p.path.segments.last()?.ident.to_string()),
        _ => None,
    }
}

pub(crate) fn emit_set(module: &str, set: &Set, hand: &Hand, gen: &Model, gen_path: &Path) -> String {
    let v = set.vendor;
    let hand_scope = Scope { own: &hand.names };
    let gen_scope = Scope { own: gen };
    let sys = format!("crate::{}::sys", hand.module());
    let mut e = Emit { body: String::new() };
    let _ = writeln!(e.body, "    r.begin({:?}, {:?});", set.label(), set.dir);

    let eval = Eval::new(hand, set.runtime_version);

    // Every name an expectation mentions must exist on the hand side.
    let symbols: Vec<String> = hand
        .api
        .fns
        .iter()
        .flat_map(|f| eval.strings(&f.symbol))
        .collect();
    for n in hand.notes.iter().filter(|n| n.vendor == v.name) {
        let (item, field) = match n.name.split_once('.') {
            Some((i, f)) => (i, Some(f)),
            None => (n.name.as_str(), None),
        };
        let known = hand
            .sys
            .structs
            .get(item)
            .is_some_and(|f| field.is_none_or(|x| f.iter().any(|(n, _)| n == x)))
            || (field.is_none()
                && (hand.sys.aliases.contains_key(item)
                    || hand.sys.consts.contains_key(item)
                    || symbols.iter().any(|s| s == item)));
        if !known {
            e.fail(
                &format!("expectation for {}", n.name),
                &format!("({}) names nothing the hand-written files declare", n.origin),
            );
        }
    }

    // Absent on purpose: the header must not declare it either. Returns
    // whether the item is settled (absent, or a failure was reported).
    let absent = |e: &mut Emit, what: &str, name: &str, declared: bool| -> bool {
        match hand.expect(set, name, "absent") {
            Some(x) if declared => {
                e.fail(
                    what,
                    &format!("the header declares it, but it is marked absent ({})", x.origin),
                );
                true
            }
            Some(x) => {
                e.pass(&format!("{what}: absent, as marked ({})", x.origin));
                true
            }
            None if !declared => {
                e.fail(
                    what,
                    "not declared in the header (if that is right for this version, say so with a \
                     `header-check` line)",
                );
                true
            }
            None => false,
        }
    };

    // Structs: size, alignment, and every named field's kind, offset and size.
    for (name, fields) in &hand.sys.structs {
        let what = format!("struct {name}");
        let holds = hand.holds(set, name);
        // `is`: the same checks as for a struct of the header's name.
        let renamed = holds.or(hand.is(set, name));
        let header_name = renamed.map_or(name.as_str(), |h| h.target.as_str());
        let header = gen.structs.get(header_name);
        if renamed.is_none() && absent(&mut e, &what, name, header.is_some()) {
            continue;
        }
        let Some(header) = header else {
            e.fail(
                &what,
                &format!(
                    "{} {header_name}, which the header does not declare",
                    if holds.is_some() { "holds" } else { "is" }
                ),
            );
            continue;
        };
        if is_opaque(fields) {
            if is_opaque(header) {
                e.pass(&format!("{what}: opaque on both sides"));
            } else {
                e.note(&format!(
                    "{what}: opaque by hand, complete in the header (used behind pointers only)"
                ));
            }
            continue;
        }
        let h = format!("{sys}::{name}");
        let g = format!("gen::{header_name}");
        for p in ["size", "align"] {
            let (hv, gv) = (
                format!("::core::mem::{p}_of::<{h}>()"),
                format!("::core::mem::{p}_of::<{g}>()"),
            );
            match holds {
                Some(x) => e.at_least(
                    &format!("{name} {p} (room for {header_name})"),
                    &hv,
                    &gv,
                    &x.origin,
                ),
                None => e.compare(&format!("{name} {p}"), &hv, &gv, hand.expect(set, name, p)),
            }
        }
        for (field, hty) in fields.iter().filter(|(f, _)| !f.starts_with('_')) {
            let fname = format!("{name}.{field}");
            let gfield = header.iter().find(|(f, _)| f == field);
            if holds.is_some() && gfield.is_none() {
                e.note(&format!("{fname}: room beyond the fields of {header_name}"));
                continue;
            }
            if absent(&mut e, &fname, &fname, gfield.is_some()) {
                continue;
            }
            let (_, gty) = gfield.unwrap();
            let (hk, gk) = (hand_scope.kind(hty), gen_scope.kind(gty));
            if compatible(&hk, &gk) {
                e.pass(&format!("{fname}: {} for the header's {}", show(hty), show(gty)));
            } else {
                e.fail(
                    &fname,
                    &format!(
                        "hand {} ({}), header {} ({})",
                        show(hty),
                        hk.describe(),
                        show(gty),
                        gk.describe()
                    ),
                );
            }
            e.compare(
                &format!("{fname} offset"),
                &format!("::core::mem::offset_of!({h}, {field})"),
                &format!("::core::mem::offset_of!({g}, {field})"),
                hand.expect(set, &fname, "offset"),
            );
            e.compare(
                &format!("{fname} size"),
                &format!("crate::field_size(|s: &{h}| &s.{field})"),
                &format!("crate::field_size(|s: &{g}| &s.{field})"),
                hand.expect(set, &fname, "size"),
            );
        }
        let unnamed: Vec<&str> = header
            .iter()
            .map(|(f, _)| f.as_str())
            .filter(|f| !fields.iter().any(|(h, _)| h == f))
            .collect();
        if !unnamed.is_empty() && holds.is_none() {
            e.note(&format!(
                "{name}: header fields the hand-written struct does not name: {}",
                unnamed.join(", ")
            ));
        }
    }

    // Type aliases (handles, enums passed as integers, callbacks).
    for (name, hty) in &hand.sys.aliases {
        let what = format!("type {name}");
        let declared = gen.aliases.contains_key(name) || gen.structs.contains_key(name);
        if absent(&mut e, &what, name, declared) {
            continue;
        }
        let gty: Type = syn::parse_str(name).unwrap();
        let (hk, gk) = (hand_scope.kind(hty), gen_scope.kind(&gty));
        if hk == Kind::Opaque {
            e.note(&format!(
                "{what}: opaque by hand, {} in the header (used behind pointers only)",
                gk.describe()
            ));
            continue;
        }
        if compatible(&hk, &gk) {
            e.pass(&format!("{what}: {}", hk.describe()));
        } else {
            e.fail(
                &what,
                &format!("hand {}, header {}", hk.describe(), gk.describe()),
            );
        }
        // A function pointer (a driver entry point's `PFN_` type): its
        // parameters and return, as for a loaded function.
        if let (Some((params, ret)), Some((gparams, gret))) =
            (fn_sig(hty), gen.aliases.get(name).and_then(fn_sig))
        {
            let f = ApiFn {
                name: name.clone(),
                origin: format!("{}/sys.rs", v.dir),
                symbol: syn::parse_quote!(""),
                since: None,
                cond: None,
                params,
                ret,
            };
            let decl = format!("declared as `{name}` in {}", f.origin);
            check_fn(
                &mut e,
                &format!("{what} (function pointer)"),
                &decl,
                &f,
                &gparams,
                &gret,
                v.driver_error_type,
                hand,
                set,
                &hand_scope,
                &gen_scope,
            );
        }
        e.compare(
            &format!("{name} size"),
            &format!("::core::mem::size_of::<{sys}::{name}>()"),
            &format!("::core::mem::size_of::<gen::{name}>()"),
            hand.expect(set, name, "size"),
        );
    }

    // Constants: values (enum values and #defines alike).
    for (name, (hty, _)) in &hand.sys.consts {
        let what = format!("const {name}");
        if hand_scope.kind(hty) != Kind::Int {
            e.note(&format!("{what}: not an integer, not compared"));
            continue;
        }
        if absent(&mut e, &what, name, gen.consts.contains_key(name)) {
            continue;
        }
        let _ = writeln!(
            e.body,
            "    r.value({what:?}, {sys}::{name} as i128, ::core::mem::size_of_val(&{sys}::{name}), gen::{name} as i128, {});",
            match hand.expect(set, name, "value") {
                Some(x) => format!("Some(({}i128, {:?}))", x.value, x.origin),
                None => "None".to_string(),
            }
        );
    }

    // Functions of the runtime_api! block (after `shared_runtime_api!` is
    // expanded with the vendor's prefix and types): one check per function.
    // The symbol is the one a runtime of this header's version loads; the
    // kinds (pointer, integer, float, struct) are compared here; the sizes of
    // each parameter, of what a pointer parameter points to, and of the
    // return are compared when the program runs.
    const EVAL: &str = "see `Eval` in build/hand.rs for what the checker evaluates";
    for f in &hand.api.fns {
        // Where a failure is to be fixed.
        let decl = format!("declared as `{}` in {}", f.name, f.origin);
        let Some(sym) = eval.string(&f.symbol) else {
            e.fail(
                &format!("fn {}", f.name),
                &format!(
                    "cannot evaluate the symbol `{}` for this version ({EVAL}; {decl})",
                    show_expr(&f.symbol)
                ),
            );
            continue;
        };
        // `if COND` false: a runtime of this version does not load it.
        let unloaded = match &f.cond {
            None => None,
            Some(cond) => match eval.bool(cond) {
                Some(true) => None,
                Some(false) => Some(show_expr(cond)),
                None => {
                    e.fail(
                        &format!("fn {sym}"),
                        &format!(
                            "cannot evaluate `if {}` for this version ({EVAL}; {decl})",
                            show_expr(cond)
                        ),
                    );
                    continue;
                }
            },
        };
        // `since` later than this header: older runtimes lack it.
        let newer = match &f.since {
            None => None,
            Some(expr) => match eval.string(expr).map(|s| (optional_older(set, &s), s)) {
                Some((Some(older), text)) => older.then_some(text),
                _ => {
                    e.fail(
                        &format!("fn {sym}"),
                        &format!(
                            "cannot read `since {}`: want \"{} X.Y\", or a constant of sys.rs holding one ({decl})",
                            show_expr(expr),
                            v.since_names.join("|")
                        ),
                    );
                    continue;
                }
            },
        };
        let what = match &unloaded {
            Some(c) => format!("fn {sym} (not loaded from a runtime of this version: `if {c}` is false)"),
            None => format!("fn {sym}"),
        };
        let marked_absent = hand.expect(set, &sym, "absent");
        let Some((gparams, gret)) = gen.fns.get(&sym) else {
            // Marked absent, or allowed to be: optional and newer than this
            // header, or not loaded by a runtime of this version.
            let mut why: Vec<String> = marked_absent
                .iter()
                .map(|x| format!("as marked ({})", x.origin))
                .collect();
            if let Some(s) = &newer {
                why.push(format!("optional since {s}"));
            }
            if let Some(c) = &unloaded {
                why.push(format!(
                    "a runtime of this version does not load it: `if {c}` is false"
                ));
            }
            if why.is_empty() {
                e.fail(
                    &what,
                    &format!(
                        "not declared in the header (if that is right for this version, make it optional \
                         with a `since` or an `if`, or say so with a `header-check` line; {decl})"
                    ),
                );
            } else {
                e.pass(&format!("fn {sym}: absent ({})", why.join("; ")));
            }
            continue;
        };
        // Declared: checked, whether or not a runtime of this version loads
        // it (a header that declares a function the library may load from a
        // newer runtime declares it with the signature the library expects).
        if let Some(x) = marked_absent {
            e.fail(
                &what,
                &format!("the header declares it, but it is marked absent ({})", x.origin),
            );
            continue;
        }
        check_fn(
            &mut e,
            &what,
            &decl,
            f,
            gparams,
            gret,
            v.error_type,
            hand,
            set,
            &hand_scope,
            &gen_scope,
        );
    }

    let hand_mod = hand.module();
    let gen_file = gen_path.display().to_string();
    let body = e.body;
    let local = &hand.local_src;
    format!(
        r#"
#[allow(dead_code, unused_imports, non_camel_case_types, non_snake_case, non_upper_case_globals, improper_ctypes, clippy::all)]
pub mod {module} {{
    pub mod gen {{
        include!({gen_file:?});
    }}
    /// The scope hand-written types are named in: `sys::X`, `std::ffi`
    /// names, and the `#[repr(C)]` structs of `mod.rs`.
    pub mod hand {{
        pub use ::std::ffi::*;
        pub use crate::{hand_mod}::sys;
        pub use crate::{hand_mod}::sys::*;
        {local}
    }}
    pub fn run(r: &mut crate::Report) {{
{body}    }}
}}
"#
    )
}

/// For an optional function: whether this header is older than the version
/// that `since` names (so the function may be missing from it).
pub(crate) fn optional_older(set: &Set, since: &str) -> Option<bool> {
    let (name, ver) = since.split_once(' ')?;
    if !set
        .vendor
        .since_names
        .iter()
        .any(|n| n.eq_ignore_ascii_case(name))
    {
        return None;
    }
    Some(set.cmp_version(&parse_version(ver)?).is_lt())
}

#[allow(clippy::too_many_arguments)]
pub(crate) fn check_fn(
    e: &mut Emit,
    what: &str,
    decl: &str,
    f: &ApiFn,
    gparams: &[Type],
    gret: &Type,
    error_type: &str,
    hand: &Hand,
    set: &Set,
    hand_scope: &Scope,
    gen_scope: &Scope,
) {
    if gparams.len() != f.params.len() {
        e.fail(
            what,
            &format!(
                "{} parameters by hand, {} in the header ({decl})",
                f.params.len(),
                gparams.len()
            ),
        );
        return;
    }
    let mut problems = Vec::new();
    // (label, hand size expr, header size expr, `holds` origin for at-least)
    let mut sizes: Vec<(String, String, String, Option<String>)> = Vec::new();
    for (i, (hty, gty)) in f.params.iter().zip(gparams).enumerate() {
        let (hk, gk) = (hand_scope.kind(hty), gen_scope.kind(gty));
        let label = format!("parameter {}", i + 1);
        if !compatible(&hk, &gk) {
            problems.push(format!(
                "{label}: hand {} ({}), header {} ({})",
                show(hty),
                hk.describe(),
                show(gty),
                gk.describe()
            ));
            continue;
        }
        sizes.push((label.clone(), size_in("hand", hty), size_in("gen", gty), None));
        // One level behind a pointer: the size of what it points to.
        if let (Kind::Ptr(hp), Kind::Ptr(gp), Type::Ptr(hptr), Type::Ptr(gptr)) = (&hk, &gk, hty, gty) {
            if hp.sized() && gp.sized() {
                let holds = type_name(&hptr.elem).and_then(|n| hand.holds(set, &n));
                if let Some(h) = holds {
                    let gname = type_name(&gptr.elem).unwrap_or_default();
                    if h.target != gname && gen_scope.kind(&gptr.elem) != Kind::Aggregate(h.target.clone()) {
                        problems.push(format!(
                            "{label}: points to {} in the header, but the hand-written type holds {}",
                            show(&gptr.elem),
                            h.target
                        ));
                        continue;
                    }
                }
                sizes.push((
                    format!("{label} pointee"),
                    size_in("hand", &hptr.elem),
                    size_in("gen", &gptr.elem),
                    holds.map(|h| h.origin.clone()),
                ));
            }
        }
    }
    // The return: the error code as i32, or a value of the same kind.
    let hret = show(&f.ret);
    let ret = if hret == "i32" {
        if type_name(gret).as_deref() != Some(error_type) {
            problems.push(format!(
                "declared `-> i32` (the error code), header returns {}",
                show(gret)
            ));
        }
        format!("{error_type} as i32")
    } else {
        let (hk, gk) = (hand_scope.kind(&f.ret), gen_scope.kind(gret));
        if compatible(&hk, &gk) {
            sizes.push((
                "return".to_string(),
                size_in("hand", &f.ret),
                size_in("gen", gret),
                None,
            ));
        } else {
            problems.push(format!("returns {hret} by hand, {} in the header", show(gret)));
        }
        hret.clone()
    };
    if !problems.is_empty() {
        e.fail(what, &format!("{} ({decl})", problems.join("; ")));
        return;
    }
    let params: Vec<String> = f.params.iter().map(show).collect();
    let summary = format!("{what}({}) -> {ret}", params.join(", "));
    let _ = writeln!(e.body, "    r.sizes({summary:?}, {decl:?}, &[");
    for (label, h, g, holds) in sizes {
        let _ = writeln!(e.body, "        ({label:?}, {h}, {g}, {holds:?}),");
    }
    let _ = writeln!(e.body, "    ]);");
}

/// The parameter and return types of a function-pointer type: a bare
/// `extern "C" fn`, or one in an `Option` (as bindgen writes C function
/// pointers, which may be null).
pub(crate) fn fn_sig(ty: &Type) -> Option<(Vec<Type>, Type)> {
    let bare = match ty {
        Type::BareFn(f) => f,
        Type::Path(p) => {
            let last = p.path.segments.last()?;
            if last.ident != "Option" {
                return None;
            }
            let syn::PathArguments::AngleBracketed(args) = &last.arguments else {
                return None;
            };
            match args.args.first()? {
                syn::GenericArgument::Type(Type::BareFn(f)) => f,
                _ => return None,
            }
        }
        _ => return None,
    };
    let params = bare.inputs.iter().map(|a| a.ty.clone()).collect();
    let ret = match &bare.output {
        syn::ReturnType::Default => syn::parse_quote!(()),
        syn::ReturnType::Type(_, t) => (**t).clone(),
    };
    Some((params, ret))
}

/// An expression as a reader writes it (`f(a, b)`, not `f (a , b)`).
pub(crate) fn show_expr(e: &syn::Expr) -> String {
    show(e)
        .replace(" , ", ", ")
        .replace(" (", "(")
        .replace(" . ", ".")
        .replace("! ", "!")
}
