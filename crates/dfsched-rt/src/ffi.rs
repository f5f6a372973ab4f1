//! The C ABI of `libdfsched.so`, declared in `include/dfsched.h`. Every
//! function works on the global runtime ([`crate::global`]).
//!
//! Invariants:
//! - no panic crosses into C: every body runs inside `catch_unwind`, and a
//!   panic becomes `DFSCHED_E_INTERNAL` with its message as the last error;
//! - every failing call sets the calling thread's last-error string, which
//!   [`dfsched_last_error`] returns; successful calls leave it alone;
//! - returned strings live in thread-local buffers and are never freed by
//!   the caller: the stats JSON until the same thread's next
//!   `dfsched_stats_json` (or its exit); the last error in a fixed buffer
//!   that never moves, valid for the thread's lifetime. Thread-locals may
//!   already be gone when a call comes from another thread-local destructor:
//!   then `dfsched_stats_json` returns NULL and `dfsched_last_error` an empty
//!   string, never a crash.

use crate::error::{code, Error};
use std::cell::RefCell;
use std::ffi::{c_char, c_int, CStr, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};

/// Bytes of a last-error message kept, with its terminating NUL; longer
/// messages are cut at a character boundary.
const LAST_ERROR_BYTES: usize = 1024;

thread_local! {
    /// The calling thread's last error, NUL-terminated, in a buffer that
    /// never moves: a pointer from `dfsched_last_error` stays readable for
    /// the thread's lifetime and always shows the latest message.
    static LAST_ERROR: RefCell<[u8; LAST_ERROR_BYTES]> = const { RefCell::new([0; LAST_ERROR_BYTES]) };
    static STATS_JSON: RefCell<CString> = RefCell::new(CString::default());
}

/// `text` as a C string; interior NULs (impossible in our messages, but
/// cheap to guard) become `?`.
fn c_string(text: &str) -> CString {
    CString::new(text.replace('\0', "?")).unwrap_or_default()
}

/// Copies `message` into `buf` as a C string, cut to fit at a character
/// boundary.
fn fill_c_buffer(buf: &mut [u8], message: &str) {
    let mut end = message.len().min(buf.len() - 1);
    while !message.is_char_boundary(end) {
        end -= 1;
    }
    for (dst, src) in buf.iter_mut().zip(message[..end].bytes()) {
        *dst = if src == 0 { b'?' } else { src };
    }
    buf[end] = 0;
}

pub(crate) fn set_last_error(message: &str) {
    let _ = LAST_ERROR.try_with(|slot| {
        if let Ok(mut buf) = slot.try_borrow_mut() {
            fill_c_buffer(&mut buf[..], message);
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

/// See [`crate::Runtime::attach`]: registers the calling thread with no
/// hint, so the policy places it.
#[no_mangle]
pub extern "C" fn dfsched_attach() -> c_int {
    guarded(crate::global::attach)
}

/// See [`crate::Runtime::leave`].
#[no_mangle]
pub extern "C" fn dfsched_leave() -> c_int {
    guarded(crate::leave)
}

/// See [`crate::Runtime::df_size`]: declares DF `df`'s size in bytes
/// (recorded for `dfsched sim replay`; no placement changes).
#[no_mangle]
pub extern "C" fn dfsched_df_size(df: u64, bytes: u64) -> c_int {
    guarded(|| crate::global::df_size(df, bytes))
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
/// string. The pointer stays valid for the thread's lifetime and always
/// shows the latest message; do not free it. Never NULL.
#[no_mangle]
pub extern "C" fn dfsched_last_error() -> *const c_char {
    static EMPTY: &CStr = c"";
    // The buffer lives as long as the thread and never moves, so handing
    // out its address is sound; it is NUL-terminated (zeroed at start, and
    // `fill_c_buffer` always writes a NUL).
    catch_unwind(|| {
        LAST_ERROR
            .try_with(|slot| slot.as_ptr().cast::<c_char>().cast_const())
            .ok()
    })
    .ok()
    .flatten()
    .unwrap_or(EMPTY.as_ptr())
}

/// A static description of an error code. Never NULL; do not free it.
#[no_mangle]
pub extern "C" fn dfsched_strerror(code: c_int) -> *const c_char {
    catch_unwind(|| code::describe_c(code).as_ptr()).unwrap_or(c"".as_ptr())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn last_error() -> String {
        // SAFETY: dfsched_last_error returns a NUL-terminated string that
        // lives as long as this thread.
        unsafe { CStr::from_ptr(dfsched_last_error()) }
            .to_string_lossy()
            .into_owned()
    }

    #[test]
    fn a_panic_becomes_an_internal_error_not_an_unwind() {
        std::thread::spawn(|| {
            assert_eq!(last_error(), "");
            let rc = guarded(|| panic!("boom in the engine"));
            assert_eq!(rc, code::E_INTERNAL);
            assert!(
                last_error().contains("boom in the engine"),
                "{}",
                last_error()
            );
        })
        .join()
        .unwrap();
    }

    #[test]
    fn errors_set_the_last_error_and_success_keeps_it() {
        std::thread::spawn(|| {
            let ptr = dfsched_last_error();
            assert_eq!(guarded(|| Err(Error::ShutDown)), code::E_SHUT_DOWN);
            assert_eq!(last_error(), Error::ShutDown.to_string());
            assert_eq!(guarded(|| Ok(())), code::OK);
            assert_eq!(last_error(), Error::ShutDown.to_string());
            assert_eq!(dfsched_last_error(), ptr, "the buffer never moves");
        })
        .join()
        .unwrap();
    }

    #[test]
    fn long_messages_are_cut_at_a_character_boundary() {
        let mut buf = [0xffu8; 8];
        fill_c_buffer(&mut buf, "ab\u{e9}\u{e9}\u{e9}xyz");
        // "ab" + two 2-byte characters fit in 7 bytes? 2 + 2 + 2 = 6; the
        // third would end at 8 > 7.
        assert_eq!(&buf[..7], b"ab\xc3\xa9\xc3\xa9\0");
        let mut buf = [0xffu8; 4];
        fill_c_buffer(&mut buf, "a\0b");
        assert_eq!(&buf, b"a?b\0");
    }

    #[test]
    fn app_create_refuses_a_null_pointer() {
        // SAFETY: NULL is allowed and refused.
        let rc = unsafe { dfsched_app_create(std::ptr::null_mut()) };
        assert_eq!(rc, code::E_INVALID_ARG);
        assert!(last_error().contains("NULL"));
    }

    #[test]
    fn strerror_describes_every_code() {
        for &(_, c) in code::ALL {
            // SAFETY: dfsched_strerror returns a static NUL-terminated string.
            let text = unsafe { CStr::from_ptr(dfsched_strerror(c)) };
            assert_eq!(text.to_str().unwrap(), code::describe(c));
        }
    }
}
