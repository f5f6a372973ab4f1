//! `libdfsched.so` under `LD_PRELOAD`: every thread of an unmodified
//! program is known to dfsched from its creation (what `dfsched run` uses).
//!
//! ```text
//!  ld.so loads libdfsched.so ─► constructor (.init_array)
//!     DFSCHED_PRELOAD=1 and this copy is a shared object?
//!       yes → ACTIVE; start the global runtime from the environment;
//!             attach the main thread
//!  program: pthread_create(t, attr, start, arg) ─► ours
//!     ACTIVE and not dfsched's own thread? → attach the creator (a no-op
//!       once attached), note its mask as dfsched set it and its allowed
//!       CPUs, then the real pthread_create(t, attr, trampoline,
//!       Box{start, arg, masks})
//!     new thread: trampoline → mask inherited from dfsched's placement of
//!       the creator? back to the creator's allowed CPUs → attach itself →
//!       start(arg)
//!     its exit: the thread-local destructor tells the runtime (thread.rs)
//! ```
//!
//! Rules:
//! - **Never break the program.** If dfsched fails (a bad `DFSCHED_*`
//!   variable, a refused placement, a panic inside dfsched), the thread runs
//!   anyway, where the kernel puts it; the failure is counted
//!   ([`attach_failures`], `preload_attach_failures` in the stats JSON) and
//!   is the thread's `dfsched_last_error()`. A runtime that cannot start is
//!   also said once on stderr, from the constructor. Only the real
//!   `pthread_create`'s own result is returned to the program.
//! - The real `pthread_create` is found once with `dlsym(RTLD_NEXT, …)` and
//!   cached.
//! - Threads dfsched creates itself (the balancer) are not attached: a
//!   thread-local flag marks their creation.
//! - A new thread inherits its creator's mask, and the creator's mask is
//!   dfsched's placement of it: left so, the new thread's allowed CPUs would
//!   be that placement for good (dfsched never widens a thread beyond the
//!   mask it found). So a thread whose mask is exactly the placement it
//!   inherited is first given back its creator's allowed CPUs; a mask the
//!   program chose (`pthread_attr_setaffinity_np`) differs and is kept.
//! - The hint API in the same process reaches the same global runtime, so
//!   a program's own hints are honoured (a hinted thread leaves the
//!   co-thread group for its DF's group).
//! - Only the copy of this code that lives in a shared object activates: the
//!   rlib linked into a Rust program holds the same constructor and
//!   `pthread_create`, which then only pass through (to the preloaded
//!   library's, if any). Such a program's own Rust hint calls go to its
//!   static copy of dfsched, not to the preloaded one: link it dynamically
//!   (or call `dfsched_hint` through the C ABI) for both to meet.
//! - Forks: see `fork.rs`. A child that `exec`s inherits `LD_PRELOAD` and the
//!   `DFSCHED_*` variables, and so the policy.
//! - **Exec.** A program keeps the mask it was exec'd with as its allowed
//!   CPUs for good. A child made by `vfork` (dash runs simple commands so)
//!   gets no fork handler: it execs with its parent thread's mask, which is
//!   dfsched's placement when dfsched placed that thread (a lone thread is
//!   placed on its CPU at once), and the new program would be confined to
//!   that CPU, its policy with nothing to choose from. So `execve`, `execv`,
//!   `execvp` and `execvpe` are interposed too: a calling thread whose mask
//!   is still dfsched's placement gets its allowed CPUs back first (the
//!   child's own mask only: a `vfork` child is a task of its own), then the
//!   real call. In a `fork` child the runtime is the parent's (see
//!   `fork.rs`) and nothing is done; the fork handler restored the mask. A
//!   `vfork` child runs on its parent thread's memory and thread-local
//!   storage; the look-up takes the runtime's mutex (held, if at all, by a
//!   parent thread that keeps running) and frees what it allocates before
//!   the exec. Not covered: the variadic `execl`, `execlp` and `execle`
//!   (a variadic function cannot be defined in stable Rust); a program
//!   they start from a placed thread keeps that thread's placement.
//! - **Spawn.** `posix_spawn`, `posix_spawnp`, `system` and `popen` create
//!   the child and exec the program inside libc (glibc's `system` and
//!   `popen` call its internal `__posix_spawn`), where no hook reaches; the
//!   child is cloned with the calling thread's mask. So these four are
//!   interposed: a calling thread whose mask is still dfsched's placement
//!   gets its allowed CPUs for the length of the real call, and afterwards
//!   the placement the runtime wants for it *then* (the balancer may have
//!   moved it meanwhile: such a move only updates its record while the
//!   call runs, so the child is never cloned narrowed). `system` waits for
//!   the command's whole life, the thread waiting with its allowed CPUs.
//!   See `runtime/spawn.rs`. The rule is the same whatever the spawn attributes:
//!   glibc has none that sets a mask, and the scheduler ones
//!   (`POSIX_SPAWN_SETSCHEDULER`, `…SETSCHEDPARAM`) set the child's policy,
//!   not its CPUs, so its mask is still the caller's. A thread dfsched
//!   did not place (unregistered, or masked by the program itself), or a
//!   process whose runtime did not start, passes straight through. The
//!   caller sees the real call's result and `errno`, whatever dfsched's
//!   steps did. Rust's `std::process::Command` uses `posix_spawnp` when it
//!   can, and `fork` + `execvp` otherwise: covered either way.
//! - **Names.** `pthread_setname_np` is interposed so that rules on
//!   thread names (`DFSCHED_RULES`, see [`crate::rules`]) see a thread's
//!   new name at once: after the real call succeeds, the runtime matches
//!   the thread again (`runtime/rules.rs`). Without rules it only passes
//!   through; the real call's result is returned either way.
//! - A thread that ends through `pthread_exit` or cancellation unwinds
//!   through the trampoline, which is why it is `extern "C-unwind"` and holds
//!   nothing that needs dropping while the program's start routine runs.

