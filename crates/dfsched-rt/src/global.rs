//! The process-wide default runtime behind the C ABI and the free functions.
//!
//! It starts on first use, configured from the `DFSCHED_*` environment (see
//! [`crate::config`]). The outcome is kept: if the environment is bad, every
//! later call fails with the same [`Error`] (code `DFSCHED_E_CONFIG`) and
//! nothing of it is applied; the program goes on, its threads where the
//! kernel puts them. The runtime lives until the process exits (a `static`
//! is never dropped), so its balancer thread does too.

use crate::config::RuntimeConfig;
use crate::error::Error;
use crate::runtime::Runtime;
use std::sync::OnceLock;

static GLOBAL: OnceLock<Result<Runtime, Error>> = OnceLock::new();

/// The process-wide default runtime, started on first use from the
/// environment.
pub fn global() -> Result<&'static Runtime, Error> {
    GLOBAL
        .get_or_init(|| RuntimeConfig::from_env().and_then(Runtime::start))
        .as_ref()
        .map_err(Clone::clone)
}

/// [`Runtime::hint`] on the global runtime.
pub fn hint(app: u64, cur_df: u64, next_df: u64) -> Result<(), Error> {
    global()?.hint(app, cur_df, next_df)
}

/// [`Runtime::enter`] on the global runtime.
pub fn enter(df: u64) -> Result<(), Error> {
    global()?.enter(df)
}

/// [`Runtime::leave`] on the global runtime.
pub fn leave() -> Result<(), Error> {
    global()?.leave()
}

/// [`Runtime::create_app`] on the global runtime.
pub fn create_app() -> Result<u64, Error> {
    global()?.create_app()
}

/// [`Runtime::balance_now`] on the global runtime.
pub fn balance_now() -> Result<(), Error> {
    global()?.balance_now()
}

/// [`Runtime::stats_json`] of the global runtime, or `{"error": "…"}` if it
/// could not start.
pub fn stats_json() -> String {
    match global() {
        Ok(rt) => rt.stats_json(),
        Err(e) => serde_json::json!({ "error": e.to_string(), "code": e.code() }).to_string(),
    }
}
