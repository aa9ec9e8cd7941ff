//! The hand-written side of one vendor: `sys.rs`, the `runtime_api!` block
//! of `mod.rs` (written directly, or through a macro of `backends/*.rs` such
//! as `shared_runtime_api!`, which is expanded with the vendor's arguments),
//! the `header-check` lines, and the evaluation of the symbols, `since` texts
//! and conditions of the declarations for one header version.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use proc_macro2::Ident;
use quote::ToTokens;
use syn::parse::{Parse, ParseStream};
use syn::punctuated::Punctuated;
use syn::{BinOp, Expr, Item, Token, Type};

use crate::expand::{self, Macros};
use crate::model::Model;
use crate::{Set, Vendor};

// ---------------------------------------------------------------------------
// The hand-written side of one vendor.

pub(crate) struct Hand {
    pub(crate) vendor: Vendor,
    /// `sys.rs`, when the backend has one.
    pub(crate) sys_path: Option<PathBuf>,
    pub(crate) sys: Model,
    /// The `#[repr(C)]` structs declared in `mod.rs` itself, as source: they
    /// can be named in the `runtime_api!` block, but have no header name.
    pub(crate) local_src: String,
    /// `sys.rs` and the structs of `mod.rs`: where hand-written type names
    /// resolve.
    pub(crate) names: Model,
    /// Constants of `mod.rs` and `sys.rs`, for `runtime_api!` conditions.
    pub(crate) consts: BTreeMap<String, Expr>,
    /// The functions of `mod.rs`, which conditions may call
    /// (`rocm_at_least(version, ...)`).
    pub(crate) fns: BTreeMap<String, syn::ItemFn>,
    pub(crate) api: ApiBlock,
    /// The macros `sys.rs` imports from `crate::common` (`opaque!`), as
    /// source: the checker compiles `sys.rs` next to a `common` module that
    /// holds them.
    pub(crate) common_macros: BTreeMap<String, String>,
    pub(crate) notes: Vec<Expectation>,
    pub(crate) files: Vec<PathBuf>,
}

/// A `runtime_api!` block: `version: v;`, then the required (`fn`) and
/// optional (`optional(since ..., if ...) fn`) entries.
pub(crate) struct ApiBlock {
    /// The name the entries' conditions give the runtime's version.
    pub(crate) version: Option<String>,
    pub(crate) fns: Vec<ApiFn>,
}

/// One entry of a `runtime_api!` block.
pub(crate) struct ApiFn {
    /// The field name (`malloc_async`).
    pub(crate) name: String,
    /// Where it is declared (`backends/shared.rs`, `rocm/mod.rs`).
    pub(crate) origin: String,
    /// The symbol: a string, `concat!(...)` of strings, or an expression
    /// that picks one by version.
    pub(crate) symbol: Expr,
    /// `optional(since SINCE, if COND)`: the first release that has the
    /// function (a string, or a constant naming one), and the condition on
    /// the runtime's version under which it is loaded at all.
    pub(crate) since: Option<Expr>,
    pub(crate) cond: Option<Expr>,
    pub(crate) params: Vec<Type>,
    pub(crate) ret: Type,
}