use crate::config::RuntimeConfig;
use crate::error::Error;
use dfsched_core::CpuSet;
use std::cell::Cell;
use std::ffi::{c_char, c_int, c_void};
use std::sync::atomic::{AtomicBool, AtomicPtr, Ordering};

/// A thread's start routine. `C-unwind` because `pthread_exit` and
/// cancellation unwind through it.
type StartRoutine = unsafe extern "C-unwind" fn(*mut c_void) -> *mut c_void;

/// The real `pthread_create`'s signature.
type PthreadCreate = unsafe extern "C" fn(
    *mut libc::pthread_t,
    *const libc::pthread_attr_t,
    StartRoutine,
    *mut c_void,
) -> c_int;

/// Set once by the constructor of the copy loaded as a shared object with
/// `DFSCHED_PRELOAD=1` (and an enabled configuration).
static ACTIVE: AtomicBool = AtomicBool::new(false);

/// The real `pthread_create`, resolved on first use.
static REAL_CREATE: AtomicPtr<c_void> = AtomicPtr::new(std::ptr::null_mut());

thread_local! {
    /// Set when attaching this thread failed: it is not tried again (nor
    /// counted again) at each thread it creates.
    static ATTACH_FAILED: Cell<bool> = const { Cell::new(false) };
}

/// Threads that ran unplaced because attaching them failed, in this
/// process, under `LD_PRELOAD`.
pub fn attach_failures() -> u64 {
    crate::stats::preload_attach_failures()
}

/// Whether this copy of dfsched was activated by `DFSCHED_PRELOAD=1`.
pub fn active() -> bool {
    ACTIVE.load(Ordering::Relaxed)
}

/// Attaches the calling thread to the global runtime; a failure is counted
/// once per thread and becomes the thread's last error, never a panic or an
/// abort. A thread whose attach failed is not tried again.
fn attach_quietly() {
    if ATTACH_FAILED.try_with(Cell::get).unwrap_or(true) {
        return;
    }
    let result = std::panic::catch_unwind(crate::global::attach)
        .unwrap_or_else(|_| Err(Error::Internal("panic while attaching a thread".into())));
    if let Err(e) = result {
        crate::stats::count_preload_attach_failure();
        let _ = ATTACH_FAILED.try_with(|f| f.set(true));
        crate::ffi::set_last_error(&e.to_string());
    }
}

