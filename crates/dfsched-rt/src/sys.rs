//! The few Linux system calls dfsched makes: thread ids, CPU affinity, the
//! current CPU. Every `unsafe` block in the crate that touches the kernel is
//! here, small, with a `// SAFETY:` comment.
//!
//! The runtime reaches affinity through the [`SysOps`] trait rather than the
//! free functions, so that tests can inject failures the machine cannot
//! produce on demand (`EPERM` for a root user, `EINVAL` from a cpuset that
//! changed under us, `ESRCH` from a thread that exited between a hint and its
//! placement). [`RealSys`] is the only implementation outside tests.
//!
//! Invariant: a kernel CPU mask is an array of `unsigned long`, bit `i % 64`
//! of word `i / 64` being CPU `i`; on the 64-bit targets this crate builds
//! for, that is exactly [`CpuSet::as_words`], so masks cross without
//! conversion.

use crate::error::{AffinityOp, Error};
use dfsched_core::{CpuId, CpuSet};

#[cfg(not(all(target_os = "linux", target_pointer_width = "64")))]
compile_error!(
    "dfsched-rt supports 64-bit Linux only (CPU masks are handed to the kernel as u64 words)"
);

/// Words in the first affinity buffer: 1024 CPUs, glibc's `CPU_SETSIZE`.
const FIRST_MASK_WORDS: usize = 16;
/// The largest buffer tried: 65536 CPUs, [`dfsched_core::cpuset::MAX_CPUS`].
const MAX_MASK_WORDS: usize = 1024;

/// The calling thread's kernel thread id.
pub fn gettid() -> u64 {
    // SAFETY: gettid takes no arguments, touches no memory and cannot fail.
    let tid = unsafe { libc::syscall(libc::SYS_gettid) };
    tid as u64
}

/// The calling thread's name as the kernel keeps it (`comm`, at most 15
/// bytes), without a file read.
pub fn own_thread_name() -> Option<String> {
    let mut buf = [0u8; 17];
    // SAFETY: PR_GET_NAME writes at most 16 bytes (the name and its NUL)
    // into the buffer, which has 17 and stays alive across the call.
    let rc = unsafe { libc::prctl(libc::PR_GET_NAME, buf.as_mut_ptr()) };
    if rc != 0 {
        return None;
    }
    let len = buf.iter().position(|b| *b == 0).unwrap_or(16);
    Some(String::from_utf8_lossy(&buf[..len]).into_owned())
}

/// Thread `tid`'s name (`/proc/PID/task/TID/comm`; the calling thread's
/// own by `prctl`), if it can be read.
pub fn thread_name(pid: u32, tid: u64) -> Option<String> {
    if pid == std::process::id() && tid == gettid() {
        return own_thread_name();
    }
    std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/comm"))
        .ok()
        .map(|s| s.trim_end_matches('\n').to_string())
}

/// Converts a thread id to the kernel's `pid_t`, refusing ids it cannot name.
fn pid_of(op: AffinityOp, tid: u64) -> Result<libc::pid_t, Error> {
    libc::pid_t::try_from(tid).map_err(|_| Error::Affinity {
        op,
        tid,
        errno: libc::ESRCH,
    })
}

fn last_errno() -> i32 {
    std::io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EIO)
}

/// The CPUs thread `tid` may run on (`tid` 0 = the calling thread), as
/// `sched_getaffinity` reports them.
pub fn get_affinity(tid: u64) -> Result<CpuSet, Error> {
    let pid = pid_of(AffinityOp::Get, tid)?;
    let mut small = [0u64; FIRST_MASK_WORDS];
    match getaffinity_into(pid, &mut small) {
        Ok(()) => return Ok(CpuSet::from_words(&small)),
        // A kernel built for more CPUs than the buffer holds answers EINVAL:
        // retry with larger buffers.
        Err(libc::EINVAL) => {}
        Err(errno) => {
            return Err(Error::Affinity {
                op: AffinityOp::Get,
                tid,
                errno,
            })
        }
    }
    let mut words = FIRST_MASK_WORDS * 2;
    loop {
        let mut big = vec![0u64; words];
        match getaffinity_into(pid, &mut big) {
            Ok(()) => return Ok(CpuSet::from_words(&big)),
            Err(libc::EINVAL) if words < MAX_MASK_WORDS => words *= 2,
            Err(errno) => {
                return Err(Error::Affinity {
                    op: AffinityOp::Get,
                    tid,
                    errno,
                })
            }
        }
    }
}

