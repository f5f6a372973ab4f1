// SPDX-License-Identifier: GPL-2.0-only
/*
 * dfsched's sched_ext scheduler: a DF's threads form a group with a home (a set of CPUs, one cache
 * domain), run only there, and a CPU serves one group's threads in succession until the group's quota
 * is spent, so the group's data is loaded once per batch (the first paper's priority groups). Userspace
 * (dfsched-core's decisions, through the dfsched-scx loader) writes who is in which group and where each
 * group lives; this side only reads those maps, so a stalled or killed userspace leaves stale maps, never
 * a stalled CPU.
 *
 *   wake-up ── select_cpu ── grouped: an idle CPU of the home (previous one first) gets it directly;
 *              │                       none idle: the task goes to enqueue, aimed at a home CPU
 *              │             ungrouped: the kernel's default idle-CPU choice
 *              └─ enqueue ─── grouped: the group's queue (DSQ), and an idle home CPU is kicked
 *                             ungrouped, or no home CPU in its allowed set: the shared queue
 *   CPU free ── dispatch ─── 1. the group this CPU serves, while its quota lasts
 *                            2. else the next group, in turn, with queued threads and this CPU in its
 *                               home (or any group no longer in use: drained anywhere), then the shared
 *                               queue as the last slot of the turn; the quota starts anew
 *
 * Invariants:
 * - A grouped thread is handed to a CPU only if the CPU is in its home and in its allowed set: the
 *   scheduler, not the affinity mask, keeps it there (its Cpus_allowed_list stays what it was).
 * - Every queue is served by some CPU: a group's queue by its home CPUs, a reclaimed group's queue and
 *   the shared queue by every CPU; a thread whose home it may not run on goes to the shared queue. So no
 *   runnable thread waits on a map entry (the kernel's watchdog would end the scheduler if one did).
 * - Partial mode (SCX_OPS_SWITCH_PARTIAL, the default): only threads whose policy is SCHED_EXT are
 *   scheduled here. In all mode (`dfsched-scx run --all`: the loader clears that flag before attaching)
 *   every task of the system is; the ungrouped ones, kernel threads included, go through the shared
 *   queue, which every CPU serves once per turn, and a queued task pinned to one CPU is taken by that
 *   CPU (the kernel's consume skips tasks the consuming CPU may not run).
 * - CPU hotplug: a home CPU counts only while it is online (online_cpus, kept by ops.cpu_online and
 *   ops.cpu_offline). A grouped thread whose home has no online CPU left is scheduled as an ungrouped one
 *   (the shared queue, an idle CPU kicked), its group's queue is drained by any CPU, and an offline CPU's
 *   going kicks the idle ones so they drain it; when a home CPU comes back its threads return to it at
 *   their next enqueue. (A 6.12 kernel ends a scheduler without these callbacks at the first hotplug
 *   event: "cpu N going offline, exiting scheduler".)
 * - The dispatch trace (ops.running, off unless the loader turns it on) only ever drops a record when
 *   its ring is full, counted; it never delays a thread.
 * - SCX_OPS_ENQ_LAST: a thread whose slice ends with nothing else queued comes back through enqueue
 *   (see there), so a thread that never sleeps still follows its home when the maps change.
 */
#include "scx.bpf.h"
#include "intf.h"

char _license[] SEC("license") = "GPL";

_Static_assert(DFSCHED_OPS_SWITCH_PARTIAL == SCX_OPS_SWITCH_PARTIAL,
	       "intf.h's DFSCHED_OPS_SWITCH_PARTIAL is not the kernel's SCX_OPS_SWITCH_PARTIAL");

_Static_assert(sizeof(struct dfs_trace_rec) == 24, "src/trace.rs reads 24-byte trace records");

#define BPF_STRUCT_OPS(name, args...) SEC("struct_ops/" #name) BPF_PROG(name, ##args)
#define BPF_STRUCT_OPS_SLEEPABLE(name, args...) SEC("struct_ops.s/" #name) BPF_PROG(name, ##args)

/* Settings, written by the loader before load. */
const volatile u64 slice_ns = 5000000;	/* a thread's time slice */
const volatile u32 quota_dfl = 8;	/* a group's quota when its entry says 0 (dispatches in a row) */
const volatile u32 nr_cpus = 1;		/* CPUs to scan (the machine's nr_cpu_ids, at most MAX_CPUS) */

