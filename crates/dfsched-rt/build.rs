//! Gives `libdfsched.so` its SONAME, so that a program linked with
//! `-ldfsched` records the library by that name (`DT_NEEDED`), not by the
//! path it was linked from, and the loader finds it wherever it is
//! installed.
//!
//! The SONAME is unversioned, `libdfsched.so`, while the C ABI is 0.x and
//! may change between releases: a program links against the file cargo
//! leaves in `target/release` (or an installed copy) with no `.so.N` link
//! to make. A versioned SONAME (`libdfsched.so.1`) comes with the first
//! stable ABI.

fn main() {
    // Only the cdylib is linked with it; the rlib and the tests are not.
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libdfsched.so");
    println!("cargo:rerun-if-changed=build.rs");
}