fn getaffinity_into(pid: libc::pid_t, buf: &mut [u64]) -> Result<(), i32> {
    let bytes = std::mem::size_of_val(buf);
    // SAFETY: `buf` is a live, writable buffer of exactly `bytes` bytes, and
    // the kernel writes at most `bytes` bytes of mask into it (glibc zeroes
    // the rest of those bytes). glibc only passes the pointer through, so its
    // type (`cpu_set_t`) does not need to match the buffer's length.
    let rc = unsafe { libc::sched_getaffinity(pid, bytes, buf.as_mut_ptr().cast()) };
    if rc == 0 {
        Ok(())
    } else {
        Err(last_errno())
    }
}

/// Lets thread `tid` (0 = the calling thread) run only on `cpus`.
///
/// An empty set is refused with `EINVAL` without a system call, as the
/// kernel would.
pub fn set_affinity(tid: u64, cpus: &CpuSet) -> Result<(), Error> {
    let pid = pid_of(AffinityOp::Set, tid)?;
    let words = cpus.as_words();
    let words: &[u64] = &words;
    if words.is_empty() {
        return Err(Error::Affinity {
            op: AffinityOp::Set,
            tid,
            errno: libc::EINVAL,
        });
    }
    let bytes = std::mem::size_of_val(words);
    // SAFETY: `words` is a live, readable buffer of exactly `bytes` bytes; the
    // kernel only reads `bytes` bytes from it (a shorter mask than its own is
    // zero-extended). glibc passes the pointer through unchanged.
    let rc = unsafe { libc::sched_setaffinity(pid, bytes, words.as_ptr().cast()) };
    if rc == 0 {
        Ok(())
    } else {
        Err(Error::Affinity {
            op: AffinityOp::Set,
            tid,
            errno: last_errno(),
        })
    }
}

/// `SCHED_EXT` (include/uapi/linux/sched.h, Linux 6.12): the policy of threads scheduled by the
/// loaded sched_ext scheduler. Not in the libc crate yet.
pub const SCHED_EXT: libc::c_int = 7;

/// Gives thread `tid` (0 = the calling thread) the `SCHED_EXT` policy, so that a sched_ext
/// scheduler in partial mode schedules it (see [`crate::scx`]). Any thread may set it on itself and
/// on threads of its own uid: it is not a real-time policy. On a kernel without sched_ext it fails
/// with `EINVAL`; while no sched_ext scheduler is loaded the thread stays on the default scheduler.
pub fn set_sched_ext(tid: u64) -> Result<(), Error> {
    let pid = pid_of(AffinityOp::SetSchedExt, tid)?;
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: `param` is a live sched_param the kernel only reads; `pid` is a tid or 0.
    let rc = unsafe { libc::sched_setscheduler(pid, SCHED_EXT, &param) };
    if rc == 0 {
        Ok(())
    } else {
        Err(Error::Affinity {
            op: AffinityOp::SetSchedExt,
            tid,
            errno: last_errno(),
        })
    }
}

/// `CLOSE_RANGE_CLOEXEC` (linux/close_range.h, Linux 5.11): mark the range
/// close-on-exec instead of closing it now.
const CLOSE_RANGE_CLOEXEC: libc::c_uint = 1 << 2;

/// Makes `cmd`'s child start with no file descriptor but 0, 1 and 2: every
/// descriptor from 3 up that it inherits is marked close-on-exec between
/// fork and exec. For a daemon (the agent) started from a program whose
/// caller may hold a pipe open and wait for its end: an inherited write end
/// would keep that caller waiting for as long as the daemon lives.
///
/// Marked rather than closed, so that the pipe `std` uses to report a failed
/// `exec` (already close-on-exec) keeps working. A kernel without
/// `close_range` (before 5.11) leaves the descriptors as they were.
pub(crate) fn start_without_inherited_fds(cmd: &mut std::process::Command) {
    use std::os::unix::process::CommandExt;
    // SAFETY: the closure runs in the forked child before exec, where only
    // async-signal-safe calls are allowed: it makes one system call with
    // integer arguments, allocates nothing and takes no lock.
    unsafe {
        cmd.pre_exec(|| {
            libc::syscall(
                libc::SYS_close_range,
                3 as libc::c_uint,
                libc::c_uint::MAX,
                CLOSE_RANGE_CLOEXEC,
            );
            Ok(())
        });
    }
}

