//! The BPF scheduler from userspace: loads it with its settings, attaches it (the kernel then runs
//! every `SCHED_EXT` thread through it), writes its maps, reads its counters and, once it stops, why.
//!
//! One owner: a [`Scheduler`] holds the skeleton, and only its methods touch the maps. Dropping it (or
//! [`Scheduler::detach`]) unregisters the scheduler; the kernel then runs `ops.exit`, which fills the
//! exit record [`Scheduler::exit_info`] reads.

use crate::bpf::{DfschedSkel, DfschedSkelBuilder};
use crate::intf;
use crate::trace::{monotonic_ns, Writer};
use libbpf_rs::skel::{OpenSkel as _, SkelBuilder as _};
use libbpf_rs::{Link, MapCore as _, MapFlags, OpenObject};
use std::cell::RefCell;
use std::mem::MaybeUninit;
use std::rc::Rc;

/// The scheduler's settings, fixed at load.
#[derive(Clone, Copy, Debug)]
pub struct Settings {
    /// A thread's time slice, in nanoseconds.
    pub slice_ns: u64,
    /// Dispatches in a row a CPU gives one group before serving the next group with queued threads,
    /// for groups whose entry sets none.
    pub quota_dfl: u32,
    /// CPUs the scheduler scans (the machine's possible CPUs; at most [`intf::MAX_CPUS`]).
    pub nr_cpus: u32,
    /// The kernel's watchdog: a runnable thread not run for this long ends the scheduler
    /// (`ops.timeout_ms`; 0: the kernel's default, 30 s).
    pub timeout_ms: u32,
    /// For the safety-net check only: this scheduler group is never dispatched, so its threads
    /// stall and the watchdog must end the scheduler.
    pub stall_group: Option<u32>,
    /// Every task of the system is scheduled here (`SCX_OPS_SWITCH_PARTIAL` cleared), not only the
    /// threads whose policy is `SCHED_EXT`.
    pub switch_all: bool,
    /// The dispatch trace's ring buffer, in bytes (a power of 2, at least a page); 0: no trace (the
    /// BPF side's `ops.running` then does nothing).
    pub trace_ring_bytes: u32,
    /// For the hotplug check only (`DFSCHED_SCX_TEST_ATTACH_PAUSE_MS`): a pause between reading the
    /// kernel's hotplug sequence and attaching, long enough for a check to take a CPU away in it.
    pub test_attach_pause: Option<std::time::Duration>,
}

/// The kernel's count of CPU hotplug events (sched_ext, 6.12+): an attach given an older count than
/// the kernel's at enable is ended at once (`check_hotplug_seq` in kernel/sched/ext.c).
pub const HOTPLUG_SEQ: &str = "/sys/kernel/sched_ext/hotplug_seq";

/// The kernel's `enum scx_exit_code` bits a hotplug race sets (kernel/sched/ext.c of 6.12): the reason
/// (a CPU came or went) and the action it asks of userspace (load the scheduler again).
pub mod exit_code {
    /// `SCX_ECODE_RSN_HOTPLUG`.
    pub const RSN_HOTPLUG: i64 = 1 << 32;
    /// `SCX_ECODE_ACT_RESTART`.
    pub const ACT_RESTART: i64 = 1 << 48;
}

/// How long [`Scheduler::load`] waits for the kernel's verdict when the hotplug count moved between
/// its read and the attach: the kernel ends a refused scheduler from a work item, so the exit record
/// may come just after the attach returns.
const HOTPLUG_VERDICT_WAIT: std::time::Duration = std::time::Duration::from_secs(1);

/// Why loading or a map write failed.
#[derive(Debug, thiserror::Error)]
pub enum SchedError {
    /// libbpf refused (open, load, attach, map update).
    #[error("{what}: {source}")]
    Bpf {
        /// What was being done.
        what: &'static str,
        /// libbpf's error.
        source: libbpf_rs::Error,
    },
    /// An argument out of the scheduler's limits.
    #[error("{0}")]
    Limit(String),
    /// The kernel's hotplug count could not be read.
    #[error("reading {HOTPLUG_SEQ}: {0}")]
    HotplugSeq(String),
    /// A CPU came or went between reading the hotplug count and attaching: the kernel ended the
    /// scheduler at once (it is detached again); load it anew.
    #[error("a CPU came or went while the scheduler loaded (hotplug_seq {expected} read before, {now} at attach): {reason}")]
    Hotplug {
        /// The count the scheduler was loaded with.
        expected: u64,
        /// The kernel's count after the attach.
        now: u64,
        /// The kernel's exit message.
        reason: String,
    },
}

