//! The C ABI of `libdfsched.so`, declared in `include/dfsched.h`. Every
//! function works on the global runtime ([`crate::global`]).
//!
//! Invariants:
//! - no panic crosses into C: every body runs inside `catch_unwind`, and a
//!   panic becomes `DFSCHED_E_INTERNAL` with its message as the last error;
//! - every failing call sets the calling thread's last-error string, which
//!   [`dfsched_last_error`] returns; successful calls leave it alone;
//! - returned strings live in thread-local buffers: valid until the same
//!   thread's next call of the same function (or its exit), never freed by
//!   the caller. Thread-locals may already be gone when a call comes from
//!   another thread-local destructor: then `dfsched_stats_json` returns NULL
//!   and `dfsched_last_error` an empty string, never a crash.

use crate::error::{code, Error};
use std::cell::RefCell;
use std::ffi::{c_char, c_int, CStr, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};

thread_local! {
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
    static STATS_JSON: RefCell<CString> = RefCell::new(CString::default());
}

/// `text` as a C string; interior NULs (impossible in our messages, but
/// cheap to guard) become `?`.
fn c_string(text: &str) -> CString {
    CString::new(text.replace('\0', "?")).unwrap_or_default()
}

fn set_last_error(message: &str) {
    let message = c_string(message);
    let _ = LAST_ERROR.try_with(|slot| {
        if let Ok(mut slot) = slot.try_borrow_mut() {
            *slot = message;
        }
    });
}

fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "a panic with a non-string payload".into()
    }
}

/// Runs `f`, mapping its error or panic to a code and the last error.
fn guarded(f: impl FnOnce() -> Result<(), Error>) -> c_int {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(())) => code::OK,
        Ok(Err(e)) => {
            set_last_error(&e.to_string());
            e.code()
        }
        Err(payload) => {
            let e = Error::Internal(format!("panic: {}", panic_message(&*payload)));
            set_last_error(&e.to_string());
            e.code()
        }
    }
}

/// Starts the global runtime now, so a bad configuration shows at start-up
/// rather than at the first hint. Optional: every call starts it.
#[no_mangle]
pub extern "C" fn dfsched_init() -> c_int {
    guarded(|| crate::global().map(|_| ()))
}

/// The paper's call; see [`crate::Runtime::hint`].
#[no_mangle]
pub extern "C" fn dfsched_hint(app: u64, cur_df: u64, next_df: u64) -> c_int {
    guarded(|| crate::hint(app, cur_df, next_df))
}

/// See [`crate::Runtime::enter`].
#[no_mangle]
pub extern "C" fn dfsched_enter(df: u64) -> c_int {
    guarded(|| crate::enter(df))
}

/// See [`crate::Runtime::leave`].
#[no_mangle]
pub extern "C" fn dfsched_leave() -> c_int {
    guarded(crate::leave)
}

/// Creates an application and stores its id in `*out`.
///
/// # Safety
/// `out` must be NULL (refused with `DFSCHED_E_INVALID_ARG`) or point to a
/// writable, aligned `uint64_t`.
#[no_mangle]
pub unsafe extern "C" fn dfsched_app_create(out: *mut u64) -> c_int {
    guarded(|| {
        if out.is_null() {
            return Err(Error::InvalidArgument(
                "dfsched_app_create: out is NULL".into(),
            ));
        }
        let id = crate::global::create_app()?;
        // SAFETY: `out` is not NULL (checked above) and the caller promises
        // it points to a writable, aligned uint64_t.
        unsafe { out.write(id) };
        Ok(())
    })
}

/// See [`crate::Runtime::balance_now`].
#[no_mangle]
pub extern "C" fn dfsched_balance_now() -> c_int {
    guarded(crate::global::balance_now)
}

/// The global runtime's counters as JSON, or NULL on failure (see
/// [`dfsched_last_error`]). The string is valid until this thread's next
/// `dfsched_stats_json` call or its exit; do not free it.
#[no_mangle]
pub extern "C" fn dfsched_stats_json() -> *const c_char {
    let result = catch_unwind(|| {
        let json = crate::global()?.stats_json();
        STATS_JSON
            .try_with(|slot| {
                let mut slot = slot
                    .try_borrow_mut()
                    .map_err(|_| Error::Internal("stats buffer busy".into()))?;
                *slot = c_string(&json);
                Ok(slot.as_ptr())
            })
            .unwrap_or(Err(Error::ThreadExiting))
    });
    match result {
        Ok(Ok(ptr)) => ptr,
        Ok(Err(e)) => {
            set_last_error(&e.to_string());
            std::ptr::null()
        }
        Err(payload) => {
            set_last_error(&format!("panic: {}", panic_message(&*payload)));
            std::ptr::null()
        }
    }
}

/// The message of this thread's most recent failed call, or an empty
/// string. Valid until this thread's next failing call or its exit; do not
/// free it. Never NULL.
#[no_mangle]
pub extern "C" fn dfsched_last_error() -> *const c_char {
    static EMPTY: &CStr = c"";
    catch_unwind(|| {
        LAST_ERROR
            .try_with(|slot| slot.try_borrow().map(|s| s.as_ptr()).ok())
            .ok()
            .flatten()
    })
    .ok()
    .flatten()
    .unwrap_or(EMPTY.as_ptr())
}

/// A static description of an error code. Never NULL; do not free it.
#[no_mangle]
pub extern "C" fn dfsched_strerror(code: c_int) -> *const c_char {
    code::describe_c(code).as_ptr()
}