impl Parse for ApiBlock {
    fn parse(input: ParseStream) -> syn::Result<Self> {
        let mut version = None;
        if input.peek(syn::Ident) && input.peek2(Token![:]) {
            let kw: Ident = input.parse()?;
            if kw != "version" {
                return Err(syn::Error::new(kw.span(), "expected `version: NAME;`"));
            }
            input.parse::<Token![:]>()?;
            version = Some(input.parse::<Ident>()?.to_string());
            input.parse::<Token![;]>()?;
        }
        let mut fns = Vec::new();
        while !input.is_empty() {
            let (mut since, mut cond) = (None, None);
            if !input.peek(Token![fn]) {
                let kw: Ident = input.parse()?;
                if kw != "optional" {
                    return Err(syn::Error::new(
                        kw.span(),
                        "expected `fn` or `optional(since ...)`",
                    ));
                }
                let content;
                syn::parenthesized!(content in input);
                let kw: Ident = content.parse()?;
                if kw != "since" {
                    return Err(syn::Error::new(kw.span(), "expected `since ...`"));
                }
                since = Some(content.parse::<Expr>()?);
                if content.peek(Token![,]) {
                    content.parse::<Token![,]>()?;
                    content.parse::<Token![if]>()?;
                    cond = Some(content.parse::<Expr>()?);
                }
                if !content.is_empty() {
                    return Err(content.error("expected `since SINCE` or `since SINCE, if COND`"));
                }
            }
            input.parse::<Token![fn]>()?;
            let name: Ident = input.parse()?;
            input.parse::<Token![=]>()?;
            let symbol: Expr = input.parse()?;
            input.parse::<Token![;]>()?;
            let content;
            syn::parenthesized!(content in input);
            let params: Punctuated<Type, Token![,]> = content.parse_terminated(Type::parse, Token![,])?;
            input.parse::<Token![->]>()?;
            let ret: Type = input.parse()?;
            input.parse::<Token![;]>()?;
            fns.push(ApiFn {
                name: name.to_string(),
                origin: String::new(),
                symbol,
                since,
                cond,
                params: params.into_iter().collect(),
                ret,
            });
        }
        Ok(ApiBlock { version, fns })
    }
}

/// The `runtime_api!` block an invocation in `mod.rs` declares: the block
/// itself, or what a macro of the backends (`shared_runtime_api!`) expands
/// to. `Ok(None)`: the invocation declares no functions.
/// `here` is the file of the invocation, which each entry records as where it
/// is declared unless it comes from the macro's own text.
fn api_block(
    mac: &syn::Macro,
    here: &str,
    macros: &Macros,
    depth: usize,
) -> Result<Option<ApiBlock>, String> {
    let Some(name) = mac.path.segments.last().map(|s| s.ident.to_string()) else {
        return Ok(None);
    };
    if name == "runtime_api" {
        let mut block: ApiBlock = mac.parse_body().map_err(|e| format!("runtime_api!: {e}"))?;
        for f in &mut block.fns {
            f.origin = here.to_string();
        }
        return Ok(Some(block));
    }
    let Some(rule) = macros.get(&name) else {
        return Ok(None);
    };
    if depth > 8 || !rule.mentions("runtime_api") {
        return Ok(None);
    }
    let origin = format!("{name}! (macro_rules in {})", rule.file.display());
    // The entries the invocation writes itself (`required { fn ... }`).
    let mut own = Vec::new();
    fn_names(mac.tokens.clone(), &mut own);
    let expanded = rule
        .expand(mac.tokens.clone())
        .ok_or_else(|| format!("{origin}: the invocation does not match the macro's rule"))?;
    let file: syn::File =
        syn::parse2(expanded).map_err(|e| format!("{origin}: its expansion does not parse: {e}"))?;
    for item in &file.items {
        if let Item::Macro(m) = item {
            let inner = api_block(&m.mac, &short_path(&rule.file), macros, depth + 1)
                .map_err(|e| format!("{origin}: {e}"))?;
            if let Some(mut block) = inner {
                for f in block.fns.iter_mut().filter(|f| own.contains(&f.name)) {
                    f.origin = here.to_string();
                }
                return Ok(Some(block));
            }
        }
    }
    Ok(None)
}

/// The NAMEs of every `fn NAME` in a token stream.
fn fn_names(ts: proc_macro2::TokenStream, out: &mut Vec<String>) {
    let tts: Vec<proc_macro2::TokenTree> = ts.into_iter().collect();
    for (i, tt) in tts.iter().enumerate() {
        match (tt, tts.get(i + 1)) {
            (proc_macro2::TokenTree::Ident(f), Some(proc_macro2::TokenTree::Ident(name))) if f == "fn" => {
                out.push(name.to_string())
            }
            (proc_macro2::TokenTree::Group(g), _) => fn_names(g.stream(), out),
            _ => {}
        }
    }
}