/* For the safety-net check only (`dfsched-scx run --test-stall-group G`): group G's threads are never
 * dispatched, so they stall and the kernel's watchdog must end the scheduler. Off: ~0. */
const volatile u32 stall_gid = ~0u;

/* The dispatch trace: ops.running writes a record per run when the loader sets this (`run --trace`).
 * Read-only data, so with it off the verifier drops the tracing code; the loader then also leaves
 * ops.running out of the struct_ops, so the kernel makes no call for it at all. */
const volatile u32 trace_on = 0;

/* Groups below this id are looked at by dispatch; the loader raises it before it writes a group past it. */
volatile u32 groups_hi;

/* Why the scheduler stopped: kind is written last, and userspace polls it. */
struct dfs_exit_info uei;

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, DFSCHED_MAX_TIDS);
	__type(key, u32);
	__type(value, u32);
} tid_group SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, DFSCHED_MAX_GROUPS);
	__type(key, u32);
	__type(value, struct dfs_group);
} groups SEC(".maps");

/* CPUs online, a bit per CPU as in a home (CPU c is bit c % 64 of word c / 64). Filled in ops.init, which
 * the kernel runs under the CPU hotplug read lock, and then kept by ops.cpu_online/cpu_offline, which the
 * hotplug lock serialises: so plain stores suffice, and no event falls between the two. */
u64 online_cpus[DFSCHED_HOME_WORDS];
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, DFSCHED_TRACE_RING_OFF);
} trace SEC(".maps");

/* The slot a CPU serves: a group id, or SHARED_SLOT for the shared queue. */
#define SHARED_SLOT DFSCHED_MAX_GROUPS

struct dfs_cpu_state {
	u32 cur;	/* the slot being served */
	u32 left;	/* dispatches it may still have in a row */
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, u32);
	__type(value, struct dfs_cpu_state);
} cpu_states SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, DFSCHED_NR_STATS);
	__type(key, u32);
	__type(value, u64);
} stats SEC(".maps");

static __always_inline void stat_inc(u32 idx)
{
	u64 *c = bpf_map_lookup_elem(&stats, &idx);

	if (c)
		(*c)++;
}

/* Whether @cpu is in @g's home and online. */
static __always_inline bool home_has(const struct dfs_group *g, s32 cpu)
{
	u32 c = cpu, w;

	if (c >= DFSCHED_MAX_CPUS)
		return false;
	w = (c / 64) & (DFSCHED_HOME_WORDS - 1);
	return g->home[w] & online_cpus[w] & (1ULL << (c & 63));
}

/* Whether @g's home has an online CPU: without one its threads are scheduled as ungrouped ones. */
static __always_inline bool home_live(const struct dfs_group *g)
{
	u64 any = 0;
	int i;

#pragma unroll
	for (i = 0; i < DFSCHED_HOME_WORDS; i++)
		any |= g->home[i] & online_cpus[i];
	return any != 0;
}

static __always_inline void set_online(s32 cpu, bool on)
{
	u32 c = cpu, w;

	if (c >= DFSCHED_MAX_CPUS)
		return;
	w = (c / 64) & (DFSCHED_HOME_WORDS - 1);
	if (on)
		online_cpus[w] |= 1ULL << (c & 63);
	else
		online_cpus[w] &= ~(1ULL << (c & 63));
}

static __always_inline bool in_use(const struct dfs_group *g)
{
	u64 any = 0;
	int i;

#pragma unroll
	for (i = 0; i < DFSCHED_HOME_WORDS; i++)
		any |= g->home[i];
	return any != 0;
}

/* The group of @p if it has one in use, with its id in @gid; NULL if it is ungrouped. */
static __always_inline struct dfs_group *group_of(struct task_struct *p, u32 *gid)
{
	struct dfs_group *g;
	u32 tid = p->pid;
	u32 *found;

	found = bpf_map_lookup_elem(&tid_group, &tid);
	if (!found)
		return NULL;
	*gid = *found;
	if (*gid >= DFSCHED_MAX_GROUPS)
		return NULL;
	g = bpf_map_lookup_elem(&groups, gid);
	if (!g || !in_use(g))
		return NULL;
	return g;
}

static __always_inline u64 slot_dsq(u32 slot)
{
	return slot >= SHARED_SLOT ? DFSCHED_SHARED_DSQ : DFSCHED_GROUP_DSQ_BASE + slot;
}

