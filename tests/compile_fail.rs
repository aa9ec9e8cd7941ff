//! Misuse that must not compile: use after drop, double free, buffers of
//! types that are not plain data, a memory resource without `unsafe impl`.

#[test]
fn misuse_does_not_compile() {
    let t = trybuild::TestCases::new();
    t.compile_fail("tests/ui/*.rs");
}
