//! The host side: what the bench needs on this machine, fetched when
//! missing; the release binaries; the initramfs; booting a preset under QEMU
//! and reading the guest's report off its serial console.
//!
//! ```text
//!  ensure_tools ─ qemu-system-x86_64, busybox      (apt-get install when root)
//!  ensure_kernel ─ vmlinuz of linux-image-6.12.*-amd64-unsigned
//!                  (apt-get download + dpkg-deb, cached), or a given image
//!  build_binaries ─ cargo build --release, own target dir (cached)
//!  initramfs ─ busybox + binaries + the libraries `ldd` lists + /init
//!              (with --scx: dfsched-scx, and stress-ng fetched by `stress_ng.rs`)
//!  boot ─ qemu -accel tcg … -serial stdio; lines with the marker → Outcome
//! ```
//!
//! Everything fetched or built lives under the cache folder
//! ([`cache_dir`]: `target/vmbench/` of the workspace, which git ignores),
//! so a second run downloads and compiles nothing that did not change.
//!
//! Invariant: a boot never outlives its deadline: QEMU is killed when it
//! passes, and the run then fails with what the console showed.

use crate::cpio;
use crate::preset::Preset;
use crate::report::Outcome;
use std::io::{BufRead, BufReader, Write as _};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Why the bench could not run or failed.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// A prerequisite is missing and could not be installed here.
    #[error("missing prerequisite: {what} ({how})")]
    Missing {
        /// What is missing.
        what: String,
        /// How to get it, or why it could not be installed.
        how: String,
    },
    /// A command the bench ran failed.
    #[error("`{command}` failed: {detail}")]
    Command {
        /// The command line.
        command: String,
        /// Its exit status and the end of its stderr.
        detail: String,
    },
    /// A file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// The guest ran, and the plan failed, did not finish or did not boot.
    #[error("preset {preset}: {why}\n(console log: {log})")]
    Guest {
        /// The preset.
        preset: String,
        /// Every reason.
        why: String,
        /// The console log.
        log: PathBuf,
    },
}

pub(crate) fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> BenchError + '_ {
    move |source| BenchError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Runs `cmd` to its end; its stdout, or an error with its stderr's tail.