/// The kernel's CPU hotplug count ([`HOTPLUG_SEQ`]).
pub fn hotplug_seq() -> Result<u64, SchedError> {
    let text =
        std::fs::read_to_string(HOTPLUG_SEQ).map_err(|e| SchedError::HotplugSeq(e.to_string()))?;
    text.trim()
        .parse()
        .map_err(|e| SchedError::HotplugSeq(format!("{:?}: {e}", text.trim())))
}

fn bpf(what: &'static str) -> impl FnOnce(libbpf_rs::Error) -> SchedError {
    move |source| SchedError::Bpf { what, source }
}

/// The kernel's `enum scx_exit_kind` values dfsched names (include/linux/sched/ext.h of 6.12).
#[allow(dead_code)]
pub mod exit_kind {
    /// Still running.
    pub const NONE: i32 = 0;
    /// Unregistered by its userspace (us).
    pub const UNREG: i32 = 64;
    /// Unregistered by the BPF side.
    pub const UNREG_BPF: i32 = 65;
    /// Unregistered by the kernel.
    pub const UNREG_KERN: i32 = 66;
    /// Ended by SysRq-S.
    pub const SYSRQ: i32 = 67;
    /// At or past this: an error (1024 error, 1025 error from BPF, 1026 a runnable task stalled).
    pub const ERROR: i32 = 1024;
}

/// Why the scheduler stopped, as its `ops.exit` recorded it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExitInfo {
    /// `enum scx_exit_kind` ([`exit_kind`]).
    pub kind: i32,
    /// The exit code the BPF side or the kernel gave.
    pub exit_code: i64,
    /// The kernel's reason ("unregistered from user space", "runnable task stall", …).
    pub reason: String,
    /// Details, if any.
    pub msg: String,
}

impl ExitInfo {
    /// Whether the scheduler ended because of an error (a stall, a BPF error).
    pub fn is_error(&self) -> bool {
        self.kind >= exit_kind::ERROR
    }

    /// Whether the kernel ended it because a CPU came or went since the hotplug count it was loaded
    /// with, asking for a new load.
    pub fn is_hotplug_restart(&self) -> bool {
        let both = exit_code::RSN_HOTPLUG | exit_code::ACT_RESTART;
        self.exit_code & both == both
    }
}

fn c_string(raw: &[i8]) -> String {
    let bytes: Vec<u8> = raw
        .iter()
        .take_while(|&&c| c != 0)
        .map(|&c| c as u8)
        .collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

/// The loaded (and, until detached, attached) scheduler.
pub struct Scheduler<'obj> {
    skel: DfschedSkel<'obj>,
    link: Option<Link>,
    settings: Settings,
    /// The dispatch trace, when one is written: map changes go to it as they are made.
    trace: Option<Rc<RefCell<Writer>>>,
}

/// A group's entry as the BPF side reads it (`struct dfs_group` of intf.h).
fn group_bytes(home: &[u64], quota: u32) -> Vec<u8> {
    let mut v = Vec::with_capacity(intf::HOME_WORDS as usize * 8 + 8);
    for w in 0..intf::HOME_WORDS as usize {
        v.extend_from_slice(&home.get(w).copied().unwrap_or(0).to_ne_bytes());
    }
    v.extend_from_slice(&quota.to_ne_bytes());
    v.extend_from_slice(&0u32.to_ne_bytes());
    v
}