/// `backends/rocm/mod.rs` as `rocm/mod.rs`: the file and its directory.
pub(crate) fn short_path(path: &Path) -> String {
    let file = path.file_name().map(|f| f.to_string_lossy()).unwrap_or_default();
    match path.parent().and_then(|p| p.file_name()) {
        Some(dir) => format!("{}/{file}", dir.to_string_lossy()),
        None => file.to_string(),
    }
}

/// The names a `use crate::common::...` item imports.
fn imported_from_common(tree: &syn::UseTree, path: &mut Vec<String>, out: &mut Vec<String>) {
    match tree {
        syn::UseTree::Path(p) => {
            path.push(p.ident.to_string());
            imported_from_common(&p.tree, path, out);
            path.pop();
        }
        syn::UseTree::Group(g) => {
            for t in &g.items {
                imported_from_common(t, path, out);
            }
        }
        syn::UseTree::Name(n) if path.as_slice() == ["crate", "common"] => out.push(n.ident.to_string()),
        _ => {}
    }
}

fn parse_rs(path: &Path) -> syn::File {
    let src = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    syn::parse_file(&src).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

impl Hand {
    /// Reads `dir` (`backends/<vendor>`): `mod.rs`, `sys.rs`, and the
    /// macros of the `.rs` files of `backends/` itself (`common.rs`,
    /// `shared.rs`), which both may invoke.
    pub(crate) fn read(vendor: Vendor, dir: &Path) -> Hand {
        let mod_path = dir.join("mod.rs");
        let sys_path = dir.join("sys.rs");
        let mut files = vec![mod_path.clone()];
        let mut notes = Vec::new();

        let mut macros = Macros::new();
        let mut shared: Vec<PathBuf> = std::fs::read_dir(dir.parent().unwrap_or(dir))
            .map(|d| d.filter_map(|e| e.ok().map(|e| e.path())).collect())
            .unwrap_or_default();
        shared.retain(|p| p.extension().is_some_and(|x| x == "rs"));
        shared.sort();
        for p in shared {
            expand::collect(&parse_rs(&p).items, &p, &mut macros);
            files.push(p);
        }

        let mod_src =
            std::fs::read_to_string(&mod_path).unwrap_or_else(|e| panic!("{}: {e}", mod_path.display()));
        notes.extend(Expectation::scan(&mod_src, &mod_path));
        let mod_file = syn::parse_file(&mod_src).unwrap_or_else(|e| panic!("{}: {e}", mod_path.display()));
        expand::collect(&mod_file.items, &mod_path, &mut macros);

        let mut common_macros = BTreeMap::new();
        let (sys, sys_path) = if sys_path.exists() {
            let src = std::fs::read_to_string(&sys_path).unwrap();
            notes.extend(Expectation::scan(&src, &sys_path));
            files.push(sys_path.clone());
            let file = syn::parse_file(&src).unwrap_or_else(|e| panic!("{}: {e}", sys_path.display()));
            expand::collect(&file.items, &sys_path, &mut macros);
            for item in &file.items {
                let Item::Use(u) = item else { continue };
                let mut names = Vec::new();
                imported_from_common(&u.tree, &mut Vec::new(), &mut names);
                for n in names {
                    match macros.get(&n) {
                        Some(rule) => {
                            common_macros.insert(n, rule.source.clone());
                        }
                        None => panic!(
                            "{}: imports `crate::common::{n}`, which is not a single-rule macro of backends/*.rs \
                             (the checker compiles sys.rs with only those)",
                            sys_path.display()
                        ),
                    }
                }
            }
            (Model::from_items(&file.items, &macros), Some(sys_path))
        } else {
            (Model::default(), None)
        };

        let mut api = None;
        let mut repr_structs = Vec::new();
        let mut fns = BTreeMap::new();
        for item in &mod_file.items {
            match item {
                Item::Struct(st) if st.attrs.iter().any(|a| a.path().is_ident("repr")) => {
                    repr_structs.push(st.clone());
                }
                Item::Fn(f) => {
                    fns.insert(f.sig.ident.to_string(), f.clone());
                }
                Item::Macro(m) => {
                    let block = api_block(&m.mac, &short_path(&mod_path), &macros, 0)
                        .unwrap_or_else(|e| panic!("{}: {e}", mod_path.display()));
                    if let Some(block) = block {
                        assert!(
                            api.is_none(),
                            "{}: two runtime_api! blocks (direct or through a macro)",
                            mod_path.display()
                        );
                        api = Some(block);
                    }
                }
                _ => {}
            }
        }
        let api = api.unwrap_or_else(|| {
            panic!(
                "{}: no runtime_api! block (neither `runtime_api! {{ .. }}` nor a macro of backends/*.rs \
                 that expands to one, like `shared_runtime_api! {{ .. }}`)",
                mod_path.display()
            )
        });

        // The `#[repr]` structs of mod.rs that the declarations name (and
        // the ones those name), copied into the checker with public fields.
        let mut wanted: String = api
            .fns
            .iter()
            .flat_map(|f| f.params.iter().chain([&f.ret]))
            .map(|t| t.to_token_stream().to_string())
            .collect::<Vec<_>>()
            .join(" ");
        let mut locals = Vec::new();
        let mut local_src = String::new();
        loop {
            let words: Vec<&str> = wanted.split(|c: char| !c.is_alphanumeric() && c != '_').collect();
            let (take, rest): (Vec<_>, Vec<_>) = repr_structs
                .into_iter()
                .partition(|st| words.contains(&st.ident.to_string().as_str()));
            repr_structs = rest;
            if take.is_empty() {
                break;
            }
            for mut st in take {
                st.vis = syn::parse_quote!(pub(crate));
                for f in st.fields.iter_mut() {
                    f.vis = syn::parse_quote!(pub(crate));
                }
                let src = st.to_token_stream().to_string();
                wanted += &src;
                local_src += &src;
                local_src.push('\n');
                locals.push(Item::Struct(st));
            }
        }
        let local = Model::from_items(&locals, &Macros::new());
        let mut names = Model::default();
        for m in [&sys, &local] {
            names.structs.extend(m.structs.clone());
            names.aliases.extend(m.aliases.clone());
        }
        let mut consts: BTreeMap<String, Expr> = sys
            .consts
            .iter()
            .map(|(n, (_, e))| (n.clone(), e.clone()))
            .collect();
        consts.extend(
            Model::from_items(&mod_file.items, &Macros::new())
                .consts
                .into_iter()
                .map(|(n, (_, e))| (n, e)),
        );
        Hand {
            vendor,
            sys_path,
            sys,
            local_src,
            names,
            consts,
            fns,
            api,
            common_macros,
            notes,
            files,
        }
    }

    pub(crate) fn module(&self) -> String {
        format!("hand_{}", self.vendor.name)
    }

    pub(crate) fn emit_module(&self) -> String {
        match &self.sys_path {
            Some(p) => format!(
                "#[allow(dead_code, clippy::all)]\npub mod {} {{\n    #[path = {:?}]\n    pub mod sys;\n}}\n",
                self.module(),
                p.display().to_string()
            ),
            None => format!("pub mod {} {{ pub mod sys {{}} }}\n", self.module()),
        }
    }

    /// The expectation for `name` (an item, or `Struct.field`) and
    /// `property` under this header set, if the hand-written files state one.
    /// Where several apply, the one written last wins (`sys.rs` is read after
    /// `mod.rs`).
    pub(crate) fn expect(&self, set: &Set, name: &str, property: &str) -> Option<&Expectation> {
        self.notes
            .iter()
            .rev()
            .find(|e| e.name == name && e.property == property && e.applies(set))
    }

    /// The header struct a hand-written storage struct stands in for.
    pub(crate) fn holds(&self, set: &Set, name: &str) -> Option<&Expectation> {
        self.expect(set, name, "holds")
    }

    /// The header struct a hand-written struct is, under another name (one
    /// of several layouts a header has had).
    pub(crate) fn is(&self, set: &Set, name: &str) -> Option<&Expectation> {
        self.expect(set, name, "is")
    }
}

// ---------------------------------------------------------------------------
// Evaluating `runtime_api!` symbols, `since` texts and conditions for one
// runtime version.

/// What an expression of a declaration evaluates to.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Value {
    Int(i128),
    Bool(bool),
    /// A string, without a trailing NUL (a symbol, or a `since` text).
    Str(String),
}