pub(crate) fn run(cmd: &mut Command) -> Result<String, BenchError> {
    let shown = format!("{cmd:?}");
    let out = cmd.output().map_err(|e| BenchError::Command {
        command: shown.clone(),
        detail: e.to_string(),
    })?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        let tail: String = err.lines().rev().take(15).collect::<Vec<_>>().join("\n");
        return Err(BenchError::Command {
            command: shown,
            detail: format!("{}: {tail}", out.status),
        });
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Runs `cmd` to its end with its output shown (a build's errors reach the reader as they
/// come); on failure an error with its exit status and `hint` (empty for none).
fn run_shown(cmd: &mut Command, hint: &str) -> Result<(), BenchError> {
    let status = cmd.status().map_err(|e| BenchError::Command {
        command: format!("{cmd:?}"),
        detail: e.to_string(),
    })?;
    if !status.success() {
        return Err(BenchError::Command {
            command: format!("{cmd:?}"),
            detail: format!("{status}{hint}"),
        });
    }
    Ok(())
}

/// The workspace's root (two levels above this crate).
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .nth(2)
        .expect("the crate sits in crates/")
        .to_path_buf()
}

/// The cache folder: `$DFSCHED_VMBENCH_CACHE`, else `target/vmbench/` in
/// the workspace (`/target` is git-ignored).
pub fn cache_dir() -> PathBuf {
    match std::env::var_os("DFSCHED_VMBENCH_CACHE") {
        Some(d) if !d.is_empty() => PathBuf::from(d),
        _ => workspace_root().join("target/vmbench"),
    }
}

/// `name` found on `$PATH` (or in /usr/sbin, /sbin for tools root has).
pub fn which(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin", "/sbin", "/usr/bin", "/bin"].map(PathBuf::from))
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

/// Whether this process runs as root.
fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// The host tools the bench runs.
#[derive(Clone, Debug)]
pub struct Tools {
    /// `qemu-system-x86_64`.
    pub qemu: PathBuf,
    /// `busybox` (static or not: its libraries are copied either way).
    pub busybox: PathBuf,
}

/// `apt-get install` of `packages`, after an `apt-get update` if the first
/// attempt fails (a fresh machine's package lists may be stale or empty).
fn apt_install(packages: &[&str]) -> Result<(), BenchError> {
    let install = || {
        let mut c = Command::new("apt-get");
        c.env("DEBIAN_FRONTEND", "noninteractive")
            .args(["install", "-y", "-q", "--no-install-recommends"])
            .args(packages);
        run(&mut c)
    };
    if install().is_ok() {
        return Ok(());
    }
    run(Command::new("apt-get").args(["update", "-q"]))?;
    install().map(drop)
}

/// Whether the bench may install packages: root with apt-get, unless
/// `DFSCHED_VMBENCH_NO_INSTALL=1`.
pub(crate) fn can_install() -> Result<(), String> {
    if std::env::var("DFSCHED_VMBENCH_NO_INSTALL").as_deref() == Ok("1") {
        return Err("DFSCHED_VMBENCH_NO_INSTALL=1".into());
    }
    if !is_root() {
        return Err("not root, so it cannot apt-get install".into());
    }
    if which("apt-get").is_none() {
        return Err("no apt-get on this machine".into());
    }
    Ok(())
}

/// QEMU and busybox, installed through apt-get when missing.
pub fn ensure_tools() -> Result<Tools, BenchError> {
    let find = || (which("qemu-system-x86_64"), which("busybox"));
    if let (Some(qemu), Some(busybox)) = find() {
        return Ok(Tools { qemu, busybox });
    }
    if let Err(why) = can_install() {
        return Err(BenchError::Missing {
            what: "qemu-system-x86_64 and busybox".into(),
            how: format!("apt-get install qemu-system-x86 busybox-static; {why}"),
        });
    }
    eprintln!("vmbench: installing qemu-system-x86 and busybox-static with apt-get");
    apt_install(&["qemu-system-x86", "busybox-static"])?;
    match find() {
        (Some(qemu), Some(busybox)) => Ok(Tools { qemu, busybox }),
        _ => Err(BenchError::Missing {
            what: "qemu-system-x86_64 or busybox".into(),
            how: "apt-get install succeeded but they are not on PATH".into(),
        }),
    }
}

/// Orders Debian kernel package names by their version numbers
/// (`6.12.117+deb12` after `6.12.9+deb12`).
fn version_key(name: &str) -> Vec<u64> {
    name.split(|c: char| !c.is_ascii_digit())
        .filter(|s| !s.is_empty())
        .map(|s| s.parse().unwrap_or(0))
        .collect()
}

/// The newest `linux-image-6.12.N+debM-amd64-unsigned` apt knows.
fn newest_kernel_package() -> Result<Option<String>, BenchError> {
    let list = run(Command::new("apt-cache").args([
        "search",
        "--names-only",
        r"^linux-image-6\.12\.[0-9]+\+deb[0-9]+-amd64-unsigned$",
    ]))?;
    Ok(list
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .max_by_key(|n| version_key(n))
        .map(str::to_string))
}

/// The kernel to boot: `explicit` (`--kernel`, `$DFSCHED_VMBENCH_KERNEL`)
/// if given, else the vmlinuz of Debian's newest 6.12 amd64 kernel package,
/// downloaded and extracted into the cache once.
pub fn ensure_kernel(cache: &Path, explicit: Option<&Path>) -> Result<PathBuf, BenchError> {
    if let Some(k) = explicit {
        if !k.is_file() {
            return Err(BenchError::Missing {
                what: format!("the kernel image {}", k.display()),
                how: "no such file".into(),
            });
        }
        return Ok(k.to_path_buf());
    }
    let dir = cache.join("kernel");
    let have = |dir: &Path| -> Option<PathBuf> {
        let mut found: Vec<PathBuf> = std::fs::read_dir(dir)
            .ok()?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| {
                p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with("vmlinuz-"))
            })
            .collect();
        found.sort_by_key(|p| version_key(&p.to_string_lossy()));
        found.pop()
    };
    if let Some(k) = have(&dir) {
        return Ok(k);
    }
    for tool in ["apt-get", "apt-cache", "dpkg-deb", "tar"] {
        if which(tool).is_none() {
            return Err(BenchError::Missing {
                what: "a Debian 6.12 kernel image".into(),
                how: format!("no {tool} to fetch linux-image-6.12.*-amd64-unsigned; pass --kernel"),
            });
        }
    }
    let mut package = newest_kernel_package()?;
    if package.is_none() && can_install().is_ok() {
        run(Command::new("apt-get").args(["update", "-q"]))?;
        package = newest_kernel_package()?;
    }
    let Some(package) = package else {
        return Err(BenchError::Missing {
            what: "a Debian 6.12 kernel image".into(),
            how: "apt knows no linux-image-6.12.*-amd64-unsigned (Debian 12 or 13 sources needed); pass --kernel".into(),
        });
    };
    let debs = cache.join("debs");
    std::fs::create_dir_all(&debs).map_err(io_err(&debs))?;
    eprintln!("vmbench: downloading {package} with apt-get download");
    run(Command::new("apt-get")
        .current_dir(&debs)
        // As root, apt drops to user _apt, which may not write here.
        .args(["-o", "APT::Sandbox::User=root", "download", &package]))?;
    let deb = std::fs::read_dir(&debs)
        .map_err(io_err(&debs))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| p.to_string_lossy().contains(&format!("{package}_")))
        .ok_or_else(|| BenchError::Missing {
            what: format!("the downloaded {package}"),
            how: "apt-get download left no .deb".into(),
        })?;
    let unpack = cache.join("kernel.tmp");
    let _ = std::fs::remove_dir_all(&unpack);
    std::fs::create_dir_all(&unpack).map_err(io_err(&unpack))?;
    // dpkg-deb -x would unpack all 100 MB of modules; take only /boot.
    let script = format!(
        "dpkg-deb --fsys-tarfile '{}' | tar -x -C '{}' --wildcards './boot/vmlinuz-*'",
        deb.display(),
        unpack.display()
    );
    run(Command::new("sh").args(["-c", &script]))?;
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::rename(unpack.join("boot"), &dir).map_err(io_err(&dir))?;
    let _ = std::fs::remove_dir_all(&unpack);
    // The .deb is no longer needed: the vmlinuz is the cache.
    let _ = std::fs::remove_file(&deb);
    have(&dir).ok_or_else(|| BenchError::Missing {
        what: "vmlinuz".into(),
        how: format!("{package} held no boot/vmlinuz-*"),
    })
}

