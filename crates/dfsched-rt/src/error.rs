//! The runtime's one error type, and the stable negative codes the C ABI
//! returns for it.
//!
//! Invariants:
//! - every [`Error`] maps to exactly one code in [`code`], and every code has
//!   a `#define` of the same name and value in `include/dfsched.h` (a test
//!   reads the header and compares);
//! - codes never change meaning once released: new failures get new codes;
//! - `Error` is `Clone` (it holds errnos and strings, not `io::Error`), so the
//!   global runtime can hand the same start-up failure to every later caller.

use dfsched_core::{CoreError, CpuSet, TopologyError};
use std::path::PathBuf;

/// The C error codes. `0` is success; every failure is negative.
///
/// The names and values are mirrored by `#define`s in `include/dfsched.h`.
pub mod code {
    /// Success.
    pub const OK: i32 = 0;
    /// A panic or a broken invariant inside dfsched (a bug). The runtime
    /// may refuse further calls.
    pub const E_INTERNAL: i32 = -1;
    /// A NULL pointer or an out-of-range argument.
    pub const E_INVALID_ARG: i32 = -2;
    /// A bad `DFSCHED_*` environment variable or [`crate::RuntimeConfig`];
    /// the runtime did not start and nothing of the configuration applies.
    pub const E_CONFIG: i32 = -3;
    /// The sysfs topology is missing or garbled (the message names the file),
    /// or its domains do not nest.
    pub const E_TOPOLOGY: i32 = -4;
    /// The allowed CPUs hold no CPU of the topology.
    pub const E_NO_CPU: i32 = -5;
    /// A hint names an application that was never created.
    pub const E_UNKNOWN_APP: i32 = -6;
    /// A hint names another application than the thread's own.
    pub const E_WRONG_APP: i32 = -7;
    /// A hint's current DF is not the thread's current DF (for example a DF
    /// switch from a thread that never hinted).
    pub const E_NOT_IN_DF: i32 = -8;
    /// The engine refused the event for another reason (for example a
    /// thread that dfsched had already dropped).
    pub const E_REFUSED: i32 = -9;
    /// `sched_setaffinity` failed with `EPERM`; the thread stays where it is.
    pub const E_PERM: i32 = -10;
    /// `sched_setaffinity` failed with `EINVAL` even after re-reading the
    /// thread's allowed CPUs; the thread stays where it is.
    pub const E_INVAL: i32 = -11;
    /// The thread is gone (`ESRCH`).
    pub const E_NO_THREAD: i32 = -12;
    /// Another system call failure; the message carries the errno.
    pub const E_OS: i32 = -13;
    /// Reading a file under `/proc` failed.
    pub const E_IO: i32 = -14;
    /// The runtime was shut down.
    pub const E_SHUT_DOWN: i32 = -15;
    /// The calling thread is exiting (its thread-local state is gone).
    pub const E_THREAD_EXITING: i32 = -16;

    /// Every code with its C name, for the header test and `dfsched_strerror`.
    pub const ALL: &[(&str, i32)] = &[
        ("DFSCHED_OK", OK),
        ("DFSCHED_E_INTERNAL", E_INTERNAL),
        ("DFSCHED_E_INVALID_ARG", E_INVALID_ARG),
        ("DFSCHED_E_CONFIG", E_CONFIG),
        ("DFSCHED_E_TOPOLOGY", E_TOPOLOGY),
        ("DFSCHED_E_NO_CPU", E_NO_CPU),
        ("DFSCHED_E_UNKNOWN_APP", E_UNKNOWN_APP),
        ("DFSCHED_E_WRONG_APP", E_WRONG_APP),
        ("DFSCHED_E_NOT_IN_DF", E_NOT_IN_DF),
        ("DFSCHED_E_REFUSED", E_REFUSED),
        ("DFSCHED_E_PERM", E_PERM),
        ("DFSCHED_E_INVAL", E_INVAL),
        ("DFSCHED_E_NO_THREAD", E_NO_THREAD),
        ("DFSCHED_E_OS", E_OS),
        ("DFSCHED_E_IO", E_IO),
        ("DFSCHED_E_SHUT_DOWN", E_SHUT_DOWN),
        ("DFSCHED_E_THREAD_EXITING", E_THREAD_EXITING),
    ];