/// Evaluates the expressions of the declarations: literals, the constants of
/// `sys.rs` and `mod.rs`, the runtime's version (the `version:` name),
/// integer arithmetic, comparisons, `!`, `&&`, `||`, `if`/`else`,
/// `concat!` of strings, `(a..b).contains(&x)`, and calls of the functions of
/// `mod.rs` whose body is one expression. Anything else is `None`: the caller
/// reports that it cannot tell.
pub(crate) struct Eval<'a> {
    pub(crate) hand: &'a Hand,
    /// Names bound to values: the version, or a called function's parameters.
    vars: Vec<(String, Value)>,
    depth: usize,
}

impl<'a> Eval<'a> {
    /// For a runtime that reports `runtime_version`.
    pub(crate) fn new(hand: &'a Hand, runtime_version: i128) -> Eval<'a> {
        Eval {
            hand,
            vars: hand
                .api
                .version
                .iter()
                .map(|v| (v.clone(), Value::Int(runtime_version)))
                .collect(),
            depth: 0,
        }
    }

    pub(crate) fn int(&self, e: &Expr) -> Option<i128> {
        match self.value(e)? {
            Value::Int(i) => Some(i),
            _ => None,
        }
    }

    pub(crate) fn bool(&self, e: &Expr) -> Option<bool> {
        match self.value(e)? {
            Value::Bool(b) => Some(b),
            _ => None,
        }
    }

    /// A symbol (the one a runtime of this version loads) or a `since` text.
    pub(crate) fn string(&self, e: &Expr) -> Option<String> {
        match self.value(e)? {
            Value::Str(s) => Some(s),
            _ => None,
        }
    }

    /// Every string `e` may evaluate to, whatever the version: both branches
    /// of an `if`.
    pub(crate) fn strings(&self, e: &Expr) -> Vec<String> {
        match e {
            Expr::Paren(p) => self.strings(&p.expr),
            Expr::Block(b) => match b.block.stmts.as_slice() {
                [syn::Stmt::Expr(e, None)] => self.strings(e),
                _ => Vec::new(),
            },
            Expr::If(i) => {
                let mut all = match i.then_branch.stmts.as_slice() {
                    [syn::Stmt::Expr(e, None)] => self.strings(e),
                    _ => Vec::new(),
                };
                if let Some((_, e)) = &i.else_branch {
                    all.extend(self.strings(e));
                }
                all
            }
            e => self.string(e).into_iter().collect(),
        }
    }

    pub(crate) fn value(&self, e: &Expr) -> Option<Value> {
        use Value::{Bool, Int, Str};
        if self.depth > 16 {
            return None;
        }
        Some(match e {
            Expr::Lit(l) => match &l.lit {
                syn::Lit::Int(i) => Int(i.base10_parse().ok()?),
                syn::Lit::Bool(b) => Bool(b.value),
                syn::Lit::Str(s) => Str(s.value().trim_end_matches('\0').to_string()),
                _ => return None,
            },
            Expr::Paren(p) => self.value(&p.expr)?,
            Expr::Group(g) => self.value(&g.expr)?,
            Expr::Reference(r) => self.value(&r.expr)?,
            // Version numbers fit every integer type they are cast to.
            Expr::Cast(c) => self.value(&c.expr)?,
            Expr::Block(b) => self.block(&b.block)?,
            Expr::If(i) => {
                if self.bool(&i.cond)? {
                    self.block(&i.then_branch)?
                } else {
                    self.value(&i.else_branch.as_ref()?.1)?
                }
            }
            Expr::Path(p) => {
                let segs = &p.path.segments;
                let name = segs.last()?.ident.to_string();
                match self
                    .vars
                    .iter()
                    .rev()
                    .find(|(n, _)| segs.len() == 1 && *n == name)
                {
                    Some((_, v)) => v.clone(),
                    // A constant: evaluated on its own, with no variables.
                    None => self.inner(Vec::new()).value(self.hand.consts.get(&name)?)?,
                }
            }
            Expr::Unary(u) => match (&u.op, self.value(&u.expr)?) {
                (syn::UnOp::Not(_), Bool(b)) => Bool(!b),
                (syn::UnOp::Neg(_), Int(i)) => Int(-i),
                _ => return None,
            },
            Expr::Binary(b) => self.binary(b)?,
            Expr::Macro(m) if m.mac.path.is_ident("concat") => {
                let parts = m
                    .mac
                    .parse_body_with(Punctuated::<Expr, Token![,]>::parse_terminated)
                    .ok()?;
                let mut s = String::new();
                for part in &parts {
                    s += &self.string(part)?;
                }
                Str(s)
            }
            Expr::MethodCall(m) if m.method == "contains" && m.args.len() == 1 => {
                let mut range = &*m.receiver;
                while let Expr::Paren(p) = range {
                    range = &p.expr;
                }
                let Expr::Range(r) = range else { return None };
                let x = self.int(&m.args[0])?;
                let above = match &r.start {
                    Some(lo) => x >= self.int(lo)?,
                    None => true,
                };
                let below = match (&r.end, &r.limits) {
                    (None, _) => true,
                    (Some(hi), syn::RangeLimits::HalfOpen(_)) => x < self.int(hi)?,
                    (Some(hi), syn::RangeLimits::Closed(_)) => x <= self.int(hi)?,
                };
                Bool(above && below)
            }
            Expr::Call(c) => {
                let Expr::Path(p) = &*c.func else { return None };
                let f = self.hand.fns.get(&p.path.segments.last()?.ident.to_string())?;
                let [syn::Stmt::Expr(body, None)] = f.block.stmts.as_slice() else {
                    return None;
                };
                if f.sig.inputs.len() != c.args.len() {
                    return None;
                }
                let mut vars = Vec::new();
                for (param, arg) in f.sig.inputs.iter().zip(&c.args) {
                    let syn::FnArg::Typed(t) = param else { return None };
                    let syn::Pat::Ident(name) = &*t.pat else {
                        return None;
                    };
                    vars.push((name.ident.to_string(), self.value(arg)?));
                }
                self.inner(vars).value(body)?
            }
            _ => return None,
        })
    }

    fn inner(&self, vars: Vec<(String, Value)>) -> Eval<'a> {
        Eval {
            hand: self.hand,
            vars,
            depth: self.depth + 1,
        }
    }