/// The release binaries the guest runs.
#[derive(Clone, Debug)]
pub struct Binaries {
    /// The directory holding them: `dfsched`, `libdfsched.so`,
    /// `dfsched-vmcheck`, `dfsched-vmspin`.
    pub dir: PathBuf,
}

/// The files [`Binaries::dir`] must hold.
pub const BINARIES: [&str; 4] = [
    "dfsched",
    "libdfsched.so",
    "dfsched-vmcheck",
    "dfsched-vmspin",
];

/// Builds the release binaries with `cargo build --release` in the cache's
/// own target dir (`cache/cargo`): `cargo test` holds the lock of the
/// workspace's target dir while its tests run, so a nested build there
/// would wait forever. Cargo's own freshness checks make a rerun cheap.
pub fn build_binaries(cache: &Path) -> Result<Binaries, BenchError> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let target = cache.join("cargo");
    let mut cmd = Command::new(cargo);
    cmd.current_dir(workspace_root())
        .env("CARGO_TARGET_DIR", &target)
        .args(["build", "--release", "--locked", "-q"])
        .args(["-p", "dfsched-cli", "--bin", "dfsched"])
        .args(["-p", "dfsched-rt", "--lib"])
        .args(["-p", "dfsched-vmbench", "--bins"]);
    eprintln!(
        "vmbench: cargo build --release (target dir {})",
        target.display()
    );
    run_shown(&mut cmd, "")?;
    binaries_in(&target.join("release"))
}

/// The binaries already built in `dir` (`--bin-dir`).
pub fn binaries_in(dir: &Path) -> Result<Binaries, BenchError> {
    for b in BINARIES {
        if !dir.join(b).is_file() {
            return Err(BenchError::Missing {
                what: format!("{}/{b}", dir.display()),
                how: "build with cargo build --release".into(),
            });
        }
    }
    Ok(Binaries {
        dir: dir.to_path_buf(),
    })
}

/// The script that builds and caches the sched_ext test kernel (`scx-kernel/build.sh` of this
/// crate, with its config fragment `scx-kernel/scx.config` beside it).
pub fn scx_kernel_script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("scx-kernel/build.sh")
}

