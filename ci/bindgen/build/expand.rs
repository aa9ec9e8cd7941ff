//! A small `macro_rules!` expander, enough for the backends' own macros: the
//! one that declares opaque structs (`opaque!(A, B)`, read by `sys.rs`) and
//! the shared function table (`shared_runtime_api! { prefix: "hip", ... }`,
//! which expands to a `runtime_api!` block).
//!
//! What it handles: macros with a single rule; literal tokens and groups in
//! the matcher; `$name:fragment`; one level of `$( ... ) sep? op` repetition
//! (`?`, `*`, `+`). A `tt`, `ident` or `literal` fragment is one token tree;
//! any other fragment (`ty`, `expr`, `path`, ...) runs to the next `,` or `;`
//! outside brackets (and, for `ty` and `path`, outside `<...>`). That is what
//! `macro_rules!` itself allows after such fragments, so a macro the compiler
//! accepts matches here the same way.

use std::collections::BTreeMap;
use std::path::PathBuf;

use proc_macro2::{Delimiter, Group, TokenStream, TokenTree};
use quote::ToTokens;
use syn::Item;

/// The single-rule macros found so far, by name.
pub(crate) type Macros = BTreeMap<String, Rule>;

/// One `macro_rules!` with a single rule.
pub(crate) struct Rule {
    matcher: Vec<Pat>,
    body: TokenStream,
    /// Where it was declared, for messages.
    pub(crate) file: PathBuf,
    /// The whole `macro_rules!` item.
    pub(crate) source: String,
}

enum Pat {
    /// An identifier, punctuation or literal, compared as text.
    Token(String),
    Group(Delimiter, Vec<Pat>),
    /// `$name:fragment`.
    Var(String, String),
    /// `$( ... ) sep op`.
    Repeat(Vec<Pat>, Option<String>, char),
}

/// What each `$name` matched.
type Binds = BTreeMap<String, Bound>;

#[derive(Default)]
struct Bound {
    /// Declared inside a `$( ... )`: one value per repetition. Outside, one
    /// value, written wherever the name is used.
    repeated: bool,
    values: Vec<TokenStream>,
}

/// Adds the single-rule `macro_rules!` of `items` to `out`. Macros with
/// several rules (`runtime_api!` itself) are not expanded and are left out.
pub(crate) fn collect(items: &[Item], file: &std::path::Path, out: &mut Macros) {
    for item in items {
        let Item::Macro(m) = item else { continue };
        let (Some(name), true) = (&m.ident, m.mac.path.is_ident("macro_rules")) else {
            continue;
        };
        let mut tts: Vec<TokenTree> = m.mac.tokens.clone().into_iter().collect();
        if matches!(tts.last(), Some(TokenTree::Punct(p)) if p.as_char() == ';') {
            tts.pop();
        }
        // (matcher) => {transcriber}
        let [TokenTree::Group(matcher), TokenTree::Punct(_), TokenTree::Punct(_), TokenTree::Group(body)] =
            tts.as_slice()
        else {
            continue;
        };
        out.insert(
            name.to_string(),
            Rule {
                matcher: patterns(matcher.stream()),
                body: body.stream(),
                file: file.to_path_buf(),
                source: m.to_token_stream().to_string(),
            },
        );
    }
}

impl Rule {
    /// The tokens an invocation with `input` expands to, or `None` when the
    /// input does not match the rule.
    pub(crate) fn expand(&self, input: TokenStream) -> Option<TokenStream> {
        let input: Vec<TokenTree> = input.into_iter().collect();
        let mut binds = Binds::new();
        let used = match_seq(&self.matcher, &input, &mut binds)?;
        (used == input.len()).then(|| transcribe(self.body.clone(), &binds, None))
    }

    /// Whether the expansion mentions `word` (an identifier).
    pub(crate) fn mentions(&self, word: &str) -> bool {
        fn walk(ts: TokenStream, word: &str) -> bool {
            ts.into_iter().any(|tt| match tt {
                TokenTree::Ident(i) => i == word,
                TokenTree::Group(g) => walk(g.stream(), word),
                _ => false,
            })
        }
        walk(self.body.clone(), word)
    }
}

