//! Checks the hand-written vendor bindings of `backends/` against bindings
//! that bindgen generated from the real headers (see `build.rs`, which writes
//! the checks this program runs, and `ci/bindgen-check.sh`, which installs the
//! headers and builds it).
//!
//! Usage: `somalloc-bindgen-check [-v]`; `-v` also lists every check that
//! passed. Exit status 0 when every check passed, 1 otherwise.

use std::process::ExitCode;

include!(concat!(env!("OUT_DIR"), "/checks.rs"));

/// The size of a field's type, named by a closure that borrows the field.
pub fn field_size<S, F>(_field: impl Fn(&S) -> &F) -> usize {
    std::mem::size_of::<F>()
}

/// Collects the results of the checks of all header sets.
pub struct Report {
    verbose: bool,
    set: String,
    /// (header set, passed, failed) per set.
    sets: Vec<(String, usize, usize)>,
    failures: Vec<String>,
}

impl Report {
    fn new(verbose: bool) -> Report {
        Report {
            verbose,
            set: String::new(),
            sets: Vec::new(),
            failures: Vec::new(),
        }
    }

    pub fn begin(&mut self, set: &str, dir: &str) {
        println!("== {set} headers ({dir})");
        self.set = set.to_string();
        self.sets.push((set.to_string(), 0, 0));
    }

    pub fn pass(&mut self, what: &str) {
        self.sets.last_mut().unwrap().1 += 1;
        if self.verbose {
            println!("   ok    {what}");
        }
    }

    pub fn fail(&mut self, what: &str, why: &str) {
        self.sets.last_mut().unwrap().2 += 1;
        println!("   FAIL  {what}: {why}");
        self.failures.push(format!("{}: {what}: {why}", self.set));
    }

    /// Something worth knowing that is not a failure (shown with `-v`).
    pub fn note(&mut self, what: &str) {
        if self.verbose {
            println!("   note  {what}");
        }
    }

    /// `hand` is the hand-written value, or the value an expectation states
    /// for this header version (`expected` then says where it was written).
    pub fn compare(&mut self, what: &str, hand: i128, header: i128, expected: Option<&str>) {
        match expected {
            None if hand == header => self.pass(&format!("{what} = {header}")),
            None => self.fail(what, &format!("hand-written {hand}, header {header}")),
            Some(at) if hand == header => self.pass(&format!("{what} = {header}, as expected ({at})")),
            Some(at) => self.fail(
                what,
                &format!("expected {hand} for this version ({at}), header {header}"),
            ),
        }
    }

    /// A storage struct (`header-check ... holds ...`): room for the
    /// header's struct is enough.
    pub fn at_least(&mut self, what: &str, hand: i128, header: i128, at: &str) {
        if hand >= header {
            self.pass(&format!("{what}: {hand} >= {header} ({at})"));
        } else {
            self.fail(
                what,
                &format!("hand-written {hand} is less than the header's {header} ({at})"),
            );
        }
    }

    /// One function: (what, hand-written size, header size, where a `holds`
    /// line makes a larger hand-written pointee right) for each parameter,
    /// pointee and return whose size is compared. `decl` says where the
    /// function is declared.
    pub fn sizes(&mut self, what: &str, decl: &str, sizes: &[(&str, usize, usize, Option<&str>)]) {
        let bad: Vec<String> = sizes
            .iter()
            .filter(|(_, h, g, holds)| if holds.is_some() { h < g } else { h != g })
            .map(|(w, h, g, _)| format!("{w} is {h} bytes by hand, {g} in the header"))
            .collect();
        if bad.is_empty() {
            self.pass(what);
        } else {
            self.fail(what, &format!("{} ({decl})", bad.join("; ")));
        }
    }

    /// A constant: equal values, or the same bits in the hand-written type's
    /// width (a `u32` flag written as an `i32`, say).
    pub fn value(
        &mut self,
        what: &str,
        hand: i128,
        hand_bytes: usize,
        header: i128,
        expected: Option<(i128, &str)>,
    ) {
        if let Some((v, at)) = expected {
            return self.compare(what, v, header, Some(at));
        }
        let bits = 8 * hand_bytes.min(16) as u32;
        let same_bits = bits < 128 && {
            let mask = (1i128 << bits) - 1;
            let fits = header >= -(1i128 << (bits - 1)) && header < (1i128 << bits);
            fits && hand & mask == header & mask
        };
        if hand == header || same_bits {
            self.pass(&format!("{what} = {header}"));
        } else {
            self.fail(what, &format!("hand-written {hand}, header {header}"));
        }
    }
}

fn main() -> ExitCode {
    let verbose = std::env::args().skip(1).any(|a| a == "-v" || a == "--verbose");
    let mut r = Report::new(verbose);
    run_all(&mut r);
    if r.sets.is_empty() {
        eprintln!("no header sets were configured (SOMALLOC_BINDGEN_SETS); run ci/bindgen-check.sh");
        return ExitCode::from(2);
    }
    println!();
    let (mut passed, mut failed) = (0, 0);
    for (set, p, f) in &r.sets {
        println!("{set:<12} {p:>4} passed, {f} failed");
        passed += p;
        failed += f;
    }
    println!("bindings check: {passed} passed, {failed} failed");
    if failed > 0 {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}