/// The sched_ext kernel image `run --scx` boots when no `--kernel` is given: built once from
/// Debian's `linux-source-6.12` by [`scx_kernel_script`] (about 30-40 minutes on 2 cores; it
/// apt-installs the source and the build tools when missing, as root) and cached in
/// `cache/scx-kernel/<source version>-<fragment hash>/bzImage`; a cached image is returned at once,
/// and a second bench waits on the script's lock instead of building it again. Its progress goes
/// to stderr.
pub fn scx_kernel(cache: &Path) -> Result<PathBuf, BenchError> {
    let script = scx_kernel_script();
    let mut cmd = Command::new("bash");
    cmd.arg(&script)
        .arg(cache.join("scx-kernel"))
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::inherit());
    if std::env::var_os("DFSCHED_VMBENCH_NO_INSTALL").is_some() {
        cmd.env("DFSCHED_VMBENCH_NO_INSTALL", "1");
    }
    let out = cmd.output().map_err(|e| BenchError::Command {
        command: format!("{cmd:?}"),
        detail: e.to_string(),
    })?;
    let command = format!(
        "bash {} {}",
        script.display(),
        cache.join("scx-kernel").display()
    );
    if !out.status.success() {
        return Err(BenchError::Command {
            command,
            detail: format!(
                "{} (the sched_ext kernel could not be built; its message is above; or give --kernel SCX_BZIMAGE)",
                out.status
            ),
        });
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let image = text.lines().last().map(PathBuf::from).unwrap_or_default();
    if !image.is_file() {
        return Err(BenchError::Missing {
            what: "the sched_ext kernel image".into(),
            how: format!("{command} printed {:?}, which is no file", text.trim()),
        });
    }
    Ok(image)
}

/// The sched_ext scheduler's loader, as the guest sees it in `/opt/dfsched`.
pub const SCX_BINARY: &str = "dfsched-scx";

/// Builds `dfsched-scx` (`crates/dfsched-scx`, its own workspace: it needs
/// clang, libelf and bpftool, which the rest of the bench does not) with
/// `cargo build --release --locked` in the cache's `cargo-scx` target dir,
/// its BPF part compiled against the BTF of `kernel` (the image the guest
/// boots; `DFSCHED_SCX_KERNEL`, see that crate's README). Returns the
/// binary.
pub fn build_scx(cache: &Path, kernel: &Path) -> Result<PathBuf, BenchError> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let target = cache.join("cargo-scx");
    let manifest = workspace_root().join("crates/dfsched-scx/Cargo.toml");
    let mut cmd = Command::new(cargo);
    cmd.current_dir(workspace_root())
        .env("CARGO_TARGET_DIR", &target)
        .env("DFSCHED_SCX_KERNEL", kernel)
        .args(["build", "--release", "--locked", "-q", "--manifest-path"])
        .arg(&manifest);
    eprintln!(
        "vmbench: cargo build --release of dfsched-scx (target dir {})",
        target.display()
    );
    run_shown(
        &mut cmd,
        " (it needs clang-19, libelf-dev, zlib1g-dev, pkg-config and bpftool: see crates/dfsched-scx/README.md)",
    )?;
    let bin = target.join("release").join(SCX_BINARY);
    if !bin.is_file() {
        return Err(BenchError::Missing {
            what: bin.display().to_string(),
            how: "the build left no binary".into(),
        });
    }
    Ok(bin)
}

/// The shared libraries `ldd` lists for `bin` (absolute paths, the dynamic
/// loader included); empty for a static binary. Libraries it does not find
/// are left out (the guest then fails to run `bin`, and says which).
fn libraries(bin: &Path) -> Result<Vec<PathBuf>, BenchError> {
    Ok(ldd(bin, &[])?.0)
}

/// What `ldd` lists for `bin` with the folders `search` looked in first
/// (`LD_LIBRARY_PATH`; none: the system's alone): the absolute paths it found
/// and the names it did not find ([`parse_ldd`]).
pub(crate) fn ldd(
    bin: &Path,
    search: &[PathBuf],
) -> Result<(Vec<PathBuf>, Vec<String>), BenchError> {
    let mut cmd = Command::new("ldd");
    cmd.arg(bin);
    if !search.is_empty() {
        let joined: Vec<String> = search.iter().map(|d| d.display().to_string()).collect();
        cmd.env("LD_LIBRARY_PATH", joined.join(":"));
    }
    let out = cmd.output().map_err(|e| BenchError::Missing {
        what: "ldd".into(),
        how: e.to_string(),
    })?;
    Ok(parse_ldd(&String::from_utf8_lossy(&out.stdout)))
}

/// `ldd`'s output: the absolute paths it found (the dynamic loader included)
/// and the names it did not find; "not a dynamic executable" (a static
/// binary, exit 1) gives neither.
pub(crate) fn parse_ldd(text: &str) -> (Vec<PathBuf>, Vec<String>) {
    let (mut found, mut missing) = (Vec::new(), Vec::new());
    for l in text.lines().map(str::trim) {
        // "libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x…)", "libJudy.so.1 => not found",
        // "/lib64/ld-linux-x86-64.so.2 (0x…)", "linux-vdso.so.1 (0x…)".
        let path = match l.split_once("=>") {
            Some((name, rest)) if rest.trim() == "not found" => {
                missing.push(name.trim().into());
                continue;
            }
            Some((_, rest)) => rest.split_whitespace().next(),
            None => l.split_whitespace().next(),
        };
        if let Some(p) = path.filter(|p| p.starts_with('/')) {
            found.push(PathBuf::from(p));
        }
    }
    (found, missing)
}