/// The CPU the calling thread runs on right now (`sched_getcpu`); it may
/// have moved by the time the caller looks.
pub fn current_cpu() -> Option<CpuId> {
    // SAFETY: sched_getcpu takes no arguments and touches no caller memory.
    let cpu = unsafe { libc::sched_getcpu() };
    u32::try_from(cpu).ok().map(CpuId)
}

/// `CPUCLOCK_PERTHREAD_MASK | CPUCLOCK_SCHED` (include/linux/posix-timers.h):
/// the low bits of a clock id naming one thread's CPU time as the
/// scheduler counts it (`sum_exec_runtime` plus the slice running now).
const THREAD_SCHED_CLOCK: libc::clockid_t = 4 | 2;

/// The CPU time thread `tid` of this process has used, in nanoseconds, as
/// the scheduler counts it (the first field of its `schedstat`, plus the
/// slice it may be running now). One `clock_gettime` on the thread's CPU
/// clock (`MAKE_THREAD_CPUCLOCK`: the tid inverted, shifted left by 3):
/// ~0.3 µs on the development guest, against ~8–13 µs for opening and
/// reading its `schedstat` file. The kernel answers only for threads of
/// the caller's own process; for any other tid, or one that has exited,
/// the error is its errno (`EINVAL`).
pub fn thread_cpu_ns(tid: u64) -> Result<u64, i32> {
    let pid = libc::pid_t::try_from(tid).map_err(|_| libc::EINVAL)?;
    if pid <= 0 {
        // 0 would name the calling thread, not "thread 0".
        return Err(libc::EINVAL);
    }
    let clock = (!pid << 3) | THREAD_SCHED_CLOCK;
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a live, writable timespec; the kernel writes only it.
    let rc = unsafe { libc::clock_gettime(clock, &mut ts) };
    if rc != 0 {
        return Err(last_errno());
    }
    let secs = u64::try_from(ts.tv_sec).unwrap_or(0);
    let nanos = u64::try_from(ts.tv_nsec).unwrap_or(0);
    Ok(secs.saturating_mul(1_000_000_000).saturating_add(nanos))
}

/// Bytes asked of each read by [`read_bounded`]: a page, what one read of
/// a sysfs attribute returns at most.
pub(crate) const READ_CHUNK: usize = 4096;

/// Appends `file`'s text to `buf`, a [`READ_CHUNK`] per read, until a read
/// returns less than it was offered: the end of a kernel file (a sysfs
/// attribute is served whole by one read of a page, a longer binary one a
/// page per read; a `/proc` seq_file fills a read as far as it has text;
/// a regular file returns less only at its end), so no read is spent to
/// see the end. `Ok(false)` as soon as `buf` holds more than `cap` bytes
/// (the rest is not read); interrupted reads are retried.
///
/// Each read goes straight into `buf`'s own room, so a caller that keeps
/// one buffer for many files (cleared between them) reads each without an
/// allocation or a copy: the sysfs reader reads some 17k files so at 8,192
/// CPUs.
pub(crate) fn read_bounded(
    file: &mut std::fs::File,
    buf: &mut Vec<u8>,
    cap: usize,
) -> std::io::Result<bool> {
    use std::io::Read as _;
    loop {
        let start = buf.len();
        buf.resize(start + READ_CHUNK, 0);
        let read = loop {
            match file.read(&mut buf[start..]) {
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                other => break other,
            }
        };
        let n = read.inspect_err(|_| buf.truncate(start))?;
        buf.truncate(start + n);
        if buf.len() > cap {
            return Ok(false);
        }
        if n < READ_CHUNK {
            return Ok(true);
        }
    }
}

