//! The hand-written side of one vendor: `sys.rs`, the `runtime_api!` block
//! of `mod.rs`, the `header-check` lines, and the evaluation of the
//! `runtime_api!` conditions for one header version.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use proc_macro2::{Ident, TokenStream, TokenTree};
use quote::ToTokens;
use syn::parse::{Parse, ParseStream};
use syn::punctuated::Punctuated;
use syn::{BinOp, Expr, Item, LitStr, Token, Type};

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
    /// Integer constants of `mod.rs` and `sys.rs`, for `runtime_api!`
    /// conditions.
    pub(crate) consts: BTreeMap<String, Expr>,
    pub(crate) api: ApiBlock,
    pub(crate) notes: Vec<Expectation>,
    pub(crate) files: Vec<PathBuf>,
}

/// A `runtime_api!` block: `version: v;` then `fn` and `optional fn` entries.
pub(crate) struct ApiBlock {
    /// The name the entries' conditions give the runtime's version.
    pub(crate) version: Option<String>,
    pub(crate) fns: Vec<ApiFn>,
}

/// One entry of a `runtime_api!` block.
pub(crate) struct ApiFn {
    /// The symbol: a string, or an expression that picks one by version.
    pub(crate) symbol: Expr,
    /// `optional fn ... since "CUDA 12.8" [if COND]`.
    pub(crate) since: Option<String>,
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
            let optional = input.peek(syn::Ident) && input.fork().parse::<Ident>()? == "optional";
            if optional {
                input.parse::<Ident>()?;
            }
            input.parse::<Token![fn]>()?;
            input.parse::<Ident>()?;
            input.parse::<Token![=]>()?;
            let (symbol, since, cond) = if optional {
                let sym: LitStr = input.parse()?;
                let kw: Ident = input.parse()?;
                if kw != "since" {
                    return Err(syn::Error::new(kw.span(), "expected `since \"...\"`"));
                }
                let since: LitStr = input.parse()?;
                let cond = if input.peek(Token![if]) {
                    input.parse::<Token![if]>()?;
                    Some(input.parse::<Expr>()?)
                } else {
                    None
                };
                (syn::parse_quote!(#sym), Some(since.value()), cond)
            } else {
                (input.parse::<Expr>()?, None, None)
            };
            input.parse::<Token![;]>()?;
            let content;
            syn::parenthesized!(content in input);
            let params: Punctuated<Type, Token![,]> = content.parse_terminated(Type::parse, Token![,])?;
            input.parse::<Token![->]>()?;
            let ret: Type = input.parse()?;
            input.parse::<Token![;]>()?;
            fns.push(ApiFn {
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

impl Hand {
    pub(crate) fn read(vendor: Vendor, dir: &Path) -> Hand {
        let mod_path = dir.join("mod.rs");
        let sys_path = dir.join("sys.rs");
        let mut files = vec![mod_path.clone()];
        let mut notes = Vec::new();

        let mod_src =
            std::fs::read_to_string(&mod_path).unwrap_or_else(|e| panic!("{}: {e}", mod_path.display()));
        notes.extend(Expectation::scan(&mod_src, &mod_path));
        let mod_file = syn::parse_file(&mod_src).unwrap_or_else(|e| panic!("{}: {e}", mod_path.display()));

        let (sys, sys_path) = if sys_path.exists() {
            let src = std::fs::read_to_string(&sys_path).unwrap();
            notes.extend(Expectation::scan(&src, &sys_path));
            files.push(sys_path.clone());
            let file = syn::parse_file(&src).unwrap_or_else(|e| panic!("{}: {e}", sys_path.display()));
            (Model::from_items(&file.items), Some(sys_path))
        } else {
            (Model::default(), None)
        };

        let mut api = None;
        let mut repr_structs = Vec::new();
        for item in &mod_file.items {
            match item {
                Item::Struct(st) if st.attrs.iter().any(|a| a.path().is_ident("repr")) => {
                    repr_structs.push(st.clone());
                }
                Item::Macro(m) if m.mac.path.is_ident("runtime_api") => {
                    let block: ApiBlock = m
                        .mac
                        .parse_body()
                        .unwrap_or_else(|e| panic!("{}: runtime_api!: {e}", mod_path.display()));
                    assert!(api.is_none(), "{}: two runtime_api! blocks", mod_path.display());
                    api = Some(block);
                }
                _ => {}
            }
        }
        let api = api.unwrap_or_else(|| panic!("{}: no runtime_api! block", mod_path.display()));

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
        let local = Model::from_items(&locals);
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
            Model::from_items(&mod_file.items)
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
            api,
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
}

// ---------------------------------------------------------------------------
// Evaluating `runtime_api!` symbol choices for one header version.

pub(crate) struct Eval<'a> {
    pub(crate) hand: &'a Hand,
    pub(crate) runtime_version: i128,
}

impl Eval<'_> {
    pub(crate) fn int(&self, e: &Expr) -> Option<i128> {
        match e {
            Expr::Lit(syn::ExprLit {
                lit: syn::Lit::Int(i),
                ..
            }) => i.base10_parse().ok(),
            Expr::Paren(p) => self.int(&p.expr),
            Expr::Path(p) => {
                let segs: Vec<String> = p.path.segments.iter().map(|s| s.ident.to_string()).collect();
                let name = segs.last()?;
                if segs.len() == 1 && Some(name) == self.hand.api.version.as_ref() {
                    return Some(self.runtime_version);
                }
                self.int(self.hand.consts.get(name)?)
            }
            Expr::Binary(b) => {
                let (l, r) = (self.int(&b.left)?, self.int(&b.right)?);
                match b.op {
                    BinOp::Add(_) => Some(l + r),
                    BinOp::Sub(_) => Some(l - r),
                    BinOp::Mul(_) => Some(l * r),
                    BinOp::Div(_) if r != 0 => Some(l / r),
                    _ => None,
                }
            }
            _ => None,
        }
    }

    pub(crate) fn bool(&self, e: &Expr) -> Option<bool> {
        match e {
            Expr::Paren(p) => self.bool(&p.expr),
            Expr::Unary(u) if matches!(u.op, syn::UnOp::Not(_)) => self.bool(&u.expr).map(|b| !b),
            Expr::Lit(syn::ExprLit {
                lit: syn::Lit::Bool(b),
                ..
            }) => Some(b.value),
            Expr::Binary(b) => match b.op {
                BinOp::And(_) => Some(self.bool(&b.left)? && self.bool(&b.right)?),
                BinOp::Or(_) => Some(self.bool(&b.left)? || self.bool(&b.right)?),
                op => {
                    let (l, r) = (self.int(&b.left)?, self.int(&b.right)?);
                    match op {
                        BinOp::Ge(_) => Some(l >= r),
                        BinOp::Gt(_) => Some(l > r),
                        BinOp::Le(_) => Some(l <= r),
                        BinOp::Lt(_) => Some(l < r),
                        BinOp::Eq(_) => Some(l == r),
                        BinOp::Ne(_) => Some(l != r),
                        _ => None,
                    }
                }
            },
            _ => None,
        }
    }

    /// The symbol a runtime of this version loads, when the expression can be
    /// evaluated (a string, or `if COND { "a\0" } else { ... }`).
    pub(crate) fn symbol(&self, e: &Expr) -> Option<String> {
        match e {
            Expr::Lit(syn::ExprLit {
                lit: syn::Lit::Str(s),
                ..
            }) => Some(s.value().trim_end_matches('\0').to_string()),
            Expr::Paren(p) => self.symbol(&p.expr),
            Expr::Block(b) => self.block_symbol(&b.block),
            Expr::If(i) => {
                if self.bool(&i.cond)? {
                    self.block_symbol(&i.then_branch)
                } else {
                    self.symbol(&i.else_branch.as_ref()?.1)
                }
            }
            Expr::Path(p) => self.symbol(self.hand.consts.get(&p.path.segments.last()?.ident.to_string())?),
            _ => None,
        }
    }

    pub(crate) fn block_symbol(&self, b: &syn::Block) -> Option<String> {
        match b.stmts.as_slice() {
            [syn::Stmt::Expr(e, None)] => self.symbol(e),
            _ => None,
        }
    }
}

/// Every string literal in a token stream, without its trailing NUL.
pub(crate) fn string_literals(tokens: TokenStream, out: &mut Vec<String>) {
    for tt in tokens {
        match tt {
            TokenTree::Group(g) => string_literals(g.stream(), out),
            TokenTree::Literal(l) => {
                if let Ok(s) = syn::parse_str::<LitStr>(&l.to_string()) {
                    out.push(s.value().trim_end_matches('\0').to_string());
                }
            }
            _ => {}
        }
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
    /// `absent`, `value`, `size`, `align`, `offset` or `holds`.
    pub(crate) property: String,
    pub(crate) value: i128,
    /// For `holds`: the header struct.
    pub(crate) target: String,
    /// The selector as written and where, for the report.
    pub(crate) origin: String,
}

impl Expectation {
    pub(crate) fn scan(src: &str, path: &Path) -> Vec<Expectation> {
        let file = path.file_name().unwrap().to_string_lossy();
        let dir = path
            .parent()
            .and_then(|p| p.file_name())
            .map(|d| d.to_string_lossy().to_string())
            .unwrap_or_default();
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
            let at = format!("{dir}/{file}:{}", n + 1);
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
                    _ => panic!(
                        "{at}: bad clause {clause:?} \
                         (NAME absent | NAME = V | NAME size|align|offset N | NAME holds STRUCT)"
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
