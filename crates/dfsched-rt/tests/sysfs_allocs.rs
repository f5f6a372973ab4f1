//! What a sysfs file costs the reader besides its system calls: nothing.
//! A counting allocator (this test binary's own) counts the allocations
//! the calling thread makes while reading two trees that differ only in
//! the files read: in one every CPU's private caches are like the first
//! CPU's (two files each: `shared_cpu_list` and `size`), in the other each
//! CPU's are unlike the one before (four files each: `level` and `type`
//! too). The extra files must not bring allocations with them (a path
//! string, a C string, a byte buffer and a text each, before the reader
//! reused its buffers): at 8,192 CPUs that was some 70k allocations.

mod common;

use common::*;
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

/// The system allocator, counting the allocations of each thread.
struct Counting;

thread_local! {
    static ALLOCATIONS: Cell<u64> = const { Cell::new(0) };
}

// SAFETY: every call is passed on to the system allocator unchanged; the
// count is a const-initialised thread-local without a destructor, so
// touching it never allocates or runs code at thread exit.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let _ = ALLOCATIONS.try_with(|n| n.set(n.get() + 1));
        // SAFETY: the caller's contract for `alloc`, passed on.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller's contract for `dealloc`, passed on.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let _ = ALLOCATIONS.try_with(|n| n.set(n.get() + 1));
        // SAFETY: the caller's contract for `realloc`, passed on.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static COUNTING: Counting = Counting;

/// Allocations made by this thread while `read_topology` reads `dir`
/// (below 1,024 CPUs it reads on the calling thread alone).
fn allocations_reading(dir: &TempDir) -> u64 {
    let before = ALLOCATIONS.with(Cell::get);
    let t = dfsched::sysfs::read_topology(dir.path()).unwrap();
    let after = ALLOCATIONS.with(Cell::get);
    drop(t);
    after - before
}

#[test]
fn a_file_read_costs_no_allocation() {
    const CPUS: u32 = 64;
    let cpus: dfsched::CpuSet = format!("0-{}", CPUS - 1).parse().unwrap();
    // Like: CPU 0's private caches are read whole, every other CPU's take
    // their level and type from them.
    let like = TempDir::new("allocs-like");
    write_flat_llc(&like, &cpus);
    // Unlike: the odd CPUs' private caches have other sizes, so each CPU's
    // differ from the CPU's before and are read whole.
    let unlike = TempDir::new("allocs-unlike");
    write_flat_llc(&unlike, &cpus);
    for cpu in (1..CPUS).step_by(2) {
        for (index, size) in [(0, "64K"), (1, "16K"), (2, "1024K")] {
            unlike.write(
                &format!("sys/devices/system/cpu/cpu{cpu}/cache/index{index}/size"),
                &format!("{size}\n"),
            );
        }
    }
    // Premise: the same number of domains and caches, CPU 1's read whole.
    let (a, b) = (
        dfsched::sysfs::read_topology(like.path()).unwrap(),
        dfsched::sysfs::read_topology(unlike.path()).unwrap(),
    );
    assert_eq!(a.domains().len(), b.domains().len());
    let l1 =
        |t: &dfsched::Topology| t.domain(t.leaf(dfsched::CpuId(1)).unwrap()).caches[0].size_bytes;
    assert_eq!((l1(&a), l1(&b)), (Some(48 << 10), Some(64 << 10)));
    // Warm-up: anything made once per process (thread-locals, the
    // allocator's own arenas) is made before counting.
    allocations_reading(&like);
    let extra_files = u64::from(CPUS - 1) * 3 * 2;
    let (few, many) = (allocations_reading(&like), allocations_reading(&unlike));
    assert!(
        many <= few + extra_files / 8,
        "{extra_files} more files read cost {} more allocations ({few} -> {many})",
        many.saturating_sub(few)
    );
}