/// The constructor's body (see the module doc). Never panics into ld.so.
fn init() {
    let _ = std::panic::catch_unwind(|| {
        for which in 0..INTERPOSED.len() {
            real_fn(which);
        }
        let wanted = std::env::var("DFSCHED_PRELOAD").is_ok_and(|v| {
            RuntimeConfig::from_vars([("DFSCHED_PRELOAD", v)]).is_ok_and(|c| c.preload)
        });
        if !wanted || !in_shared_object() {
            return;
        }
        match RuntimeConfig::for_this_process() {
            Ok(cfg) if !cfg.enabled => return,
            Ok(_) => {}
            Err(e) => {
                eprintln!("dfsched: not started, the program runs without it: {e}");
                return;
            }
        }
        ACTIVE.store(true, Ordering::Relaxed);
        if let Err(e) = crate::global() {
            eprintln!("dfsched: not started, the program runs without it: {e}");
        }
        attach_quietly();
    });
}

/// `init` as an ELF constructor: ld.so calls every pointer in
/// `.init_array` when it loads the object (glibc passes argc, argv and envp,
/// which a function of no arguments may ignore under the C ABI).
#[used]
#[link_section = ".init_array"]
static CONSTRUCTOR: extern "C" fn() = {
    extern "C" fn constructor() {
        init();
    }
    constructor
};

/// Whether this code lives in a shared object rather than in the main
/// program (the rlib statically linked into a Rust binary).
fn in_shared_object() -> bool {
    let ours = object_base(in_shared_object as *const c_void);
    // SAFETY: getauxval only reads the auxiliary vector.
    let phdr = unsafe { libc::getauxval(libc::AT_PHDR) };
    let main = object_base(phdr as *const c_void);
    ours.is_some() && ours != main
}

/// The load base of the object holding `addr`, per `dladdr`.
fn object_base(addr: *const c_void) -> Option<usize> {
    // SAFETY: Dl_info is plain data (pointers), valid when zeroed; dladdr
    // only writes it and reads no memory at `addr`.
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    // SAFETY: `info` is a live, writable Dl_info.
    let found = unsafe { libc::dladdr(addr, &mut info) } != 0;
    (found && !info.dli_fbase.is_null()).then_some(info.dli_fbase as usize)
}

/// The next `pthread_create` after ours in the lookup order: libc's (or
/// another interposer's).
fn real_create() -> Option<PthreadCreate> {
    let mut ptr = REAL_CREATE.load(Ordering::Acquire);
    if ptr.is_null() {
        // SAFETY: dlsym with RTLD_NEXT and a NUL-terminated name; it returns
        // NULL or the address of the function. Racing threads store the same
        // address.
        ptr = unsafe { libc::dlsym(libc::RTLD_NEXT, c"pthread_create".as_ptr()) };
        if ptr.is_null() {
            return None;
        }
        REAL_CREATE.store(ptr, Ordering::Release);
    }
    // SAFETY: `ptr` is the address of a function named pthread_create in a
    // library after us, which has this C signature (the start routine
    // pointer is ABI-identical whether declared C or C-unwind).
    Some(unsafe { std::mem::transmute::<*mut c_void, PthreadCreate>(ptr) })
}

/// What the trampoline needs to run the program's start routine.
struct Start {
    routine: StartRoutine,
    arg: *mut c_void,
    /// The creator's mask as dfsched set it, and its allowed CPUs, if
    /// dfsched placed it.
    inherited: Option<(CpuSet, CpuSet)>,
}

/// The calling thread's mask as dfsched set it and its allowed CPUs, if
/// the global runtime placed it.
fn creator_masks() -> Option<(CpuSet, CpuSet)> {
    std::panic::catch_unwind(|| crate::global().ok()?.masks_set_and_allowed())
        .ok()
        .flatten()
}

/// In a new thread: if its mask is the one dfsched set on its creator (it
/// inherited a placement), gives it its creator's allowed CPUs back.
fn undo_inherited_placement(inherited: Option<(CpuSet, CpuSet)>) {
    let Some((placed, allowed)) = inherited else {
        return;
    };
    if crate::sys::get_affinity(0).is_ok_and(|now| now == placed) {
        // A failure leaves the thread confined, as without this step.
        let _ = crate::sys::set_affinity(0, &allowed);
    }
}

/// The new thread's first frame when dfsched wraps it: attach, then the
/// program's routine, whose return value is the thread's.
unsafe extern "C-unwind" fn trampoline(start: *mut c_void) -> *mut c_void {
    // SAFETY: `start` is the Box<Start> our pthread_create leaked for this
    // thread alone; it is taken back exactly once, here.
    let Start {
        routine,
        arg,
        inherited,
    } = *unsafe { Box::from_raw(start.cast::<Start>()) };
    undo_inherited_placement(inherited);
    attach_quietly();
    // Nothing owned is live across this call, so a pthread_exit or a
    // cancellation may unwind through this frame.
    // SAFETY: the program gave this routine and argument to pthread_create.
    unsafe { routine(arg) }
}