impl<'obj> Scheduler<'obj> {
    /// Opens, configures, loads and attaches the scheduler. `storage` holds libbpf's object for as long
    /// as the scheduler lives.
    ///
    /// The kernel's CPU hotplug count is read first and given to the kernel (`ops.hotplug_seq`): if a
    /// CPU comes or goes before the attach, the kernel ends the scheduler at once, and this returns
    /// [`SchedError::Hotplug`] with the scheduler detached again (the caller loads anew, with a new
    /// `storage`). A count of 0 (no hotplug event since boot) cannot be told from "not set": the
    /// kernel then checks nothing.
    pub fn load(
        storage: &'obj mut MaybeUninit<OpenObject>,
        settings: Settings,
    ) -> Result<Scheduler<'obj>, SchedError> {
        if settings.nr_cpus == 0 || settings.nr_cpus > intf::MAX_CPUS {
            return Err(SchedError::Limit(format!(
                "{} CPUs: the scheduler handles 1 to {}",
                settings.nr_cpus,
                intf::MAX_CPUS
            )));
        }
        let mut open = DfschedSkelBuilder::default()
            .open(storage)
            .map_err(bpf("opening the BPF object"))?;
        let ro = open
            .maps
            .rodata_data
            .as_deref_mut()
            .expect("the object has settings in .rodata");
        ro.slice_ns = settings.slice_ns;
        ro.quota_dfl = settings.quota_dfl.max(1);
        ro.nr_cpus = settings.nr_cpus;
        ro.stall_gid = settings.stall_group.unwrap_or(u32::MAX);
        if settings.trace_ring_bytes > 0 {
            ro.trace_on = 1;
            open.maps
                .trace
                .set_max_entries(settings.trace_ring_bytes)
                .map_err(bpf("sizing the trace's ring buffer"))?;
        }
        // Read before anything that depends on the CPUs (the BPF side's online mask is filled in
        // ops.init, under the kernel's hotplug lock, after this).
        let seq = hotplug_seq()?;
        let ops = open.struct_ops.dfsched_ops_mut();
        ops.timeout_ms = settings.timeout_ms;
        ops.hotplug_seq = seq;
        if settings.trace_ring_bytes == 0 {
            // Not tracing: no ops.running at all, so the kernel makes no call for it on any context
            // switch (libbpf then leaves the unreferenced program unloaded).
            ops.running = std::ptr::null_mut();
        }
        if settings.switch_all {
            // The kernel reads the flags when the struct_ops is attached: cleared here, every task
            // joins the scheduler at attach and leaves it at detach.
            ops.flags &= !u64::from(intf::OPS_SWITCH_PARTIAL);
        }
        let mut skel = open.load().map_err(bpf("loading the BPF scheduler"))?;
        if let Some(pause) = settings.test_attach_pause {
            println!(
                "dfsched-scx: hotplug_seq {seq} read; attaching in {} ms (test pause)",
                pause.as_millis()
            );
            let _ = std::io::Write::flush(&mut std::io::stdout());
            std::thread::sleep(pause);
        }
        let link = skel.maps.dfsched_ops.attach_struct_ops().map_err(bpf(
            "attaching the scheduler (is another sched_ext scheduler loaded?)",
        ))?;
        let mut sched = Scheduler {
            skel,
            link: Some(link),
            settings,
            trace: None,
        };
        if let Some(refused) = sched.refused_for_hotplug(seq) {
            sched.detach();
            return Err(refused);
        }
        Ok(sched)
    }

    /// After the attach: whether the kernel ended the scheduler because the hotplug count it was
    /// given (`seq`) was no longer the kernel's. The kernel checks at enable and ends a refused
    /// scheduler from a work item, which it mostly waits for before the attach returns; when the
    /// count moved and no exit record is there yet, the verdict is awaited a little
    /// ([`HOTPLUG_VERDICT_WAIT`]): a CPU that came or went just after the kernel's check is no
    /// refusal, and the online mask follows it (ops.cpu_online/offline).
    fn refused_for_hotplug(&self, seq: u64) -> Option<SchedError> {
        let refused = |e: ExitInfo| {
            e.is_hotplug_restart().then(|| SchedError::Hotplug {
                expected: seq,
                now: hotplug_seq().unwrap_or(seq),
                reason: if e.msg.is_empty() { e.reason } else { e.msg },
            })
        };
        if let Some(e) = self.exit_info() {
            return refused(e);
        }
        if hotplug_seq().is_ok_and(|now| now == seq) {
            return None;
        }
        let until = std::time::Instant::now() + HOTPLUG_VERDICT_WAIT;
        while std::time::Instant::now() < until {
            if let Some(e) = self.exit_info() {
                return refused(e);
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        None
    }

    /// Writes the dispatch trace to `writer` from now on: the map changes this scheduler makes, and
    /// the run records of the BPF side's ring, which the returned reader drains into it whenever it
    /// is consumed (the loader's loop). Needs a scheduler loaded with `trace_ring_bytes` > 0.
    pub fn trace_to(
        &mut self,
        writer: Rc<RefCell<Writer>>,
    ) -> Result<libbpf_rs::RingBuffer<'static>, SchedError> {
        if self.settings.trace_ring_bytes == 0 {
            return Err(SchedError::Limit(
                "the scheduler was loaded without a trace ring".into(),
            ));
        }
        let mut builder = libbpf_rs::RingBufferBuilder::new();
        let w = writer.clone();
        builder
            .add(&self.skel.maps.trace, move |bytes: &[u8]| {
                w.borrow_mut().ring_record(bytes);
                0
            })
            .map_err(bpf("reading the trace's ring buffer"))?;
        let ring = builder
            .build()
            .map_err(bpf("reading the trace's ring buffer"))?;
        self.trace = Some(writer);
        Ok(ring)
    }

    /// The settings it was loaded with.
    pub fn settings(&self) -> Settings {
        self.settings
    }

    /// Writes group `gid`'s home (a CPU bitmask) and quota (0: the default). A home with no CPU ends
    /// the group: its queued threads drain on any CPU.
    pub fn set_group(&mut self, gid: u32, home: &[u64], quota: u32) -> Result<(), SchedError> {
        if gid >= intf::MAX_GROUPS {
            return Err(SchedError::Limit(format!(
                "group {gid}: the scheduler has {} groups",
                intf::MAX_GROUPS
            )));
        }
        // Raise the bound dispatch scans before the entry exists, so a thread placed in it next is
        // served at once.
        let bss = self
            .skel
            .maps
            .bss_data
            .as_deref_mut()
            .expect("the object has .bss");
        if bss.groups_hi <= gid {
            // SAFETY: `groups_hi` lives in the .bss map, mmap'ed and shared with the BPF side, which
            // only reads it; a volatile write makes sure the store happens now and is not merged.
            unsafe { std::ptr::write_volatile(&mut bss.groups_hi, gid + 1) };
        }
        self.skel
            .maps
            .groups
            .update(&gid.to_ne_bytes(), &group_bytes(home, quota), MapFlags::ANY)
            .map_err(bpf("writing a group"))?;
        // Stamped after the write: a run recorded later saw it.
        if let Some(t) = &self.trace {
            t.borrow_mut().group(monotonic_ns(), gid, home, quota);
        }
        Ok(())
    }

    /// Puts thread `tid` into group `gid`.
    pub fn place(&mut self, tid: u32, gid: u32) -> Result<(), SchedError> {
        self.skel
            .maps
            .tid_group
            .update(&tid.to_ne_bytes(), &gid.to_ne_bytes(), MapFlags::ANY)
            .map_err(bpf("placing a thread"))?;
        if let Some(t) = &self.trace {
            t.borrow_mut().place(monotonic_ns(), tid, gid);
        }
        Ok(())
    }

    /// Takes thread `tid` out of its group (nothing if it had none: the BPF side also removes an
    /// exiting thread's entry).
    pub fn unplace(&mut self, tid: u32) -> Result<(), SchedError> {
        match self.skel.maps.tid_group.delete(&tid.to_ne_bytes()) {
            Ok(()) => {}
            Err(e) if e.kind() == libbpf_rs::ErrorKind::NotFound => {}
            Err(e) => {
                return Err(SchedError::Bpf {
                    what: "unplacing a thread",
                    source: e,
                })
            }
        }
        if let Some(t) = &self.trace {
            t.borrow_mut().unplace(monotonic_ns(), tid);
        }
        Ok(())
    }

    /// The counters, summed over CPUs, indexed by `intf::STAT_*`.
    pub fn stats(&self) -> Vec<u64> {
        (0..intf::NR_STATS)
            .map(|i| {
                self.skel
                    .maps
                    .stats
                    .lookup_percpu(&i.to_ne_bytes(), MapFlags::ANY)
                    .ok()
                    .flatten()
                    .map(|per_cpu| {
                        per_cpu
                            .iter()
                            .filter_map(|b| b.get(..8)?.try_into().ok())
                            .map(u64::from_ne_bytes)
                            .sum()
                    })
                    .unwrap_or(0)
            })
            .collect()
    }

    /// Why the scheduler stopped, once it has (`None` while it runs).
    pub fn exit_info(&self) -> Option<ExitInfo> {
        let bss = self.skel.maps.bss_data.as_deref()?;
        // SAFETY: `uei.kind` lives in the mmap'ed .bss the kernel's ops.exit writes; a volatile read
        // sees that write, and the other fields were written before it (ops.exit's barrier).
        let kind = unsafe { std::ptr::read_volatile(&bss.uei.kind) };
        if kind == exit_kind::NONE {
            return None;
        }
        Some(ExitInfo {
            kind,
            exit_code: bss.uei.exit_code,
            reason: c_string(&bss.uei.reason),
            msg: c_string(&bss.uei.msg),
        })
    }

    /// Unregisters the scheduler (the kernel puts every thread back on its default scheduler and runs
    /// ops.exit) and returns why it stopped: "unregistered from user space" when it was still running,
    /// or what the kernel said before.
    pub fn detach(&mut self) -> Option<ExitInfo> {
        drop(self.link.take());
        // The kernel's unregistration waits for the disable work, so ops.exit has run by now; poll
        // briefly in case a kernel version defers it.
        for _ in 0..50 {
            if let Some(e) = self.exit_info() {
                return Some(e);
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        None
    }
}

/// The kernel's view: `/sys/kernel/sched_ext/state` and `root/ops` (empty when missing).
pub fn sysfs_state() -> (String, String) {
    let read = |p: &str| {
        std::fs::read_to_string(p)
            .map(|s| s.trim().to_string())
            .unwrap_or_default()
    };
    (
        read("/sys/kernel/sched_ext/state"),
        read("/sys/kernel/sched_ext/root/ops"),
    )
}

/// Names of the counters, in `intf::STAT_*` order.
pub const STAT_NAMES: [&str; intf::NR_STATS as usize] = [
    "local_idle",
    "enq_group",
    "enq_shared",
    "enq_home_not_allowed",
    "disp_same_group",
    "disp_group_switch",
    "disp_shared",
    "disp_drain",
    "quota_spent",
    "kick",
    "keep_last",
    "enq_home_offline",
    "trace_drop",
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_names_follow_the_header_indices() {
        assert_eq!(STAT_NAMES[intf::STAT_LOCAL_IDLE as usize], "local_idle");
        assert_eq!(
            STAT_NAMES[intf::STAT_DISP_SAME_GROUP as usize],
            "disp_same_group"
        );
        assert_eq!(STAT_NAMES[intf::STAT_KICK as usize], "kick");
        assert_eq!(STAT_NAMES[intf::STAT_KEEP_LAST as usize], "keep_last");
        assert_eq!(
            STAT_NAMES[intf::STAT_ENQ_HOME_OFFLINE as usize],
            "enq_home_offline"
        );
        assert_eq!(STAT_NAMES[intf::STAT_TRACE_DROP as usize], "trace_drop");
    }

    #[test]
    fn a_hotplug_refusal_is_told_from_other_exits() {
        let exit = |kind, exit_code| ExitInfo {
            kind,
            exit_code,
            reason: String::new(),
            msg: String::new(),
        };
        let both = exit_code::RSN_HOTPLUG | exit_code::ACT_RESTART;
        // What check_hotplug_seq gives (scx_ops_exit: unregistered by the kernel).
        assert!(exit(exit_kind::UNREG_KERN, both).is_hotplug_restart());
        assert!(!exit(exit_kind::UNREG_KERN, both).is_error());
        assert!(!exit(exit_kind::UNREG, 0).is_hotplug_restart());
        assert!(!exit(exit_kind::SYSRQ, 0).is_hotplug_restart());
        assert!(!exit(exit_kind::UNREG_KERN, exit_code::RSN_HOTPLUG).is_hotplug_restart());
    }

    #[test]
    fn a_group_entry_has_the_c_layout() {
        let b = group_bytes(&[0xf, 1], 3);
        assert_eq!(b.len(), intf::HOME_WORDS as usize * 8 + 8);
        assert_eq!(&b[..8], &0xfu64.to_ne_bytes());
        assert_eq!(&b[8..16], &1u64.to_ne_bytes());
        assert_eq!(
            &b[intf::HOME_WORDS as usize * 8..][..4],
            &3u32.to_ne_bytes()
        );
    }
}