    fn block(&self, b: &syn::Block) -> Option<Value> {
        match b.stmts.as_slice() {
            [syn::Stmt::Expr(e, None)] => self.value(e),
            _ => None,
        }
    }

    fn binary(&self, b: &syn::ExprBinary) -> Option<Value> {
        use Value::{Bool, Int};
        // `&&` and `||` look at the right side only when they must.
        match b.op {
            BinOp::And(_) => return Some(Bool(self.bool(&b.left)? && self.bool(&b.right)?)),
            BinOp::Or(_) => return Some(Bool(self.bool(&b.left)? || self.bool(&b.right)?)),
            _ => {}
        }
        let (l, r) = (self.int(&b.left)?, self.int(&b.right)?);
        Some(match b.op {
            BinOp::Add(_) => Int(l + r),
            BinOp::Sub(_) => Int(l - r),
            BinOp::Mul(_) => Int(l * r),
            BinOp::Div(_) if r != 0 => Int(l / r),
            BinOp::Rem(_) if r != 0 => Int(l % r),
            BinOp::Ge(_) => Bool(l >= r),
            BinOp::Gt(_) => Bool(l > r),
            BinOp::Le(_) => Bool(l <= r),
            BinOp::Lt(_) => Bool(l < r),
            BinOp::Eq(_) => Bool(l == r),
            BinOp::Ne(_) => Bool(l != r),
            _ => return None,
        })
    }
}

