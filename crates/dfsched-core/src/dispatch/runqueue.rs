//! Per-CPU run queues: round robin and data-affinity group batching (being written).
