//! stress-ng for the `--scx` guest's soak check (`scx-soak`), fetched through apt without
//! installing it on the host.
//!
//! ```text
//!  cache/stress-ng/ present? ── yes ──► use it
//!        │ no
//!  apt-get download stress-ng + each of its Depends this host lacks (cache/debs)
//!  dpkg-deb -x each into cache/stress-ng.tmp, then rename to cache/stress-ng
//!  ldd usr/bin/stress-ng with LD_LIBRARY_PATH = the unpacked library folders
//!        └► the guest gets /opt/dfsched/stress-ng and every library ldd lists: an unpacked one at
//!           its path inside the package, a host one at its host path
//! ```
//!
//! Invariant: the host's installed packages are never changed (only `apt-get update` may run,
//! as root, when apt knows no stress-ng), and a library `ldd` cannot find is an error naming it,
//! never a guest that fails to start stress-ng.

use crate::host::{can_install, io_err, ldd, run, which, BenchError};
use std::path::{Path, PathBuf};
use std::process::Command;

/// Where stress-ng is in the guest.
pub const GUEST_PATH: &str = "/opt/dfsched/stress-ng";

/// The library folders of an unpacked Debian package tree, for `LD_LIBRARY_PATH`.
const LIB_DIRS: [&str; 2] = ["usr/lib/x86_64-linux-gnu", "lib/x86_64-linux-gnu"];

/// Whether package `name` is installed on this host.
fn installed(name: &str) -> bool {
    Command::new("dpkg-query")
        .args(["-W", "-f=${Status}", name])
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains("ok installed"))
}

/// The package names of `apt-cache depends`' `Depends:` lines (alternatives `|Depends` too).
fn depends_of(text: &str) -> Vec<String> {
    text.lines()
        .filter_map(|l| {
            let l = l.trim().trim_start_matches('|');
            let name = l.strip_prefix("Depends:")?.trim();
            // A virtual package shows as `<name>`: nothing to download under that name.
            (!name.starts_with('<')).then(|| name.to_string())
        })
        .collect()
}

/// The files the guest needs for stress-ng, host path → guest path: the binary, then its
/// libraries. Fetches and unpacks it the first time (see the module doc).
pub fn ensure_stress_ng(cache: &Path) -> Result<Vec<(PathBuf, String)>, BenchError> {
    let dir = cache.join("stress-ng");
    let bin = dir.join("usr/bin/stress-ng");
    if !bin.is_file() {
        fetch(cache, &dir)?;
    }
    if !bin.is_file() {
        return Err(BenchError::Missing {
            what: bin.display().to_string(),
            how: "the stress-ng package held no usr/bin/stress-ng".into(),
        });
    }
    let mut files = vec![(bin.clone(), GUEST_PATH.to_string())];
    files.extend(libraries(&dir, &bin)?);
    Ok(files)
}