// ---------------------------------------------------------------------------
// Per-version expectations: `// header-check SELECTOR: CLAUSE; CLAUSE`.

/// A version bound of a selector: (op, version) with op `<`, `>=` or `=`.
pub(crate) type Bound = (String, Vec<u64>);

pub(crate) struct Expectation {
    pub(crate) vendor: String,
    /// `None`: every version.
    pub(crate) bound: Option<Bound>,
    pub(crate) name: String,
    /// `absent`, `value`, `size`, `align`, `offset`, `holds` or `is`.
    pub(crate) property: String,
    pub(crate) value: i128,
    /// For `holds` and `is`: the header struct.
    pub(crate) target: String,
    /// The selector as written and where, for the report.
    pub(crate) origin: String,
}

impl Expectation {
    pub(crate) fn scan(src: &str, path: &Path) -> Vec<Expectation> {
        let short = short_path(path);
        let mut v = Vec::new();
        for (n, line) in src.lines().enumerate() {
            let text = line
                .trim_start()
                .trim_start_matches('/')
                .trim_start_matches('!')
                .trim();
            let Some(rest) = text.strip_prefix("header-check ") else {
                continue;
            };
            let at = format!("{short}:{}", n + 1);
            let (selector, clauses) = rest
                .split_once(':')
                .unwrap_or_else(|| panic!("{at}: want `header-check SELECTOR: CLAUSE; ...`"));
            let selector = selector.trim();
            let (vendor, bound) =
                parse_selector(selector).unwrap_or_else(|| panic!("{at}: bad selector {selector:?}"));
            for clause in clauses.split(';').map(str::trim).filter(|c| !c.is_empty()) {
                let words: Vec<&str> = clause.split_whitespace().collect();
                let number = |v: &str| parse_int(v).unwrap_or_else(|| panic!("{at}: bad number {v}"));
                let (property, value, target) = match words.as_slice() {
                    [_, "absent"] => ("absent", 0, ""),
                    [_, "=", v] => ("value", number(v), ""),
                    [_, p @ ("size" | "align" | "offset"), v] => (*p, number(v), ""),
                    [_, "holds", t] => ("holds", 0, *t),
                    [_, "is", t] => ("is", 0, *t),
                    _ => panic!(
                        "{at}: bad clause {clause:?} \
                         (NAME absent | NAME = V | NAME size|align|offset N | NAME holds STRUCT | NAME is STRUCT)"
                    ),
                };
                v.push(Expectation {
                    vendor: vendor.clone(),
                    bound: bound.clone(),
                    name: words[0].to_string(),
                    property: property.to_string(),
                    value,
                    target: target.to_string(),
                    origin: format!("{selector}, {at}"),
                });
            }
        }
        v
    }