/* Whether @cpu may take threads from @slot's queue: the shared queue, a group no longer in use and a
 * group whose home has no online CPU (its threads still queued: drained anywhere), everywhere; a group
 * in use, on its home's online CPUs. */
static __always_inline bool serves(u32 slot, s32 cpu, u32 *quota)
{
	struct dfs_group *g;

	*quota = quota_dfl;
	if (slot >= SHARED_SLOT)
		return true;
	if (slot == stall_gid)
		return false;
	g = bpf_map_lookup_elem(&groups, &slot);
	if (!g)
		return false;
	if (!in_use(g) || !home_live(g)) {
		stat_inc(DFSCHED_STAT_DISP_DRAIN);
		return true;
	}
	if (g->quota)
		*quota = g->quota;
	return home_has(g, cpu);
}

s32 BPF_STRUCT_OPS(dfsched_select_cpu, struct task_struct *p, s32 prev_cpu, u64 wake_flags)
{
	struct dfs_group *g;
	bool idle = false;
	s32 fallback = -1;
	u32 gid;
	int cpu;

	g = group_of(p, &gid);
	/* A home with no online CPU: placed as an ungrouped thread until one comes back. */
	if (!g || (!home_live(g) && gid != stall_gid)) {
		cpu = scx_bpf_select_cpu_dfl(p, prev_cpu, wake_flags, &idle);
		if (idle) {
			stat_inc(DFSCHED_STAT_LOCAL_IDLE);
			dsq_insert(p, SCX_DSQ_LOCAL, slice_ns, 0);
		}
		return cpu;
	}
	if (gid == stall_gid)
		return prev_cpu;
	if (home_has(g, prev_cpu) && bpf_cpumask_test_cpu(prev_cpu, p->cpus_ptr) &&
	    scx_bpf_test_and_clear_cpu_idle(prev_cpu)) {
		stat_inc(DFSCHED_STAT_LOCAL_IDLE);
		dsq_insert(p, SCX_DSQ_LOCAL, slice_ns, 0);
		return prev_cpu;
	}
	bpf_for(cpu, 0, nr_cpus) {
		if (!home_has(g, cpu) || !bpf_cpumask_test_cpu(cpu, p->cpus_ptr))
			continue;
		if (fallback < 0)
			fallback = cpu;
		if (scx_bpf_test_and_clear_cpu_idle(cpu)) {
			stat_inc(DFSCHED_STAT_LOCAL_IDLE);
			dsq_insert(p, SCX_DSQ_LOCAL, slice_ns, 0);
			return cpu;
		}
	}
	/* No home CPU idle: enqueue puts it on its group's queue; waking a home CPU's run queue lets
	 * that CPU see it first. */
	if (home_has(g, prev_cpu))
		return prev_cpu;
	return fallback >= 0 ? fallback : prev_cpu;
}

