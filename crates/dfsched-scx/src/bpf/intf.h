/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * The interface between dfsched's BPF scheduler (dfsched.bpf.c) and its loader (src/*.rs): sizes, map
 * layouts and counter indices. build.rs turns every `#define DFSCHED_NAME number` line of this file into a
 * Rust constant (OUT_DIR/intf.rs), so the two sides cannot disagree; keep such lines one per line, with a
 * plain decimal number.
 *
 * Maps (written by userspace only; the BPF side only reads them, except that a thread's entry in
 * tid_group is deleted when the thread exits, so a reused tid never inherits a group):
 *
 *   tid_group : u32 tid   -> u32 group        (hash, DFSCHED_MAX_TIDS entries)
 *   groups    : u32 group -> struct dfs_group (array, DFSCHED_MAX_GROUPS entries; a group is in use
 *                                               when its home has a CPU)
 *
 *   trace     : ring buffer of struct dfs_trace_rec (BPF writes, userspace drains; see below)
 *
 * Dispatch queues: DFSCHED_SHARED_DSQ for ungrouped SCHED_EXT threads, DFSCHED_GROUP_DSQ_BASE + g for
 * group g; all are created in ops.init, so a group id is usable as soon as its entry is written.
 */
#ifndef DFSCHED_INTF_H
#define DFSCHED_INTF_H

#define DFSCHED_MAX_CPUS 512
#define DFSCHED_HOME_WORDS 8
#define DFSCHED_MAX_GROUPS 256
#define DFSCHED_MAX_TIDS 65536
#define DFSCHED_SHARED_DSQ 0
#define DFSCHED_GROUP_DSQ_BASE 1

/* The kernel's SCX_OPS_SWITCH_PARTIAL (enum scx_ops_flags, include/linux/sched/ext.h of 6.12; checked
 * against the kernel's value in dfsched.bpf.c): set, only SCHED_EXT threads are scheduled here; the
 * loader clears it in the struct_ops before attaching for `run --all`, and every task is. */
#define DFSCHED_OPS_SWITCH_PARTIAL 8

/* Counters (a per-CPU array, summed by userspace). */
#define DFSCHED_STAT_LOCAL_IDLE 0
#define DFSCHED_STAT_ENQ_GROUP 1
#define DFSCHED_STAT_ENQ_SHARED 2
#define DFSCHED_STAT_ENQ_HOME_NOT_ALLOWED 3
#define DFSCHED_STAT_DISP_SAME_GROUP 4
#define DFSCHED_STAT_DISP_GROUP_SWITCH 5
#define DFSCHED_STAT_DISP_SHARED 6
#define DFSCHED_STAT_DISP_DRAIN 7
#define DFSCHED_STAT_QUOTA_SPENT 8
#define DFSCHED_STAT_KICK 9
#define DFSCHED_STAT_KEEP_LAST 10
#define DFSCHED_STAT_ENQ_HOME_OFFLINE 11
#define DFSCHED_STAT_TRACE_DROP 12
#define DFSCHED_NR_STATS 13

/* The dispatch trace (`dfsched-scx run --trace FILE`): off unless the loader sets rodata trace_on, and
 * then ops.running writes one struct dfs_trace_rec to the `trace` ring buffer each time a thread gets a
 * CPU. A full ring drops the record and counts it (DFSCHED_STAT_TRACE_DROP); nothing waits on it. The
 * ring's size is the loader's (a power of 2 of at least a page); this is the size while tracing is off. */
#define DFSCHED_TRACE_RING_OFF 4096
/* The gid of a record whose thread has no group in use. */
#define DFSCHED_TRACE_UNGROUPED 4294967295
/* A hotplug record (ops.cpu_online/cpu_offline, tid 0: no thread): CPU cpu came online, went offline. */
#define DFSCHED_TRACE_CPU_ONLINE 4294967294
#define DFSCHED_TRACE_CPU_OFFLINE 4294967293

/* A group's entry in the `groups` map. */
struct dfs_group {
	/* Home CPUs, a bit per CPU (CPU c is bit c % 64 of word c / 64); all zero: the group is unused. */
	unsigned long long home[DFSCHED_HOME_WORDS];
	/* Dispatches a CPU gives this group in a row before it serves the next group with queued threads;
	 * 0 means the loader's default (rodata quota_dfl). */
	unsigned int quota;
	unsigned int pad;
};

/* One record of the dispatch trace: thread tid started running on cpu at t_ns (bpf_ktime_get_ns, the
 * clock of CLOCK_MONOTONIC), as a member of group gid (DFSCHED_TRACE_UNGROUPED: none); or, with tid 0 and
 * gid DFSCHED_TRACE_CPU_ONLINE/OFFLINE, CPU cpu came online or went offline at t_ns. 24 bytes. */
struct dfs_trace_rec {
	unsigned long long t_ns;
	unsigned int cpu;
	unsigned int tid;
	unsigned int gid;
	unsigned int pad;
};

/* Why the scheduler stopped, copied from the kernel's struct scx_exit_info in ops.exit. */
struct dfs_exit_info {
	/* enum scx_exit_kind: 0 while running, 64 unregistered by userspace, 1024+ an error. */
	int kind;
	int pad;
	long long exit_code;
	char reason[128];
	char msg[1024];
};

#endif