    pub(crate) fn applies(&self, set: &Set) -> bool {
        if self.vendor != set.vendor.name {
            return false;
        }
        let Some((op, ver)) = &self.bound else {
            return true;
        };
        let ord = set.cmp_version(ver);
        match op.as_str() {
            "<" => ord.is_lt(),
            ">=" => ord.is_ge(),
            _ => ord.is_eq(),
        }
    }
}

pub(crate) fn parse_selector(s: &str) -> Option<(String, Option<Bound>)> {
    let Some(cut) = s.find(['<', '>', '=']) else {
        return Some((s.to_string(), None));
    };
    let (vendor, rest) = s.split_at(cut);
    let (op, ver) = if let Some(v) = rest.strip_prefix(">=") {
        (">=", v)
    } else if let Some(v) = rest.strip_prefix('<') {
        ("<", v)
    } else {
        ("=", rest.strip_prefix('=')?)
    };
    Some((
        vendor.trim().to_string(),
        Some((op.to_string(), parse_version(ver)?)),
    ))
}

pub(crate) fn parse_version(s: &str) -> Option<Vec<u64>> {
    s.trim().split('.').map(|p| p.parse().ok()).collect()
}

pub(crate) fn parse_int(s: &str) -> Option<i128> {
    let s = s.replace('_', "");
    if let Some(h) = s.strip_prefix("0x") {
        i128::from_str_radix(h, 16).ok()
    } else {
        s.parse().ok()
    }
}