void BPF_STRUCT_OPS(dfsched_enqueue, struct task_struct *p, u64 enq_flags)
{
	struct dfs_group *g;
	s32 allowed = -1, kick = -1;
	u32 gid;
	int cpu;

	g = group_of(p, &gid);
	/* SCX_ENQ_LAST: @p's slice ended and nothing else is queued for this CPU (dispatch found
	 * nothing). Without ENQ_LAST in the ops flags the kernel would keep @p running here without asking,
	 * and a spinning thread would never reach a home it was given after it started; with it, @p goes
	 * on running only where it may run, and otherwise to its group's queue (a home CPU is kicked). */
	if (enq_flags & SCX_ENQ_LAST) {
		cpu = bpf_get_smp_processor_id();
		if (!g || (home_has(g, cpu) && gid != stall_gid)) {
			stat_inc(DFSCHED_STAT_KEEP_LAST);
			dsq_insert(p, SCX_DSQ_LOCAL, slice_ns, enq_flags);
			return;
		}
	}
	if (!g) {
		stat_inc(DFSCHED_STAT_ENQ_SHARED);
		dsq_insert(p, DFSCHED_SHARED_DSQ, slice_ns, enq_flags);
		return;
	}
	bpf_for(cpu, 0, nr_cpus) {
		if (!home_has(g, cpu) || !bpf_cpumask_test_cpu(cpu, p->cpus_ptr))
			continue;
		allowed = cpu;
		if (scx_bpf_test_and_clear_cpu_idle(cpu)) {
			kick = cpu;
			break;
		}
	}
	if (allowed < 0) {
		/* Its home has no online CPU, or its affinity excludes its whole home: only the shared queue
		 * can run it, and an idle CPU it may run on is woken to take it (no select_cpu chose one when
		 * it comes from a CPU going offline or from the end of a slice). */
		if (home_live(g)) {
			stat_inc(DFSCHED_STAT_ENQ_HOME_NOT_ALLOWED);
		} else {
			stat_inc(DFSCHED_STAT_ENQ_HOME_OFFLINE);
			kick = scx_bpf_pick_idle_cpu(p->cpus_ptr, 0);
		}
		stat_inc(DFSCHED_STAT_ENQ_SHARED);
		dsq_insert(p, DFSCHED_SHARED_DSQ, slice_ns, enq_flags);
		if (kick >= 0) {
			stat_inc(DFSCHED_STAT_KICK);
			scx_bpf_kick_cpu(kick, SCX_KICK_IDLE);
		}
		return;
	}
	stat_inc(DFSCHED_STAT_ENQ_GROUP);
	dsq_insert(p, DFSCHED_GROUP_DSQ_BASE + gid, slice_ns, enq_flags);
	if (kick >= 0) {
		stat_inc(DFSCHED_STAT_KICK);
		scx_bpf_kick_cpu(kick, SCX_KICK_IDLE);
	}
}

void BPF_STRUCT_OPS(dfsched_dispatch, s32 cpu, struct task_struct *prev)
{
	struct dfs_cpu_state *st;
	u32 zero = 0, hi, start, quota, i;

	st = bpf_map_lookup_elem(&cpu_states, &zero);
	if (!st)
		return;
	hi = groups_hi;
	if (hi > DFSCHED_MAX_GROUPS)
		hi = DFSCHED_MAX_GROUPS;

	/* 1. The slot this CPU serves, while its quota lasts. */
	if (st->left > 0 && (st->cur < hi || st->cur == SHARED_SLOT) && serves(st->cur, cpu, &quota) &&
	    dsq_move_to_local(slot_dsq(st->cur))) {
		st->left--;
		stat_inc(DFSCHED_STAT_DISP_SAME_GROUP);
		return;
	}
	if (st->left == 0 && st->cur < hi && scx_bpf_dsq_nr_queued(slot_dsq(st->cur)) > 0)
		stat_inc(DFSCHED_STAT_QUOTA_SPENT);

	/* 2. The next slot in turn with a queued thread this CPU may run; slot index hi is the shared
	 * queue, so it takes its turn after the groups. */
	start = st->cur < hi ? st->cur + 1 : 0;
	bpf_for(i, 0, hi + 1) {
		u32 at = start + i, slot;

		if (at > hi)
			at -= hi + 1;
		slot = at >= hi ? SHARED_SLOT : at;
		if (scx_bpf_dsq_nr_queued(slot_dsq(slot)) <= 0)
			continue;
		if (!serves(slot, cpu, &quota))
			continue;
		if (!dsq_move_to_local(slot_dsq(slot)))
			continue;
		if (slot == SHARED_SLOT)
			stat_inc(DFSCHED_STAT_DISP_SHARED);
		else if (slot == st->cur)
			stat_inc(DFSCHED_STAT_DISP_SAME_GROUP);
		else
			stat_inc(DFSCHED_STAT_DISP_GROUP_SWITCH);
		st->cur = slot;
		st->left = quota > 0 ? quota - 1 : 0;
		return;
	}
}

/* A hotplug record in the dispatch trace, when tracing is on (tid 0: no thread; a full ring drops it and
 * counts it, as a run record). */
static __always_inline void trace_hotplug(s32 cpu, bool online)
{
	struct dfs_trace_rec *r;

	if (!trace_on)
		return;
	r = bpf_ringbuf_reserve(&trace, sizeof(*r), 0);
	if (!r) {
		stat_inc(DFSCHED_STAT_TRACE_DROP);
		return;
	}
	r->t_ns = bpf_ktime_get_ns();
	r->cpu = cpu;
	r->tid = 0;
	r->gid = online ? DFSCHED_TRACE_CPU_ONLINE : DFSCHED_TRACE_CPU_OFFLINE;
	r->pad = 0;
	bpf_ringbuf_submit(r, BPF_RB_NO_WAKEUP);
}

