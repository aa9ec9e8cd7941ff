//! Reading declarations from Rust source (the generated bindings and the
//! hand-written files), and what a type is as far as the C ABI cares.

use std::collections::BTreeMap;

use quote::ToTokens;
use syn::{Expr, Fields, ForeignItem, Item, ReturnType, Type};

use crate::expand::Macros;

// ---------------------------------------------------------------------------
// One side's declarations, read from Rust source.

#[derive(Default)]
pub(crate) struct Model {
    /// Structs and unions: field names and types in order.
    pub(crate) structs: BTreeMap<String, Vec<(String, Type)>>,
    pub(crate) aliases: BTreeMap<String, Type>,
    /// Constants: type and value expression.
    pub(crate) consts: BTreeMap<String, (Type, Expr)>,
    pub(crate) fns: BTreeMap<String, (Vec<Type>, Type)>,
}

impl Model {
    /// The declarations of `items`, with the invocations of `macros` (the
    /// backends' `opaque!`) expanded.
    pub(crate) fn from_items(items: &[Item], macros: &Macros) -> Model {
        let mut m = Model::default();
        m.add_items(items, macros);
        m
    }

    pub(crate) fn add_items(&mut self, items: &[Item], macros: &Macros) {
        for item in items {
            match item {
                Item::Struct(s) => {
                    self.structs.insert(s.ident.to_string(), named_fields(&s.fields));
                }
                Item::Union(u) => {
                    let fields = u
                        .fields
                        .named
                        .iter()
                        .map(|f| (f.ident.as_ref().unwrap().to_string(), f.ty.clone()))
                        .collect();
                    self.structs.insert(u.ident.to_string(), fields);
                }
                Item::Type(t) => {
                    self.aliases.insert(t.ident.to_string(), (*t.ty).clone());
                }
                Item::Const(c) if c.ident != "_" => {
                    self.consts
                        .insert(c.ident.to_string(), ((*c.ty).clone(), (*c.expr).clone()));
                }
                // bindgen writes some typedefs of enums as `pub use self::X as Y;`.
                Item::Use(u) => {
                    if let syn::UseTree::Path(p) = &u.tree {
                        if let (true, syn::UseTree::Rename(r)) = (p.ident == "self", &*p.tree) {
                            let target = &r.ident;
                            self.aliases
                                .insert(r.rename.to_string(), syn::parse_quote!(#target));
                        }
                    }
                }
                Item::ForeignMod(f) => {
                    for fi in &f.items {
                        if let ForeignItem::Fn(func) = fi {
                            let params = func
                                .sig
                                .inputs
                                .iter()
                                .filter_map(|a| match a {
                                    syn::FnArg::Typed(p) => Some((*p.ty).clone()),
                                    syn::FnArg::Receiver(_) => None,
                                })
                                .collect();
                            let ret = match &func.sig.output {
                                ReturnType::Default => syn::parse_quote!(()),
                                ReturnType::Type(_, t) => (**t).clone(),
                            };
                            self.fns.insert(func.sig.ident.to_string(), (params, ret));
                        }
                    }
                }
                // A macro of the backends that declares items
                // (`opaque!(A, B)`): read the items it expands to.
                Item::Macro(m) if m.ident.is_none() => {
                    let name = m.mac.path.segments.last().map(|s| s.ident.to_string());
                    if let Some(rule) = name.and_then(|n| macros.get(&n)) {
                        let expanded = rule
                            .expand(m.mac.tokens.clone())
                            .and_then(|t| syn::parse2::<syn::File>(t).ok());
                        if let Some(file) = expanded {
                            self.add_items(&file.items, macros);
                        }
                    }
                }
                _ => {}
            }
        }
    }

    /// An integer literal constant's value (the header's version macros).
    pub(crate) fn const_value(&self, name: &str) -> Option<i128> {
        match &self.consts.get(name)?.1 {
            Expr::Lit(syn::ExprLit {
                lit: syn::Lit::Int(i),
                ..
            }) => i.base10_parse().ok(),
            _ => None,
        }
    }
}

pub(crate) fn named_fields(fields: &Fields) -> Vec<(String, Type)> {
    match fields {
        Fields::Named(n) => n
            .named
            .iter()
            .map(|f| (f.ident.as_ref().unwrap().to_string(), f.ty.clone()))
            .collect(),
        _ => Vec::new(),
    }
}

/// A struct the C side never completes: only `_`-prefixed fields
/// (`_opaque: [u8; 0]` by hand, `_unused: [u8; 0]` from bindgen).
pub(crate) fn is_opaque(fields: &[(String, Type)]) -> bool {
    fields.iter().all(|(n, _)| n.starts_with('_'))
}

// ---------------------------------------------------------------------------
// What a type is, as far as the C ABI cares.

#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Kind {
    Int,
    Float,
    Void,
    Ptr(Box<Kind>),
    /// A struct, union or array by value.
    Aggregate(String),
    /// An incomplete (opaque) struct: only ever behind a pointer.
    Opaque,
    FnPtr,
    Unknown(String),
}

impl Kind {
    pub(crate) fn describe(&self) -> String {
        match self {
            Kind::Int => "integer".into(),
            Kind::Float => "float".into(),
            Kind::Void => "void".into(),
            Kind::Ptr(k) => format!("pointer to {}", k.describe()),
            Kind::Aggregate(_) => "struct".into(),
            Kind::Opaque => "opaque struct".into(),
            Kind::FnPtr => "function pointer".into(),
            Kind::Unknown(t) => format!("unresolved type `{t}`"),
        }
    }

