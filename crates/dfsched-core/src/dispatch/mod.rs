//! Dispatch policies: which task a CPU runs next.
//!
//! Placement (the rest of this crate) decides *where* a task may run; dispatch
//! decides *which* ready task a CPU runs *when* it becomes free. The Linux
//! runtime leaves dispatch to the kernel; the simulator owns time and asks
//! these policies. Both families are pure and deterministic, like the engine.
//!
//! - [`queue`]: Squillante & Lazowska's policies over one ready queue and a
//!   delay centre (FCFS, FP, LP, MI, LMI(A), LMR(A), each optionally with the
//!   pause heuristic).
//! - [`runqueue`]: per-CPU run queues: a kernel-like round robin with a
//!   quantum (the `vanilla` baseline), and Pinter & Zalmanovici's priority
//!   groups run in succession on their CPU (data affinity).

pub mod queue;
pub mod runqueue;