/// Opens `rel` (a relative path) under the directory `dir` with `flags`
/// (`O_CLOEXEC` added): `openat(2)`, which std does not offer. Reading
/// many files under one directory this way walks only the relative part of
/// each path (the sysfs reader: a path walk was its largest cost).
pub(crate) fn open_at(
    dir: &std::fs::File,
    rel: &std::ffi::CStr,
    flags: libc::c_int,
) -> std::io::Result<std::fs::File> {
    use std::os::fd::{AsRawFd as _, FromRawFd as _};
    // SAFETY: `dir` is an open descriptor kept alive by the borrow, `rel`
    // a NUL-terminated string that outlives the call; openat reads only
    // it and returns a new descriptor or -1.
    let fd = unsafe { libc::openat(dir.as_raw_fd(), rel.as_ptr(), flags | libc::O_CLOEXEC) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: `fd` was just returned by openat, is open, and is owned by
    // nothing else: the File takes sole ownership and closes it.
    Ok(unsafe { std::fs::File::from_raw_fd(fd) })
}

/// The link count of `rel` relative to the directory `dir`
/// (`fstatat(2)`, following links as an open would). A directory's link
/// count is 2 + its subdirectories on sysfs (kernfs), ext4 and tmpfs; other
/// filesystems may say 1 for "not counted".
pub(crate) fn nlink_at(dir: &std::fs::File, rel: &std::ffi::CStr) -> std::io::Result<u64> {
    use std::os::fd::AsRawFd as _;
    let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
    // SAFETY: `dir` is an open descriptor kept alive by the borrow, `rel`
    // a NUL-terminated string that outlives the call, and `st` a writable
    // stat buffer that fstatat fills completely when it returns 0.
    let r = unsafe { libc::fstatat(dir.as_raw_fd(), rel.as_ptr(), st.as_mut_ptr(), 0) };
    if r != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: fstatat returned 0, so it wrote the whole buffer.
    let st = unsafe { st.assume_init() };
    #[allow(clippy::unnecessary_cast)] // nlink_t is u32 on some targets
    Ok(st.st_nlink as u64)
}

/// Creates an output file of ours at `path`, or at `path` + `suffix` when
/// `path` exists (another process of the program writes it), for the
/// engine log and the recording. The open refuses a symlink at either name
/// (`O_NOFOLLOW`) and cannot block on a FIFO planted there (`O_NONBLOCK`);
/// a new file gets mode 0600. The file is kept only if it is a regular file
/// owned by our effective uid, checked before an old `path + suffix` is
/// emptied, so a file another user placed in a shared directory is never
/// written through.
pub(crate) fn create_own_output(
    path: &std::path::Path,
    suffix: &str,
) -> std::io::Result<(std::fs::File, std::path::PathBuf)> {
    use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
    let options = |new: bool| {
        let mut o = std::fs::OpenOptions::new();
        o.write(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC);
        if new {
            o.create_new(true);
        } else {
            o.create(true);
        }
        o
    };
    let (file, path) = match options(true).open(path) {
        Ok(f) => (f, path.to_path_buf()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            let mut other = path.as_os_str().to_owned();
            other.push(suffix);
            let other = std::path::PathBuf::from(other);
            (options(false).open(&other)?, other)
        }
        Err(e) => return Err(e),
    };
    let meta = file.metadata()?;
    // SAFETY: geteuid has no preconditions and cannot fail.
    let euid = unsafe { libc::geteuid() };
    if !meta.file_type().is_file() || meta.uid() != euid {
        return Err(std::io::Error::new(
            std::io::ErrorKind::PermissionDenied,
            format!(
                "{} is not a regular file of uid {euid} (uid {}, {:?})",
                path.display(),
                meta.uid(),
                meta.file_type()
            ),
        ));
    }
    // Only now that it is ours: an old `path + suffix` is emptied.
    file.set_len(0)?;
    Ok((file, path))
}

/// The CPU time the calling thread has used, in nanoseconds
/// (`CLOCK_THREAD_CPUTIME_ID`); 0 if the clock cannot be read.
pub(crate) fn own_cpu_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a live, writable timespec; the kernel writes only it.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    if rc != 0 {
        return 0;
    }
    let secs = u64::try_from(ts.tv_sec).unwrap_or(0);
    let nanos = u64::try_from(ts.tv_nsec).unwrap_or(0);
    secs.saturating_mul(1_000_000_000).saturating_add(nanos)
}

/// The CPU time all threads of this process have used, in nanoseconds
/// (`CLOCK_PROCESS_CPUTIME_ID`); 0 if the clock cannot be read.
pub(crate) fn process_cpu_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a live, writable timespec; the kernel writes only it.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut ts) };
    if rc != 0 {
        return 0;
    }
    let secs = u64::try_from(ts.tv_sec).unwrap_or(0);
    let nanos = u64::try_from(ts.tv_nsec).unwrap_or(0);
    secs.saturating_mul(1_000_000_000).saturating_add(nanos)
}