void BPF_STRUCT_OPS(dfsched_cpu_online, s32 cpu)
{
	set_online(cpu, true);
	trace_hotplug(cpu, true);
}

void BPF_STRUCT_OPS(dfsched_cpu_offline, s32 cpu)
{
	s32 c;

	set_online(cpu, false);
	trace_hotplug(cpu, false);
	/* A group whose last home CPU this was has threads queued that only a dispatch elsewhere drains
	 * now (serves); idle CPUs dispatch only when kicked. Hotplug is rare: kick every idle one. */
	bpf_for(c, 0, nr_cpus) {
		if (c != cpu && (online_cpus[(c / 64) & (DFSCHED_HOME_WORDS - 1)] & (1ULL << (c & 63))))
			scx_bpf_kick_cpu(c, SCX_KICK_IDLE);
	}
}

/* @p got a CPU (after any dispatch path: a group's or the shared queue, straight to an idle CPU from
 * select_cpu, kept at ENQ_LAST): one trace record, when tracing is on. A full ring drops the record and
 * counts it; it never waits. No wake-up is sent: the loader polls the ring. */
void BPF_STRUCT_OPS(dfsched_running, struct task_struct *p)
{
	struct dfs_trace_rec *r;
	u32 gid = DFSCHED_TRACE_UNGROUPED;

	if (!trace_on)
		return;
	r = bpf_ringbuf_reserve(&trace, sizeof(*r), 0);
	if (!r) {
		stat_inc(DFSCHED_STAT_TRACE_DROP);
		return;
	}
	if (!group_of(p, &gid))
		gid = DFSCHED_TRACE_UNGROUPED;
	r->t_ns = bpf_ktime_get_ns();
	r->cpu = bpf_get_smp_processor_id();
	r->tid = p->pid;
	r->gid = gid;
	r->pad = 0;
	bpf_ringbuf_submit(r, BPF_RB_NO_WAKEUP);
}

void BPF_STRUCT_OPS(dfsched_exit_task, struct task_struct *p, struct scx_exit_task_args *args)
{
	u32 tid = p->pid;

	/* A tid is reused by a later thread: it must not inherit this one's group. */
	bpf_map_delete_elem(&tid_group, &tid);
}

s32 BPF_STRUCT_OPS_SLEEPABLE(dfsched_init)
{
	const struct cpumask *online;
	s32 ret;
	u32 i;

	/* Under the CPU hotplug read lock (see online_cpus). */
	online = scx_bpf_get_online_cpumask();
	bpf_for(i, 0, nr_cpus) {
		if (bpf_cpumask_test_cpu(i, online))
			set_online(i, true);
	}
	scx_bpf_put_cpumask(online);

	ret = scx_bpf_create_dsq(DFSCHED_SHARED_DSQ, -1);
	if (ret)
		return ret;
	bpf_for(i, 0, DFSCHED_MAX_GROUPS) {
		ret = scx_bpf_create_dsq(DFSCHED_GROUP_DSQ_BASE + i, -1);
		if (ret)
			return ret;
	}
	return 0;
}

void BPF_STRUCT_OPS(dfsched_exit, struct scx_exit_info *ei)
{
	bpf_probe_read_kernel_str(uei.reason, sizeof(uei.reason), ei->reason);
	bpf_probe_read_kernel_str(uei.msg, sizeof(uei.msg), ei->msg);
	uei.exit_code = ei->exit_code;
	/* Published last: userspace reads the rest once it sees a kind. */
	asm volatile("" ::: "memory");
	uei.kind = ei->kind;
}

SEC(".struct_ops.link")
struct sched_ext_ops dfsched_ops = {
	.select_cpu = (void *)dfsched_select_cpu,
	.enqueue = (void *)dfsched_enqueue,
	.dispatch = (void *)dfsched_dispatch,
	.cpu_online = (void *)dfsched_cpu_online,
	.cpu_offline = (void *)dfsched_cpu_offline,
	.running = (void *)dfsched_running,
	.exit_task = (void *)dfsched_exit_task,
	.init = (void *)dfsched_init,
	.exit = (void *)dfsched_exit,
	.flags = SCX_OPS_SWITCH_PARTIAL | SCX_OPS_ENQ_LAST,
	.name = "dfsched",
};