    /// A one-line description of `code`, for `dfsched_strerror`.
    pub fn describe(code: i32) -> &'static str {
        describe_c(code).to_str().unwrap_or("")
    }

    /// [`describe`] as a C string with static lifetime.
    pub fn describe_c(code: i32) -> &'static std::ffi::CStr {
        match code {
            OK => c"success",
            E_INTERNAL => c"internal error in dfsched",
            E_INVALID_ARG => c"invalid argument",
            E_CONFIG => c"bad dfsched configuration",
            E_TOPOLOGY => c"cannot read the CPU topology",
            E_NO_CPU => c"no allowed CPU in the topology",
            E_UNKNOWN_APP => c"unknown application",
            E_WRONG_APP => c"the thread belongs to another application",
            E_NOT_IN_DF => c"the thread is not in the DF it claims to leave",
            E_REFUSED => c"refused by the engine",
            E_PERM => c"not permitted to set the thread's CPU affinity",
            E_INVAL => c"the CPU affinity was refused as invalid",
            E_NO_THREAD => c"no such thread",
            E_OS => c"system call failed",
            E_IO => c"cannot read /proc",
            E_SHUT_DOWN => c"the dfsched runtime is shut down",
            E_THREAD_EXITING => c"the calling thread is exiting",
            _ => c"unknown dfsched error code",
        }
    }
}

/// Which affinity call failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AffinityOp {
    /// `sched_getaffinity`.
    Get,
    /// `sched_setaffinity`.
    Set,
    /// `sched_setscheduler(SCHED_EXT)` (the sched_ext body, see `crate::scx`).
    SetSchedExt,
}

impl std::fmt::Display for AffinityOp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            AffinityOp::Get => "sched_getaffinity",
            AffinityOp::Set => "sched_setaffinity",
            AffinityOp::SetSchedExt => "sched_setscheduler(SCHED_EXT)",
        })
    }
}