/// `$(`, then the separator (if any) and the repetition operator after the
/// group at `tts[i]`: (separator, operator, tokens used after the group).
fn repetition(tts: &[TokenTree], i: usize) -> Option<(Option<TokenTree>, char, usize)> {
    let op = |t: Option<&TokenTree>| match t {
        Some(TokenTree::Punct(p)) if matches!(p.as_char(), '?' | '*' | '+') => Some(p.as_char()),
        _ => None,
    };
    if let Some(c) = op(tts.get(i + 1)) {
        return Some((None, c, 1));
    }
    let c = op(tts.get(i + 2))?;
    Some((tts.get(i + 1).cloned(), c, 2))
}

fn patterns(ts: TokenStream) -> Vec<Pat> {
    let tts: Vec<TokenTree> = ts.into_iter().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < tts.len() {
        match (&tts[i], tts.get(i + 1)) {
            (TokenTree::Punct(d), Some(TokenTree::Ident(name))) if d.as_char() == '$' => {
                match (tts.get(i + 2), tts.get(i + 3)) {
                    (Some(TokenTree::Punct(c)), Some(TokenTree::Ident(frag))) if c.as_char() == ':' => {
                        out.push(Pat::Var(name.to_string(), frag.to_string()));
                        i += 4;
                    }
                    _ => {
                        out.push(Pat::Token("$".into()));
                        i += 1;
                    }
                }
            }
            (TokenTree::Punct(d), Some(TokenTree::Group(g)))
                if d.as_char() == '$' && g.delimiter() == Delimiter::Parenthesis =>
            {
                match repetition(&tts, i + 1) {
                    Some((sep, op, n)) => {
                        out.push(Pat::Repeat(patterns(g.stream()), sep.map(|s| s.to_string()), op));
                        i += 2 + n;
                    }
                    None => {
                        out.push(Pat::Token("$".into()));
                        i += 1;
                    }
                }
            }
            (TokenTree::Group(g), _) => {
                out.push(Pat::Group(g.delimiter(), patterns(g.stream())));
                i += 1;
            }
            (t, _) => {
                out.push(Pat::Token(t.to_string()));
                i += 1;
            }
        }
    }
    out
}

/// Matches `pats` against a prefix of `input`; the number of token trees used.
fn match_seq(pats: &[Pat], input: &[TokenTree], binds: &mut Binds) -> Option<usize> {
    let mut pos = 0;
    for p in pats {
        match p {
            Pat::Token(t) => {
                if input.get(pos)?.to_string() != *t {
                    return None;
                }
                pos += 1;
            }
            Pat::Group(delim, sub) => {
                let TokenTree::Group(g) = input.get(pos)? else {
                    return None;
                };
                if g.delimiter() != *delim {
                    return None;
                }
                let inner: Vec<TokenTree> = g.stream().into_iter().collect();
                if match_seq(sub, &inner, binds)? != inner.len() {
                    return None;
                }
                pos += 1;
            }
            Pat::Var(name, frag) => {
                let n = fragment_len(frag, &input[pos..])?;
                let value: TokenStream = input[pos..pos + n].iter().cloned().collect();
                binds.entry(name.clone()).or_default().values.push(value);
                pos += n;
            }
            Pat::Repeat(sub, sep, op) => {
                // Every name inside is bound, to nothing when there is no
                // repetition, so the transcriber repeats zero times.
                declare(sub, binds);
                let mut count = 0;
                loop {
                    if *op == '?' && count == 1 {
                        break;
                    }
                    let mut at = pos;
                    if let (Some(sep), true) = (sep, count > 0) {
                        match input.get(at) {
                            Some(t) if t.to_string() == *sep => at += 1,
                            _ => break,
                        }
                    }
                    let mut one = Binds::new();
                    match match_seq(sub, &input[at..], &mut one) {
                        Some(n) if n > 0 => {
                            for (k, v) in one {
                                binds.entry(k).or_default().values.extend(v.values);
                            }
                            pos = at + n;
                            count += 1;
                        }
                        _ => break,
                    }
                }
                if *op == '+' && count == 0 {
                    return None;
                }
            }
        }
    }
    Some(pos)
}