/// Interposes libc's `pthread_create` (see the module doc). Returns the real
/// call's result, or `EAGAIN` if no real `pthread_create` can be found.
///
/// # Safety
/// As `pthread_create(3)`: `thread` points to writable storage, `attr` is
/// NULL or an initialized attribute object, `start` is a valid routine.
#[no_mangle]
pub unsafe extern "C" fn pthread_create(
    thread: *mut libc::pthread_t,
    attr: *const libc::pthread_attr_t,
    start: StartRoutine,
    arg: *mut c_void,
) -> c_int {
    let Some(real) = real_create() else {
        return libc::EAGAIN;
    };
    if !active() || crate::thread::spawning_internally() {
        // SAFETY: the caller's arguments, passed through unchanged.
        return unsafe { real(thread, attr, start, arg) };
    }
    // The creator too: the main thread of a forked child is attached here,
    // to the child's fresh runtime.
    attach_quietly();
    let boxed = Box::into_raw(Box::new(Start {
        routine: start,
        arg,
        inherited: creator_masks(),
    }));
    // SAFETY: the caller's `thread` and `attr`; our trampoline with the box
    // it takes back.
    let rc = unsafe { real(thread, attr, trampoline, boxed.cast()) };
    if rc != 0 {
        // No thread was created: the box is still ours.
        // SAFETY: `boxed` came from Box::into_raw above and was not handed
        // to any thread.
        drop(unsafe { Box::from_raw(boxed) });
    }
    rc
}

/// Gives the calling task its allowed CPUs back if its mask is still
/// dfsched's placement of the thread it runs as (see the module doc: exec).
/// Never starts a runtime; a failure leaves the mask as it is.
fn exec_without_placement() {
    if !active() {
        return;
    }
    let allowed = std::panic::catch_unwind(crate::global::mask_without_dfsched)
        .ok()
        .flatten();
    if let Some(allowed) = allowed {
        let _ = crate::sys::set_affinity(0, &allowed);
    }
}

/// Cached addresses of the real functions interposed besides
/// `pthread_create`, in [`INTERPOSED`] order.
static REAL: [AtomicPtr<c_void>; 9] = [const { AtomicPtr::new(std::ptr::null_mut()) }; 9];
/// The functions interposed besides `pthread_create`, by name: the exec
/// functions (indices 0–3), then those that start a program (4–7), then
/// `pthread_setname_np` (8).
const INTERPOSED: [&std::ffi::CStr; 9] = [
    c"execve",
    c"execv",
    c"execvp",
    c"execvpe",
    c"posix_spawn",
    c"posix_spawnp",
    c"system",
    c"popen",
    c"pthread_setname_np",
];

/// The next definition of function `which` (an index in [`INTERPOSED`])
/// after ours: libc's. Resolved by the constructor, so that a forked child
/// normally needs no `dlsym`; null if there is none.
fn real_fn(which: usize) -> *mut c_void {
    let mut ptr = REAL[which].load(Ordering::Acquire);
    if ptr.is_null() {
        // SAFETY: dlsym with RTLD_NEXT and a NUL-terminated name. Racing
        // threads store the same address.
        ptr = unsafe { libc::dlsym(libc::RTLD_NEXT, INTERPOSED[which].as_ptr()) };
        REAL[which].store(ptr, Ordering::Release);
    }
    ptr
}

/// The calling thread's `errno`.
fn errno() -> c_int {
    // SAFETY: __errno_location returns the calling thread's errno slot,
    // valid for the thread's life.
    unsafe { *libc::__errno_location() }
}

/// Sets the calling thread's `errno`.
fn set_errno(value: c_int) {
    // SAFETY: as in `errno`.
    unsafe { *libc::__errno_location() = value };
}