/// Everything that can go wrong in the runtime. See [`Error::code`] for the
/// C code of each.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// A `DFSCHED_*` variable has a bad name or value. Nothing of the
    /// environment's configuration was applied.
    #[error("environment variable {var}={value:?}: {reason}")]
    Env {
        /// The variable's name.
        var: String,
        /// Its value as given.
        value: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A [`crate::RuntimeConfig`] field is out of range.
    #[error("bad configuration: {0}")]
    Config(String),
    /// A sysfs file is missing or garbled.
    #[error("cannot read the CPU topology: {}: {reason}", path.display())]
    Sysfs {
        /// The file (or directory).
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// The cache domains read from sysfs do not form a tree.
    #[error("cannot build the CPU topology: {0}")]
    Topology(#[from] TopologyError),
    /// No allowed CPU is in the topology.
    #[error("the allowed CPUs {allowed} hold no CPU of the topology ({topology})")]
    NoUsableCpu {
        /// The allowed CPUs.
        allowed: CpuSet,
        /// The topology's CPUs.
        topology: CpuSet,
    },
    /// The engine refused an event; nothing changed in it.
    #[error("{0}")]
    Refused(#[from] CoreError),
    /// An affinity system call failed.
    #[error("{op}(tid {tid}) failed: {}", errno_text(*.errno))]
    Affinity {
        /// Which call.
        op: AffinityOp,
        /// The thread (0 = the calling thread).
        tid: u64,
        /// The errno.
        errno: i32,
    },
    /// Another system call failed.
    #[error("{call} failed: {}", errno_text(*.errno))]
    Os {
        /// The call.
        call: &'static str,
        /// The errno.
        errno: i32,
    },
    /// Reading a `/proc` file failed.
    #[error("cannot read {}: {reason}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// The runtime was shut down; it no longer places threads.
    #[error("the dfsched runtime is shut down")]
    ShutDown,
    /// The calling thread is exiting: its thread-local state was destroyed,
    /// so it can no longer hint.
    #[error("the calling thread is exiting; it can no longer hint")]
    ThreadExiting,
    /// A NULL pointer or another bad argument.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// A panic or a broken invariant inside dfsched.
    #[error("internal error in dfsched: {0}")]
    Internal(String),
}

impl Error {
    /// The stable negative C code of this error (see [`code`]).
    pub fn code(&self) -> i32 {
        match self {
            Error::Env { .. } | Error::Config(_) => code::E_CONFIG,
            Error::Sysfs { .. } | Error::Topology(_) => code::E_TOPOLOGY,
            Error::NoUsableCpu { .. } => code::E_NO_CPU,
            Error::Refused(core) => match core {
                CoreError::UnknownApp(_) => code::E_UNKNOWN_APP,
                CoreError::WrongApp { .. } => code::E_WRONG_APP,
                CoreError::NotInDf { .. } => code::E_NOT_IN_DF,
                CoreError::NoAllowedCpu(_) => code::E_NO_CPU,
                // The core may add variants; they are refusals all the same.
                _ => code::E_REFUSED,
            },
            Error::Affinity { errno, .. } => match *errno {
                libc::EPERM => code::E_PERM,
                libc::EINVAL => code::E_INVAL,
                libc::ESRCH => code::E_NO_THREAD,
                _ => code::E_OS,
            },
            Error::Os { .. } => code::E_OS,
            Error::Io { .. } => code::E_IO,
            Error::ShutDown => code::E_SHUT_DOWN,
            Error::ThreadExiting => code::E_THREAD_EXITING,
            Error::InvalidArgument(_) => code::E_INVALID_ARG,
            Error::Internal(_) => code::E_INTERNAL,
        }
    }

    /// The errno of a failed system call, if this is one.
    pub fn errno(&self) -> Option<i32> {
        match self {
            Error::Affinity { errno, .. } | Error::Os { errno, .. } => Some(*errno),
            _ => None,
        }
    }
}

/// `"EPERM (Operation not permitted)"`-style text for an errno.
fn errno_text(errno: i32) -> String {
    let name = match errno {
        libc::EPERM => "EPERM",
        libc::ESRCH => "ESRCH",
        libc::EINVAL => "EINVAL",
        libc::EFAULT => "EFAULT",
        libc::ENOMEM => "ENOMEM",
        libc::EAGAIN => "EAGAIN",
        _ => "errno",
    };
    format!(
        "{name} {errno} ({})",
        std::io::Error::from_raw_os_error(errno)
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use dfsched_core::{AppId, DfId, TaskId};

    #[test]
    fn codes_are_distinct_negative_and_described() {
        let mut seen = std::collections::BTreeSet::new();
        for &(name, value) in code::ALL {
            assert!(seen.insert(value), "{name} reuses code {value}");
            assert!(value <= 0);
            assert_ne!(code::describe(value), code::describe(1), "{name}");
        }
    }

    #[test]
    fn errors_map_to_their_codes() {
        let aff = |errno| Error::Affinity {
            op: AffinityOp::Set,
            tid: 7,
            errno,
        };
        assert_eq!(aff(libc::EPERM).code(), code::E_PERM);
        assert_eq!(aff(libc::EINVAL).code(), code::E_INVAL);
        assert_eq!(aff(libc::ESRCH).code(), code::E_NO_THREAD);
        assert_eq!(aff(libc::EFAULT).code(), code::E_OS);
        assert_eq!(
            Error::from(CoreError::UnknownApp(AppId(9))).code(),
            code::E_UNKNOWN_APP
        );
        let not_in = CoreError::NotInDf {
            task: TaskId(1),
            claimed: Some(DfId(2)),
            actual: None,
        };
        assert_eq!(Error::from(not_in).code(), code::E_NOT_IN_DF);
        assert_eq!(
            Error::from(CoreError::UnknownTask(TaskId(1))).code(),
            code::E_REFUSED
        );
        assert_eq!(Error::ShutDown.code(), code::E_SHUT_DOWN);
    }

    #[test]
    fn affinity_errors_name_the_call_and_errno() {
        let e = Error::Affinity {
            op: AffinityOp::Set,
            tid: 42,
            errno: libc::EPERM,
        };
        let text = e.to_string();
        assert!(text.contains("sched_setaffinity(tid 42)"), "{text}");
        assert!(text.contains("EPERM"), "{text}");
        assert_eq!(e.errno(), Some(libc::EPERM));
    }
}