    /// Has a size worth comparing (void and opaque structs have none).
    pub(crate) fn sized(&self) -> bool {
        !matches!(self, Kind::Void | Kind::Opaque | Kind::Unknown(_) | Kind::FnPtr)
    }
}

/// Whether a hand-written type may stand for a header type. Behind a pointer,
/// `void` or an opaque struct on either side stands for anything.
pub(crate) fn compatible(hand: &Kind, header: &Kind) -> bool {
    match (hand, header) {
        (Kind::Unknown(_), _) | (_, Kind::Unknown(_)) => false,
        (Kind::Ptr(h), Kind::Ptr(_)) if matches!(**h, Kind::Unknown(_)) => false,
        (Kind::Ptr(h), Kind::Ptr(g)) => {
            matches!(**h, Kind::Void | Kind::Opaque)
                || matches!(**g, Kind::Void | Kind::Opaque)
                || compatible(h, g)
        }
        (Kind::Aggregate(_), Kind::Aggregate(_)) => true,
        (h, g) => h == g,
    }
}

/// The names one side's types are looked up in.
pub(crate) struct Scope<'a> {
    /// Items reachable by bare name (and by `sys::` on the hand side).
    pub(crate) own: &'a Model,
}

impl Scope<'_> {
    pub(crate) fn kind(&self, ty: &Type) -> Kind {
        self.kind_depth(ty, 0)
    }

    pub(crate) fn kind_depth(&self, ty: &Type, depth: usize) -> Kind {
        if depth > 16 {
            return Kind::Unknown(show(ty));
        }
        match ty {
            Type::Ptr(p) => Kind::Ptr(Box::new(self.kind_depth(&p.elem, depth + 1))),
            Type::Array(_) => Kind::Aggregate("array".into()),
            Type::BareFn(_) => Kind::FnPtr,
            Type::Tuple(t) if t.elems.is_empty() => Kind::Void,
            Type::Paren(p) => self.kind_depth(&p.elem, depth + 1),
            Type::Path(p) => {
                let last = p.path.segments.last().unwrap().ident.to_string();
                if last == "Option" {
                    return Kind::FnPtr; // nullable callbacks
                }
                if let Some(k) = primitive(&last) {
                    return k;
                }
                if let Some(t) = self.own.aliases.get(&last) {
                    return self.kind_depth(t, depth + 1);
                }
                match self.own.structs.get(&last) {
                    Some(f) if is_opaque(f) => Kind::Opaque,
                    Some(_) => Kind::Aggregate(last),
                    None => Kind::Unknown(show(ty)),
                }
            }
            _ => Kind::Unknown(show(ty)),
        }
    }
}

pub(crate) fn primitive(name: &str) -> Option<Kind> {
    Some(match name {
        "i8" | "u8" | "i16" | "u16" | "i32" | "u32" | "i64" | "u64" | "i128" | "u128" | "isize" | "usize"
        | "c_char" | "c_schar" | "c_uchar" | "c_short" | "c_ushort" | "c_int" | "c_uint" | "c_long"
        | "c_ulong" | "c_longlong" | "c_ulonglong" | "bool" => Kind::Int,
        "f32" | "f64" | "c_float" | "c_double" => Kind::Float,
        "c_void" => Kind::Void,
        _ => return None,
    })
}

/// A type as a reader writes it (`*mut c_int`, not `* mut :: std :: os ...`).
pub(crate) fn show(ty: &impl ToTokens) -> String {
    ty.to_token_stream()
        .to_string()
        .replace("* mut ", "*mut ")
        .replace("* const ", "*const ")
        .replace(":: std :: os :: raw :: ", "")
        .replace(" :: ", "::")
        .replace(" ;", ";")
        .replace("[ ", "[")
        .replace(" ]", "]")
        .replace("usize]", "]")
}