/// Adds `path` and its parent directories (once each) to the archive.
struct Tree<W: std::io::Write> {
    cpio: cpio::Writer<W>,
    dirs: std::collections::BTreeSet<String>,
    files: std::collections::BTreeSet<String>,
}

impl<W: std::io::Write> Tree<W> {
    fn dirs_of(&mut self, path: &str) -> std::io::Result<()> {
        let mut at = String::new();
        let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
        for part in &parts[..parts.len().saturating_sub(1)] {
            at = format!("{at}/{part}");
            if self.dirs.insert(at.clone()) {
                self.cpio.dir(&at)?;
            }
        }
        Ok(())
    }

    fn dir(&mut self, path: &str) -> std::io::Result<()> {
        self.dirs_of(&format!("{path}/x"))
    }

    fn file(&mut self, path: &str, perm: u32, data: &[u8]) -> std::io::Result<()> {
        if !self.files.insert(path.to_string()) {
            return Ok(());
        }
        self.dirs_of(path)?;
        self.cpio.file(path, perm, data)
    }

    /// Copies host file `from` (following links) to `to` in the guest.
    fn copy(&mut self, from: &Path, to: &str) -> Result<(), BenchError> {
        let data = std::fs::read(from).map_err(io_err(from))?;
        self.file(to, 0o755, &data).map_err(io_err(from))
    }
}

/// The guest's `/init`: mounts, then the plan, then power-off. The plan's
/// records go to the console; `panic=-1` plus QEMU's `-no-reboot` turn a
/// crash of this script into QEMU's exit.
fn init_script(preset: &Preset, marker: &str, only: Option<&str>, scx: bool) -> String {
    let only = only.map(|o| format!(" --only {o}")).unwrap_or_default();
    let only = if scx { format!("{only} --scx") } else { only };
    format!(
        r#"#!/bin/busybox sh
/bin/busybox --install -s /bin
export PATH=/bin:/usr/bin HOME=/root
mkdir -p /proc /sys /dev /tmp /run /root
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mount -t tmpfs tmpfs /tmp
mount -t tmpfs tmpfs /run
mkdir -p /sys/fs/cgroup
mount -t cgroup2 cgroup2 /sys/fs/cgroup
exec </dev/console >/dev/console 2>&1
/opt/dfsched/dfsched-vmcheck plan --preset {preset} --marker {marker} --expected /etc/dfsched-vm/preset.json --bin-dir /opt/dfsched{only}
echo "vmcheck exited with $?"
poweroff -f
"#,
        preset = preset.name
    )
}

/// Writes the initramfs for `preset` to `out`: busybox, the binaries in
/// `/opt/dfsched` (with `scx`, the sched_ext scheduler's loader too, and the
/// plan then runs the scx checks), every library they and busybox need at
/// its host path, the `extra` files (host path → guest path, e.g. stress-ng
/// and its libraries), the preset's expected topology and `/init`.
pub fn build_initramfs(
    preset: &Preset,
    tools: &Tools,
    bins: &Binaries,
    (marker, only, scx): (&str, Option<&str>, Option<&Path>),
    extra: &[(PathBuf, String)],
    out: &Path,
) -> Result<(), BenchError> {
    let file = std::fs::File::create(out).map_err(io_err(out))?;
    let mut tree = Tree {
        cpio: cpio::Writer::new(std::io::BufWriter::new(file)),
        dirs: Default::default(),
        files: Default::default(),
    };
    let w = |e| BenchError::Io {
        path: out.to_path_buf(),
        source: e,
    };
    for d in [
        "/bin",
        "/proc",
        "/sys",
        "/dev",
        "/tmp",
        "/run",
        "/root",
        "/etc/dfsched-vm",
    ] {
        tree.dir(d).map_err(w)?;
    }
    tree.copy(&tools.busybox, "/bin/busybox")?;
    let mut libs = libraries(&tools.busybox)?;
    for b in BINARIES {
        let host = bins.dir.join(b);
        tree.copy(&host, &format!("/opt/dfsched/{b}"))?;
        libs.extend(libraries(&host)?);
    }
    if let Some(scx) = scx {
        tree.copy(scx, &format!("/opt/dfsched/{SCX_BINARY}"))?;
        libs.extend(libraries(scx)?);
    }
    for lib in libs {
        tree.copy(&lib, &lib.to_string_lossy())?;
    }
    for (host, guest) in extra {
        tree.copy(host, guest)?;
    }
    let expected = serde_json::to_vec_pretty(preset).expect("a preset serialises");
    tree.file("/etc/dfsched-vm/preset.json", 0o644, &expected)
        .map_err(w)?;
    tree.file(
        "/init",
        0o755,
        init_script(preset, marker, only, scx.is_some()).as_bytes(),
    )
    .map_err(w)?;
    tree.cpio.finish().map_err(w)?;
    Ok(())
}