/// Thread `tid`'s mask if it is not exactly `expected`; `None` if it is.
/// Compares in a stack buffer, so the common case allocates nothing.
pub fn affinity_if_not(tid: u64, expected: &CpuSet) -> Result<Option<CpuSet>, Error> {
    let pid = pid_of(AffinityOp::Get, tid)?;
    let mut small = [0u64; FIRST_MASK_WORDS];
    match getaffinity_into(pid, &mut small) {
        Ok(()) => {
            let want = expected.as_words();
            let same = want.len() <= FIRST_MASK_WORDS
                && small
                    .iter()
                    .enumerate()
                    .all(|(i, w)| *w == want.get(i).copied().unwrap_or(0));
            Ok((!same).then(|| CpuSet::from_words(&small)))
        }
        // More CPUs than the stack buffer holds: the allocating path.
        Err(libc::EINVAL) => {
            let mask = get_affinity(tid)?;
            Ok((mask != *expected).then_some(mask))
        }
        Err(errno) => Err(Error::Affinity {
            op: AffinityOp::Get,
            tid,
            errno,
        }),
    }
}

/// The affinity calls the runtime makes, behind a trait so tests can inject
/// failures. `tid` 0 is the calling thread, as for the free functions.
pub trait SysOps: Send + Sync + 'static {
    /// As [`get_affinity`].
    fn get_affinity(&self, tid: u64) -> Result<CpuSet, Error>;
    /// As [`set_affinity`].
    fn set_affinity(&self, tid: u64, cpus: &CpuSet) -> Result<(), Error>;
    /// As [`affinity_if_not`]: the mask if it is not `expected`. The default
    /// goes through [`SysOps::get_affinity`].
    fn affinity_if_not(&self, tid: u64, expected: &CpuSet) -> Result<Option<CpuSet>, Error> {
        let mask = self.get_affinity(tid)?;
        Ok((mask != *expected).then_some(mask))
    }
    /// As [`stored_mask`]: the mask as the kernel stores it, offline CPUs
    /// included. The default is [`SysOps::get_affinity`] (a test's kernel
    /// with no CPU hotplug).
    fn stored_mask(&self, tid: u64) -> Result<CpuSet, Error> {
        self.get_affinity(tid)
    }
    /// As [`set_sched_ext`] (the scx body, see [`crate::scx`]). The default
    /// is the real call.
    fn set_sched_ext(&self, tid: u64) -> Result<(), Error> {
        set_sched_ext(tid)
    }
}

/// The real kernel.
#[derive(Clone, Copy, Debug, Default)]
pub struct RealSys;

impl SysOps for RealSys {
    #[inline]
    fn get_affinity(&self, tid: u64) -> Result<CpuSet, Error> {
        get_affinity(tid)
    }

    #[inline]
    fn set_affinity(&self, tid: u64, cpus: &CpuSet) -> Result<(), Error> {
        set_affinity(tid, cpus)
    }

    #[inline]
    fn affinity_if_not(&self, tid: u64, expected: &CpuSet) -> Result<Option<CpuSet>, Error> {
        affinity_if_not(tid, expected)
    }

    fn stored_mask(&self, tid: u64) -> Result<CpuSet, Error> {
        stored_mask(tid)
    }
}

