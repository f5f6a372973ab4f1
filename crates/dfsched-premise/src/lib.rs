//! The one rule for a dfsched test that cannot establish its premise (no
//! compiler, not root, too few CPUs, a variable set that it must not see):
//! outside CI it says why on stderr ("SKIP test: why") and the caller
//! returns; under `CI=true` (exactly "true") it fails with that message, so
//! CI never passes a test that did not run.
//!
//! A dev-dependency of the crates whose tests skip (dfsched-rt's unit and
//! integration tests, dfsched-cli's and dfsched-bench's integration tests),
//! so that the rule is written once; their support modules re-export it.
//!
//! ```no_run
//! fn a_test_that_needs_root() {
//!     if !dfsched_premise::root_or_skip("SKIP a_test_that_needs_root: not root") {
//!         return;
//!     }
//!     // … the test proper
//! }
//! ```
#![warn(missing_docs)]

/// Says why a test returns early (`message`, "SKIP test: why"); under
/// `CI=true` a test that cannot establish its premise fails instead.
pub fn skip_or_fail(message: &str) {
    if std::env::var("CI").is_ok_and(|v| v == "true") {
        panic!("cannot run here (CI=true): {message}");
    }
    eprintln!("{message}");
}

/// Whether this test runs as (effective) root.
pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// Whether this test runs as root; when not, says `message` through
/// [`skip_or_fail`] (a failure under `CI=true`) and the caller returns.
pub fn root_or_skip(message: &str) -> bool {
    if is_root() {
        return true;
    }
    skip_or_fail(message);
    false
}