/// How one boot went.
#[derive(Debug)]
pub struct Boot {
    /// What the guest reported.
    pub outcome: Outcome,
    /// Whether the guest outlived the deadline and was killed.
    pub timed_out: bool,
    /// Wall time of the boot, plan and power-off.
    pub wall: Duration,
    /// The console log.
    pub log: PathBuf,
    /// Boots it took (more than one when a guest died before the plan
    /// began or met the emulator's fault; see [`BOOT_ATTEMPTS`]).
    pub boots: u32,
    /// The console line of the guest kernel's `int3` Oops, if one came (see
    /// [`is_kernel_int3_oops`]).
    pub emulator_fault: Option<String>,
}

/// Boots one run may take. Under multi-threaded TCG a vCPU now and then
/// executes a stale `int3` byte while the guest kernel patches its own text
/// (static keys, alternatives), and the kernel dies with `Oops: int3`: seen
/// on `4llc-16` in early boot (in `sched_clock_cpu`, 2 s in), in the middle of
/// the plan (in `__alloc_pages`, after 10 of 15 checks) and on scx runs as
/// the scheduler loads or unloads. It is a fault of the emulator, not of
/// anything dfsched runs (user space cannot plant a breakpoint in kernel
/// text), so such a guest is booted again and the whole plan runs anew. A
/// guest that ended by itself before the plan's `Begin` record is booted
/// again too: nothing of dfsched has run then. Any other end is final: a
/// timeout, a plan that failed or stopped without the emulator's fault, and
/// the last attempt.
pub const BOOT_ATTEMPTS: u32 = 3;

/// Whether a boot is worth another try (see [`BOOT_ATTEMPTS`]).
pub fn worth_another_boot(boot: &Boot) -> bool {
    if boot.timed_out || boot.outcome.end.is_some() {
        return false;
    }
    boot.outcome.begun.is_none() || boot.emulator_fault.is_some()
}

/// Whether a console line is the guest kernel's `int3` Oops (`Oops: int3:
/// 0000 [#1] PREEMPT SMP NOPTI` on 6.x, `int3: 0000 [#1] SMP` before): the
/// emulator's fault of [`BOOT_ATTEMPTS`]. A breakpoint in user space is a
/// `SIGTRAP` and prints no such line.
pub fn is_kernel_int3_oops(line: &str) -> bool {
    line.find("int3: ")
        .is_some_and(|at| line[at + "int3: ".len()..].contains(" [#"))
}

/// A marker no console line holds by chance: pid and clock nanoseconds.
pub fn new_marker() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    format!("@@DFSCHED-VM-{:x}-{:x}@@", std::process::id(), nanos)
}