/// Downloads stress-ng and the dependencies this host lacks, and unpacks them into `dir`.
fn fetch(cache: &Path, dir: &Path) -> Result<(), BenchError> {
    for tool in ["apt-get", "apt-cache", "dpkg-deb", "dpkg-query"] {
        if which(tool).is_none() {
            return Err(BenchError::Missing {
                what: "stress-ng (for scx-soak)".into(),
                how: format!("no {tool} to fetch the Debian package"),
            });
        }
    }
    let known = || {
        Command::new("apt-cache")
            .args(["depends", "stress-ng"])
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
    };
    let mut deps = known();
    if deps.is_none() && can_install().is_ok() {
        run(Command::new("apt-get").args(["update", "-q"]))?;
        deps = known();
    }
    let Some(deps) = deps else {
        return Err(BenchError::Missing {
            what: "stress-ng (for scx-soak)".into(),
            how: "apt knows no stress-ng package (Debian 12: 0.15.06)".into(),
        });
    };
    let mut packages = vec!["stress-ng".to_string()];
    packages.extend(depends_of(&deps).into_iter().filter(|p| !installed(p)));
    let debs = cache.join("debs");
    std::fs::create_dir_all(&debs).map_err(io_err(&debs))?;
    eprintln!(
        "vmbench: downloading {} with apt-get download (not installed)",
        packages.join(" ")
    );
    run(Command::new("apt-get")
        .current_dir(&debs)
        // As root, apt drops to user _apt, which may not write here.
        .args(["-o", "APT::Sandbox::User=root", "download"])
        .args(&packages))?;
    let unpack = cache.join("stress-ng.tmp");
    let _ = std::fs::remove_dir_all(&unpack);
    std::fs::create_dir_all(&unpack).map_err(io_err(&unpack))?;
    for p in &packages {
        let deb = std::fs::read_dir(&debs)
            .map_err(io_err(&debs))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .find(|d| {
                d.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with(&format!("{p}_")) && n.ends_with(".deb"))
            })
            .ok_or_else(|| BenchError::Missing {
                what: format!("the downloaded {p}"),
                how: "apt-get download left no .deb".into(),
            })?;
        run(Command::new("dpkg-deb").arg("-x").arg(&deb).arg(&unpack))?;
        let _ = std::fs::remove_file(&deb);
    }
    let _ = std::fs::remove_dir_all(dir);
    std::fs::rename(&unpack, dir).map_err(io_err(dir))
}

/// What `ldd` lists for `bin` with the unpacked tree `dir`'s library folders searched first:
/// host path → guest path. A library it cannot find is an error.
fn libraries(dir: &Path, bin: &Path) -> Result<Vec<(PathBuf, String)>, BenchError> {
    let search: Vec<PathBuf> = LIB_DIRS.iter().map(|d| dir.join(d)).collect();
    let (found, missing) = ldd(bin, &search)?;
    if !missing.is_empty() {
        return Err(BenchError::Missing {
            what: format!("libraries of stress-ng: {}", missing.join(", ")),
            how: format!(
                "neither the host nor the packages unpacked in {} have them",
                dir.display()
            ),
        });
    }
    Ok(found
        .into_iter()
        .map(|host| {
            let guest = match host.strip_prefix(dir) {
                Ok(inside) => format!("/{}", inside.display()),
                Err(_) => host.display().to_string(),
            };
            (host, guest)
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::host::parse_ldd;

    #[test]
    #[ignore = "downloads stress-ng and its missing dependencies with apt-get"]
    fn stress_ng_is_fetched_unpacked_and_its_libraries_found() {
        let tmp = tempfile::Builder::new()
            .prefix("dfsched-stress-ng-")
            .tempdir()
            .unwrap();
        let files = ensure_stress_ng(tmp.path()).expect("stress-ng fetched");
        assert_eq!(files[0].1, GUEST_PATH);
        assert!(files[0].0.is_file());
        // Every library has a guest path outside the cache (unpacked ones at their package path).
        assert!(files
            .iter()
            .all(|(h, g)| h.is_file() && g.starts_with('/') && !g.contains("dfsched-stress-ng")));
    }

    #[test]
    fn depends_lines_give_the_packages_to_fetch() {
        let text = "stress-ng\n  Depends: libapparmor1\n  Depends: libc6\n |Depends: libgbm1\n  Depends: <libfoo>\n  Recommends: bar\n";
        assert_eq!(depends_of(text), ["libapparmor1", "libc6", "libgbm1"]);
    }

    #[test]
    fn ldd_output_splits_into_found_paths_and_missing_names() {
        let text = "\tlinux-vdso.so.1 (0x00007ffd)\n\
                    \tlibJudy.so.1 => not found\n\
                    \tlibc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x00007f)\n\
                    \t/lib64/ld-linux-x86-64.so.2 (0x00007f)\n";
        let (found, missing) = parse_ldd(text);
        assert_eq!(
            found,
            [
                PathBuf::from("/lib/x86_64-linux-gnu/libc.so.6"),
                PathBuf::from("/lib64/ld-linux-x86-64.so.2")
            ]
        );
        assert_eq!(missing, ["libJudy.so.1"]);
    }
}
