//! The process-wide runtime behind the free functions and the C ABI, in a
//! test binary of its own (it is global state). One test, so that nothing
//! else in this process shares it.

mod common;

use common::skip_or_fail;
use dfsched::{code, sys};
use std::ffi::CStr;

#[test]
fn the_global_runtime_serves_the_free_functions_and_the_c_abi() {
    if let Some((k, v)) = std::env::vars().find(|(k, _)| k.starts_with("DFSCHED_")) {
        skip_or_fail(&format!(
            "SKIP the global runtime test: {k}={v} is set in the environment"
        ));
        return;
    }
    let rt = dfsched::global().unwrap();
    assert!(std::ptr::eq(rt, dfsched::global().unwrap()), "one runtime");
    assert_eq!(rt.config(), &dfsched::RuntimeConfig::default());

    let workers: Vec<_> = (0..4u64)
        .map(|i| {
            std::thread::spawn(move || {
                dfsched::enter(1 + i % 2).unwrap();
                dfsched::enter(1 + i % 2).unwrap();
                let mask = sys::get_affinity(0).unwrap();
                assert!(mask.is_subset(dfsched::global().unwrap().allowed()));
                dfsched::leave().unwrap();
                (sys::gettid(), mask)
            })
        })
        .collect();
    for w in workers {
        w.join().unwrap();
    }
    assert_eq!(
        dfsched::hint(999, 0, 1).unwrap_err().code(),
        code::E_UNKNOWN_APP
    );
    let app = dfsched::create_app().unwrap();
    dfsched::hint(app, 0, 3).unwrap();
    dfsched::balance_now().unwrap();

    let json: serde_json::Value = serde_json::from_str(&dfsched::stats_json()).unwrap();
    assert_eq!(json["threads_registered"], 5, "{json}");
    assert_eq!(json["threads_exited"], 4, "{json}");
    assert!(json["fast_hints"].as_u64().unwrap() >= 4, "{json}");
    assert_eq!(json["refused_calls"]["unknown_app"], 1);

    // The C ABI sees the same runtime.
    assert_eq!(dfsched::ffi::dfsched_leave(), code::OK);
    let ptr = dfsched::ffi::dfsched_stats_json();
    assert!(!ptr.is_null());
    // SAFETY: a non-NULL result is a NUL-terminated string valid until this
    // thread's next dfsched_stats_json call.
    let text = unsafe { CStr::from_ptr(ptr) }.to_str().unwrap().to_owned();
    let via_c: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(via_c["threads_registered"], 5);
    assert_eq!(dfsched::ffi::dfsched_hint(0, 42, 43), code::E_WRONG_APP);
    // SAFETY: dfsched_last_error never returns NULL and its string lives as
    // long as this thread.
    let msg = unsafe { CStr::from_ptr(dfsched::ffi::dfsched_last_error()) };
    assert!(msg.to_str().unwrap().contains("belongs to app1"), "{msg:?}");
}
