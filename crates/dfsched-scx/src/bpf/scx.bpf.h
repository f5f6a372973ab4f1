/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * The sched_ext kfuncs dfsched's scheduler calls, declared by hand: the vmlinux.h that bpftool 7.1
 * (Debian 12's) dumps has the kernel's types but no kfunc prototypes.
 *
 * Names across kernel versions: 6.12 has scx_bpf_dispatch() and scx_bpf_consume(); 6.13 renamed them
 * scx_bpf_dsq_insert() and scx_bpf_dsq_move_to_local() (the old names stayed for a few releases, then
 * went). Both spellings are declared weak, and dsq_insert()/dsq_move_to_local() below pick the new one
 * when the running kernel has it: libbpf resolves a missing weak kfunc to 0, bpf_ksym_exists() is then
 * false and the verifier drops the dead call. So one object loads on 6.12 and on later kernels.
 */
#ifndef DFSCHED_SCX_BPF_H
#define DFSCHED_SCX_BPF_H

#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

s32 scx_bpf_create_dsq(u64 dsq_id, s32 node) __ksym;
s32 scx_bpf_dsq_nr_queued(u64 dsq_id) __ksym;
bool scx_bpf_test_and_clear_cpu_idle(s32 cpu) __ksym;
s32 scx_bpf_select_cpu_dfl(struct task_struct *p, s32 prev_cpu, u64 wake_flags, bool *is_idle) __ksym;
void scx_bpf_kick_cpu(s32 cpu, u64 flags) __ksym;
bool bpf_cpumask_test_cpu(u32 cpu, const struct cpumask *cpumask) __ksym;
s32 scx_bpf_pick_idle_cpu(const struct cpumask *cpus_allowed, u64 flags) __ksym;
const struct cpumask *scx_bpf_get_online_cpumask(void) __ksym;
void scx_bpf_put_cpumask(const struct cpumask *cpumask) __ksym;

/* 6.12 names */
void scx_bpf_dispatch(struct task_struct *p, u64 dsq_id, u64 slice, u64 enq_flags) __ksym __weak;
bool scx_bpf_consume(u64 dsq_id) __ksym __weak;
/* 6.13+ names */
void scx_bpf_dsq_insert(struct task_struct *p, u64 dsq_id, u64 slice, u64 enq_flags) __ksym __weak;
bool scx_bpf_dsq_move_to_local(u64 dsq_id) __ksym __weak;

static __always_inline void dsq_insert(struct task_struct *p, u64 dsq_id, u64 slice, u64 enq_flags)
{
	if (bpf_ksym_exists(scx_bpf_dsq_insert))
		scx_bpf_dsq_insert(p, dsq_id, slice, enq_flags);
	else
		scx_bpf_dispatch(p, dsq_id, slice, enq_flags);
}

static __always_inline bool dsq_move_to_local(u64 dsq_id)
{
	if (bpf_ksym_exists(scx_bpf_dsq_move_to_local))
		return scx_bpf_dsq_move_to_local(dsq_id);
	return scx_bpf_consume(dsq_id);
}

#endif