/// Runs `call` (a real function that starts a program) with the calling
/// thread's allowed CPUs lent if its mask is still dfsched's placement, and
/// gives it the runtime's placement back afterwards (see the module doc:
/// spawn). The caller sees the real call's result and `errno`, whatever
/// dfsched's steps did.
fn with_allowed_cpus<R>(call: impl FnOnce() -> R) -> R {
    if !active() {
        return call();
    }
    let saved = errno();
    let lent = std::panic::catch_unwind(crate::global::lend_allowed).unwrap_or(false);
    set_errno(saved);
    let result = call();
    if lent {
        let after = errno();
        let _ = std::panic::catch_unwind(crate::global::end_lend);
        set_errno(after);
    }
    result
}

/// `ENOSYS` as the failed call's result, when no real function exists.
fn no_exec() -> c_int {
    set_errno(libc::ENOSYS);
    -1
}

/// Interposes `execve(2)` (see the module doc: exec).
///
/// # Safety
/// As `execve(2)`.
#[no_mangle]
pub unsafe extern "C" fn execve(
    path: *const c_char,
    argv: *const *const c_char,
    envp: *const *const c_char,
) -> c_int {
    exec_without_placement();
    let real = real_fn(0);
    if real.is_null() {
        return no_exec();
    }
    type F =
        unsafe extern "C" fn(*const c_char, *const *const c_char, *const *const c_char) -> c_int;
    // SAFETY: libc's execve, with this signature; the caller's arguments.
    unsafe { std::mem::transmute::<*mut c_void, F>(real)(path, argv, envp) }
}

/// Interposes `execv(3)` (see the module doc: exec).
///
/// # Safety
/// As `execv(3)`.
#[no_mangle]
pub unsafe extern "C" fn execv(path: *const c_char, argv: *const *const c_char) -> c_int {
    exec_without_placement();
    let real = real_fn(1);
    if real.is_null() {
        return no_exec();
    }
    type F = unsafe extern "C" fn(*const c_char, *const *const c_char) -> c_int;
    // SAFETY: libc's execv, with this signature; the caller's arguments.
    unsafe { std::mem::transmute::<*mut c_void, F>(real)(path, argv) }
}

/// Interposes `execvp(3)` (see the module doc: exec).
///
/// # Safety
/// As `execvp(3)`.
#[no_mangle]
pub unsafe extern "C" fn execvp(file: *const c_char, argv: *const *const c_char) -> c_int {
    exec_without_placement();
    let real = real_fn(2);
    if real.is_null() {
        return no_exec();
    }
    type F = unsafe extern "C" fn(*const c_char, *const *const c_char) -> c_int;
    // SAFETY: libc's execvp, with this signature; the caller's arguments.
    unsafe { std::mem::transmute::<*mut c_void, F>(real)(file, argv) }
}

/// Interposes `execvpe(3)` (see the module doc: exec).
///
/// # Safety
/// As `execvpe(3)`.
#[no_mangle]
pub unsafe extern "C" fn execvpe(
    file: *const c_char,
    argv: *const *const c_char,
    envp: *const *const c_char,
) -> c_int {
    exec_without_placement();
    let real = real_fn(3);
    if real.is_null() {
        return no_exec();
    }
    type F =
        unsafe extern "C" fn(*const c_char, *const *const c_char, *const *const c_char) -> c_int;
    // SAFETY: libc's execvpe, with this signature; the caller's arguments.
    unsafe { std::mem::transmute::<*mut c_void, F>(real)(file, argv, envp) }
}

/// `posix_spawn` and `posix_spawnp`'s signature.
type PosixSpawn = unsafe extern "C" fn(
    *mut libc::pid_t,
    *const c_char,
    *const libc::posix_spawn_file_actions_t,
    *const libc::posix_spawnattr_t,
    *const *mut c_char,
    *const *mut c_char,
) -> c_int;

/// Calls the real `posix_spawn` (`which` = 4) or `posix_spawnp` (5) with
/// the calling thread's allowed CPUs lent (see the module doc: spawn);
/// `ENOSYS` if there is none.
///
/// # Safety
/// As `posix_spawn(3)`, with the caller's arguments.
unsafe fn spawn_with_allowed_cpus(
    which: usize,
    pid: *mut libc::pid_t,
    path: *const c_char,
    file_actions: *const libc::posix_spawn_file_actions_t,
    attrp: *const libc::posix_spawnattr_t,
    argv: *const *mut c_char,
    envp: *const *mut c_char,
) -> c_int {
    let real = real_fn(which);
    if real.is_null() {
        return libc::ENOSYS;
    }
    // SAFETY: libc's posix_spawn or posix_spawnp (both of this signature);
    // the caller's arguments.
    with_allowed_cpus(|| unsafe {
        std::mem::transmute::<*mut c_void, PosixSpawn>(real)(
            pid,
            path,
            file_actions,
            attrp,
            argv,
            envp,
        )
    })
}