/// Boots `preset` with `kernel` and `initrd` under TCG, copies the console
/// to `log` (and to stderr when `echo`), and reads the records of `marker`;
/// kills QEMU after `deadline`.
pub fn boot(
    (tools, kernel): (&Tools, &Path),
    preset: &Preset,
    initrd: &Path,
    marker: &str,
    deadline: Duration,
    log: &Path,
    echo: bool,
) -> Result<Boot, BenchError> {
    let start = Instant::now();
    let mut cmd = Command::new(&tools.qemu);
    // `DFSCHED_VMBENCH_TCG=single`: one host thread runs every vCPU, against the int3 Oops of
    // multi-threaded TCG while the kernel patches its own text (README, "The sched_ext checks").
    let accel = match std::env::var("DFSCHED_VMBENCH_TCG").as_deref() {
        Ok("single") => "tcg,thread=single",
        _ => "tcg,thread=multi",
    };
    cmd.args(["-accel", accel])
        .args(preset.qemu_args())
        .arg("-kernel")
        .arg(kernel)
        .arg("-initrd")
        .arg(initrd)
        .args([
            "-append",
            "console=ttyS0 quiet loglevel=3 panic=-1",
            "-display",
            "none",
            "-serial",
            "stdio",
            "-monitor",
            "none",
            "-no-reboot",
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let shown = format!("{cmd:?}");
    let mut child = cmd.spawn().map_err(|e| BenchError::Command {
        command: shown.clone(),
        detail: e.to_string(),
    })?;
    let stdout = child.stdout.take().expect("piped");
    let stderr = child.stderr.take().expect("piped");
    let (tx, rx) = std::sync::mpsc::channel::<Option<String>>();
    let err_tx = tx.clone();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if tx.send(Some(line)).is_err() {
                return;
            }
        }
        let _ = tx.send(None);
    });
    std::thread::spawn(move || {
        // QEMU's own warnings (TCG lacks features of the CPU model) go to
        // the log too, marked.
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if err_tx.send(Some(format!("[qemu] {line}"))).is_err() {
                return;
            }
        }
    });
    let mut logf = std::fs::File::create(log).map_err(io_err(log))?;
    let _ = writeln!(logf, "# {shown}");
    let mut outcome = Outcome::default();
    let mut timed_out = false;
    let mut emulator_fault = None;
    let end = start + deadline;
    loop {
        let left = end.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(Some(line)) => {
                let _ = writeln!(logf, "{line}");
                if echo {
                    eprintln!("  | {line}");
                }
                if !outcome.take_line(marker, &line)
                    && emulator_fault.is_none()
                    && is_kernel_int3_oops(&line)
                {
                    emulator_fault = Some(line.trim().to_string());
                }
            }
            // The console closed: QEMU exited.
            Ok(None) | Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => break,
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                timed_out = true;
                let _ = child.kill();
                let _ = writeln!(logf, "# killed after {deadline:?}");
                break;
            }
        }
    }
    let _ = child.wait();
    Ok(Boot {
        outcome,
        timed_out,
        wall: start.elapsed(),
        log: log.to_path_buf(),
        boots: 1,
        emulator_fault,
    })
}

/// Everything a run needs besides the preset.
#[derive(Clone, Debug)]
pub struct Setup {
    /// The host tools.
    pub tools: Tools,
    /// The kernel image.
    pub kernel: PathBuf,
    /// The release binaries.
    pub bins: Binaries,
    /// The cache folder.
    pub cache: PathBuf,
    /// Run only this check of the plan (after the topology check).
    pub only: Option<String>,
    /// The sched_ext scheduler's loader (`--scx`): put in the guest, and the
    /// plan is the scx checks (see `guest/scx.rs`).
    pub scx: Option<PathBuf>,
    /// More files for the guest, host path → guest path (`--scx`: stress-ng
    /// and its libraries, see `stress_ng.rs`).
    pub extra: Vec<(PathBuf, String)>,
}

impl Setup {
    /// Fetches and builds what is missing: tools, kernel (`kernel` if
    /// given), binaries (`bin_dir` if given, else built).
    pub fn prepare(kernel: Option<&Path>, bin_dir: Option<&Path>) -> Result<Setup, BenchError> {
        let cache = cache_dir();
        std::fs::create_dir_all(&cache).map_err(io_err(&cache))?;
        let tools = ensure_tools()?;
        let kernel = ensure_kernel(&cache, kernel)?;
        let bins = match bin_dir {
            Some(d) => binaries_in(d)?,
            None => build_binaries(&cache)?,
        };
        Ok(Setup {
            tools,
            kernel,
            bins,
            cache,
            only: None,
            scx: None,
            extra: Vec::new(),
        })
    }