fn declare(pats: &[Pat], binds: &mut Binds) {
    for p in pats {
        match p {
            Pat::Var(name, _) => binds.entry(name.clone()).or_default().repeated = true,
            Pat::Group(_, sub) | Pat::Repeat(sub, _, _) => declare(sub, binds),
            Pat::Token(_) => {}
        }
    }
}

/// How many token trees a fragment of kind `frag` takes from `input`.
fn fragment_len(frag: &str, input: &[TokenTree]) -> Option<usize> {
    if input.is_empty() {
        return None;
    }
    if matches!(frag, "tt" | "ident" | "literal" | "block") {
        return Some(1);
    }
    let angles = matches!(frag, "ty" | "path");
    let mut depth = 0i32;
    let mut n = 0;
    for tt in input {
        if let TokenTree::Punct(p) = tt {
            match p.as_char() {
                ',' | ';' if depth == 0 => break,
                '<' if angles => depth += 1,
                '>' if angles && depth > 0 => depth -= 1,
                _ => {}
            }
        }
        n += 1;
    }
    (n > 0).then_some(n)
}

/// `body` with every bound `$name` replaced and every `$( ... )` repeated
/// once per value of the names inside it. `index` is the repetition being
/// written, if any.
fn transcribe(body: TokenStream, binds: &Binds, index: Option<usize>) -> TokenStream {
    let tts: Vec<TokenTree> = body.into_iter().collect();
    let mut out: Vec<TokenTree> = Vec::new();
    let mut i = 0;
    while i < tts.len() {
        match (&tts[i], tts.get(i + 1)) {
            (TokenTree::Punct(d), Some(TokenTree::Ident(name)))
                if d.as_char() == '$' && binds.contains_key(&name.to_string()) =>
            {
                let bound = &binds[&name.to_string()];
                let at = if bound.repeated { index.unwrap_or(0) } else { 0 };
                if let Some(v) = bound.values.get(at) {
                    out.extend(v.clone());
                }
                i += 2;
            }
            (TokenTree::Punct(d), Some(TokenTree::Group(g)))
                if d.as_char() == '$' && g.delimiter() == Delimiter::Parenthesis =>
            {
                let Some((sep, _, n)) = repetition(&tts, i + 1) else {
                    out.push(tts[i].clone());
                    i += 1;
                    continue;
                };
                let mut names = Vec::new();
                names_in(g.stream(), binds, &mut names);
                let times = names
                    .iter()
                    .filter(|n| binds[*n].repeated)
                    .map(|n| binds[n].values.len())
                    .min()
                    .unwrap_or(0);
                for k in 0..times {
                    if let (true, Some(sep)) = (k > 0, &sep) {
                        out.push(sep.clone());
                    }
                    out.extend(transcribe(g.stream(), binds, Some(k)));
                }
                i += 2 + n;
            }
            (TokenTree::Group(g), _) => {
                let mut ng = Group::new(g.delimiter(), transcribe(g.stream(), binds, index));
                ng.set_span(g.span());
                out.push(TokenTree::Group(ng));
                i += 1;
            }
            (t, _) => {
                out.push(t.clone());
                i += 1;
            }
        }
    }
    out.into_iter().collect()
}

/// The bound `$name`s in a transcriber fragment.
fn names_in(ts: TokenStream, binds: &Binds, out: &mut Vec<String>) {
    let tts: Vec<TokenTree> = ts.into_iter().collect();
    for (i, tt) in tts.iter().enumerate() {
        match (tt, tts.get(i + 1)) {
            (TokenTree::Punct(d), Some(TokenTree::Ident(name)))
                if d.as_char() == '$' && binds.contains_key(&name.to_string()) =>
            {
                out.push(name.to_string());
            }
            (TokenTree::Group(g), _) => names_in(g.stream(), binds, out),
            _ => {}
        }
    }
}