/// Interposes `posix_spawn(3)` (see the module doc: spawn). Returns the
/// real call's result, or `ENOSYS` if there is no real `posix_spawn`.
///
/// # Safety
/// As `posix_spawn(3)`.
#[no_mangle]
pub unsafe extern "C" fn posix_spawn(
    pid: *mut libc::pid_t,
    path: *const c_char,
    file_actions: *const libc::posix_spawn_file_actions_t,
    attrp: *const libc::posix_spawnattr_t,
    argv: *const *mut c_char,
    envp: *const *mut c_char,
) -> c_int {
    // SAFETY: the caller's arguments, as posix_spawn(3) requires.
    unsafe { spawn_with_allowed_cpus(4, pid, path, file_actions, attrp, argv, envp) }
}

/// Interposes `posix_spawnp(3)` (see the module doc: spawn). Returns the
/// real call's result, or `ENOSYS` if there is no real `posix_spawnp`.
///
/// # Safety
/// As `posix_spawnp(3)`.
#[no_mangle]
pub unsafe extern "C" fn posix_spawnp(
    pid: *mut libc::pid_t,
    file: *const c_char,
    file_actions: *const libc::posix_spawn_file_actions_t,
    attrp: *const libc::posix_spawnattr_t,
    argv: *const *mut c_char,
    envp: *const *mut c_char,
) -> c_int {
    // SAFETY: the caller's arguments, as posix_spawnp(3) requires.
    unsafe { spawn_with_allowed_cpus(5, pid, file, file_actions, attrp, argv, envp) }
}

/// Interposes `system(3)` (see the module doc: spawn). The thread waits for
/// the command's whole life with its allowed CPUs, and gets its placement
/// back when it returns.
///
/// # Safety
/// As `system(3)`: `command` is NULL or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn system(command: *const c_char) -> c_int {
    let real = real_fn(6);
    if real.is_null() {
        return no_exec();
    }
    type F = unsafe extern "C" fn(*const c_char) -> c_int;
    // SAFETY: libc's system, with this signature; the caller's argument.
    with_allowed_cpus(|| unsafe { std::mem::transmute::<*mut c_void, F>(real)(command) })
}

/// Interposes `popen(3)` (see the module doc: spawn). Returns the real
/// call's stream, or NULL with `errno` `ENOSYS` if there is no real `popen`.
///
/// # Safety
/// As `popen(3)`: `command` and `mode` are NUL-terminated strings.
#[no_mangle]
pub unsafe extern "C" fn popen(command: *const c_char, mode: *const c_char) -> *mut libc::FILE {
    let real = real_fn(7);
    if real.is_null() {
        set_errno(libc::ENOSYS);
        return std::ptr::null_mut();
    }
    type F = unsafe extern "C" fn(*const c_char, *const c_char) -> *mut libc::FILE;
    // SAFETY: libc's popen, with this signature; the caller's arguments.
    with_allowed_cpus(|| unsafe { std::mem::transmute::<*mut c_void, F>(real)(command, mode) })
}

/// Interposes `pthread_setname_np(3)` (see the module doc: names). Returns
/// the real call's result, or `ENOSYS` if there is none.
///
/// # Safety
/// As `pthread_setname_np(3)`: `thread` is a live thread of this process
/// and `name` a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn pthread_setname_np(thread: libc::pthread_t, name: *const c_char) -> c_int {
    let real = real_fn(8);
    if real.is_null() {
        return libc::ENOSYS;
    }
    type F = unsafe extern "C" fn(libc::pthread_t, *const c_char) -> c_int;
    // SAFETY: libc's pthread_setname_np, with this signature; the caller's
    // arguments.
    let rc = unsafe { std::mem::transmute::<*mut c_void, F>(real)(thread, name) };
    if rc == 0 && active() {
        let saved = errno();
        // pthread_t is an unsigned long: u64 here, u32 on 32-bit targets.
        #[allow(clippy::useless_conversion)]
        let pthread = u64::from(thread);
        let _ = std::panic::catch_unwind(|| crate::global::thread_renamed(pthread));
        set_errno(saved);
    }
    rc
}