    /// Boots `preset`, runs the plan and judges it: `Ok` with the boot if
    /// every check held and the plan reached its end within `deadline`.
    pub fn run_preset(
        &self,
        preset: &Preset,
        deadline: Duration,
        echo: bool,
    ) -> Result<Boot, BenchError> {
        let dir = self.cache.join("runs");
        std::fs::create_dir_all(&dir).map_err(io_err(&dir))?;
        let marker = new_marker();
        let initrd = dir.join(format!("{}.cpio", preset.name));
        build_initramfs(
            preset,
            &self.tools,
            &self.bins,
            (&marker, self.only.as_deref(), self.scx.as_deref()),
            &self.extra,
            &initrd,
        )?;
        let mut boots = 0;
        let boot = loop {
            boots += 1;
            // Each attempt keeps its own console log.
            let log = match boots {
                1 => dir.join(format!("{}.log", preset.name)),
                n => dir.join(format!("{}.boot{n}.log", preset.name)),
            };
            let mut boot = boot(
                (&self.tools, &self.kernel),
                preset,
                &initrd,
                &marker,
                deadline,
                &log,
                echo,
            )?;
            boot.boots = boots;
            if boots >= BOOT_ATTEMPTS || !worth_another_boot(&boot) {
                break boot;
            }
            let why = match &boot.emulator_fault {
                Some(line) => format!(
                    "the guest kernel met the emulator's int3 fault ({line}) after {} checks",
                    boot.outcome.checks.len()
                ),
                None => "the guest ended before the plan began".to_string(),
            };
            eprintln!(
                "{}: {why} (boot {boots} of {BOOT_ATTEMPTS}, log {}); booting again",
                preset.name,
                boot.log.display()
            );
        };
        let mut why = boot.outcome.verdict(&preset.name).err();
        if boot.timed_out {
            let t = format!("the guest did not finish within {deadline:?} and was killed");
            why = Some(why.map_or(t.clone(), |w| format!("{t}\n{w}")));
        }
        if let Some(fault) = &boot.emulator_fault {
            why = why.map(|w| {
                format!("{w}\nthe guest kernel met the emulator's int3 fault (see BOOT_ATTEMPTS): {fault}")
            });
        }
        if boots > 1 {
            why = why.map(|w| format!("{w}\n(after {boots} boots)"));
        }
        match why {
            None => Ok(boot),
            Some(why) => Err(BenchError::Guest {
                preset: preset.name.clone(),
                why,
                log: boot.log,
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_guest_is_booted_again_only_before_the_plan_or_after_the_emulators_fault() {
        let boot = |begun: Option<&str>, end: bool, fault: bool, timed_out: bool| Boot {
            outcome: Outcome {
                begun: begun.map(str::to_string),
                end: end.then_some((3, 3)),
                ..Outcome::default()
            },
            timed_out,
            wall: Duration::from_secs(3),
            log: PathBuf::from("x.log"),
            boots: 1,
            emulator_fault: fault.then(|| "Oops: int3: 0000 [#1] PREEMPT SMP NOPTI".to_string()),
        };
        assert!(
            worth_another_boot(&boot(None, false, false, false)),
            "a panic in early boot"
        );
        assert!(
            worth_another_boot(&boot(Some("4llc-16"), false, true, false)),
            "the emulator's int3 fault in the middle of the plan"
        );
        assert!(
            !worth_another_boot(&boot(None, false, false, true)),
            "a hang is final"
        );
        assert!(
            !worth_another_boot(&boot(Some("4llc-16"), false, true, true)),
            "a hang is final even after the fault"
        );
        assert!(
            !worth_another_boot(&boot(Some("1llc-4"), false, false, false)),
            "a plan that began and stopped without the fault is judged, never retried"
        );
        assert!(
            !worth_another_boot(&boot(Some("1llc-4"), true, true, false)),
            "a plan that reached its end is judged, whatever came after"
        );
    }

    #[test]
    fn the_int3_oops_is_told_from_other_console_lines() {
        for oops in [
            "[   33.120456] Oops: int3: 0000 [#1] PREEMPT SMP NOPTI",
            "Oops: int3: 0000 [#1] PREEMPT SMP NOPTI",
            "[    2.001] int3: 0000 [#1] SMP",
        ] {
            assert!(is_kernel_int3_oops(oops), "{oops}");
        }
        for other in [
            "[   33.2] Oops: general protection fault, probably for non-canonical address",
            "[   33.3] traps: spin[123] trap int3 ip:401000 sp:7ffd0 error:0 in spin[401000+1000]",
            "int3: handled",
        ] {
            assert!(!is_kernel_int3_oops(other), "{other}");
        }
    }

    #[test]
    fn kernel_packages_order_by_version_not_by_text() {
        let mut names = [
            "linux-image-6.12.9+deb12-amd64-unsigned",
            "linux-image-6.12.117+deb12-amd64-unsigned",
            "linux-image-6.12.41+deb12-amd64-unsigned",
        ];
        names.sort_by_key(|n| version_key(n));
        assert_eq!(names[2], "linux-image-6.12.117+deb12-amd64-unsigned");
    }

    #[test]
    fn the_init_script_runs_the_plan_with_the_marker_then_powers_off() {
        let p = Preset::by_name("1llc-4").unwrap();
        let s = init_script(&p, "MK", None, false);
        assert!(s.contains("plan --preset 1llc-4 --marker MK"), "{s}");
        assert!(!s.contains("--scx"), "the default plan: {s}");
        let s = init_script(&p, "MK", Some("scx-load-unload"), true);
        assert!(s.contains("--only scx-load-unload --scx"), "{s}");
        assert!(s.contains("mount -t cgroup2"));
        assert!(s.trim_end().ends_with("poweroff -f"));
    }
}
