//! `cargo run --release -p dfsched-rt --example write_tree -- DIR [NxLxCxS]`:
//! writes the sysfs fixture the tests and `dfsched bench topology` use
//! (default 2x64x32x2 = 8,192 CPUs) under DIR, so that a timing can read a
//! tree that was written (and synced) before it started, with
//! `dfsched bench topology --sysfs-root DIR`.

use std::path::PathBuf;

fn main() {
    let mut args = std::env::args().skip(1);
    let Some(dir) = args.next().map(PathBuf::from) else {
        eprintln!("usage: write_tree DIR [NxLxCxS]");
        std::process::exit(2);
    };
    let shape = args.next().unwrap_or_else(|| "2x64x32x2".into());
    let parts: Vec<u32> = shape.split('x').filter_map(|p| p.parse().ok()).collect();
    let [nodes, llcs, cores, smt] = parts[..] else {
        eprintln!("write_tree: bad shape {shape:?}, want NxLxCxS");
        std::process::exit(2);
    };
    if let Err(e) = dfsched::sysfs::write_test_tree(&dir, nodes, llcs, cores, smt) {
        eprintln!("write_tree: {e}");
        std::process::exit(1);
    }
    println!("{}", dir.display());
}