/// Thread `tid`'s affinity mask as the kernel stores it (tid 0: the calling
/// thread), offline CPUs included: `Cpus_allowed_list` of its
/// `/proc/…/status`. `sched_getaffinity` answers the mask ∩ the active CPUs,
/// so while CPUs are offline it cannot tell a mask dfsched set over them
/// from one someone else narrowed; this can. Read only on the cold paths
/// (a mask found changed, the online CPUs changed), never per hint. Falls
/// back to [`get_affinity`] when `/proc` cannot say.
pub fn stored_mask(tid: u64) -> Result<CpuSet, Error> {
    let path = if tid == 0 {
        "/proc/thread-self/status".to_string()
    } else {
        format!("/proc/self/task/{tid}/status")
    };
    let parsed = std::fs::read_to_string(path).ok().and_then(|text| {
        text.lines()
            .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
            .and_then(|list| list.trim().parse::<CpuSet>().ok())
    });
    match parsed {
        Some(mask) => Ok(mask),
        None => get_affinity(tid),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gettid_names_this_thread_and_differs_between_threads() {
        let me = gettid();
        assert!(me > 0);
        assert_eq!(gettid(), me);
        let other = std::thread::spawn(gettid).join().unwrap();
        assert_ne!(other, me);
    }

    #[test]
    fn affinity_round_trips_on_this_thread() {
        // Run in a thread of our own so the test harness thread keeps its mask.
        std::thread::spawn(|| {
            let all = get_affinity(0).unwrap();
            assert!(!all.is_empty());
            let one = CpuSet::single(all.first().unwrap());
            set_affinity(0, &one).unwrap();
            assert_eq!(get_affinity(0).unwrap(), one);
            assert_eq!(get_affinity(gettid()).unwrap(), one);
            assert_eq!(current_cpu(), one.first(), "we run where we are allowed");
            set_affinity(0, &all).unwrap();
            assert_eq!(get_affinity(0).unwrap(), all);
        })
        .join()
        .unwrap();
    }

    #[test]
    fn affinity_if_not_reports_only_a_different_mask() {
        std::thread::spawn(|| {
            let all = get_affinity(0).unwrap();
            assert_eq!(affinity_if_not(0, &all).unwrap(), None);
            let mut other = all.clone();
            other.insert(CpuId(999));
            assert_eq!(affinity_if_not(0, &other).unwrap(), Some(all.clone()));
            assert_eq!(
                affinity_if_not(0, &CpuSet::new()).unwrap(),
                Some(all.clone())
            );
            let beyond = CpuSet::single(CpuId(5000));
            assert_eq!(affinity_if_not(0, &beyond).unwrap(), Some(all));
            assert!(affinity_if_not(i32::MAX as u64, &beyond).is_err());
        })
        .join()
        .unwrap();
    }

    #[test]
    fn another_threads_cpu_clock_moves_only_while_it_runs() {
        let (tid_tx, tid_rx) = std::sync::mpsc::channel();
        let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
        let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
        let worker = std::thread::spawn(move || {
            tid_tx.send(gettid()).unwrap();
            go_rx.recv().unwrap();
            // Spin until its own clock shows 5 ms used.
            let start = own_cpu_ns();
            while own_cpu_ns() < start + 5_000_000 {
                std::hint::spin_loop();
            }
            done_tx.send(()).unwrap();
            // Parked until the channel closes: uses no CPU.
            let _ = go_rx.recv();
        });
        let tid = tid_rx.recv().unwrap();
        // Once blocked in recv, two reads far apart agree (until it gets
        // there, it may still run a little).
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        let a = loop {
            let a = thread_cpu_ns(tid).unwrap();
            std::thread::sleep(std::time::Duration::from_millis(30));
            if thread_cpu_ns(tid).unwrap() == a {
                break a;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "a blocked thread kept using CPU"
            );
        };
        go_tx.send(()).unwrap();
        done_rx.recv().unwrap();
        let b = thread_cpu_ns(tid).unwrap();
        assert!(b >= a + 5_000_000, "{a} then {b}");
        drop(go_tx);
        worker.join().unwrap();
        // Never a thread: refused. (The worker's tid is not checked once it
        // has exited: another test's thread may have it by now.)
        assert_eq!(thread_cpu_ns(0), Err(libc::EINVAL));
        assert_eq!(thread_cpu_ns(u64::MAX), Err(libc::EINVAL));
        // pid 1's thread is not ours.
        assert!(thread_cpu_ns(1).is_err());
    }

    #[test]
    fn bad_affinity_requests_fail_with_their_errno() {
        let err = set_affinity(0, &CpuSet::new()).unwrap_err();
        assert_eq!(err.errno(), Some(libc::EINVAL));
        // A CPU far beyond any real machine: the kernel says EINVAL.
        let err = set_affinity(0, &CpuSet::single(CpuId(60_000))).unwrap_err();
        assert_eq!(err.errno(), Some(libc::EINVAL));
        // A thread id that cannot exist.
        let err = get_affinity(u64::MAX).unwrap_err();
        assert_eq!(err.errno(), Some(libc::ESRCH));
        let err = get_affinity(i32::MAX as u64).unwrap_err();
        assert_eq!(err.errno(), Some(libc::ESRCH));
    }
}
