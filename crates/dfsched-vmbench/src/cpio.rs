//! A minimal writer of the `newc` cpio format, which is what the kernel
//! unpacks as an initramfs (uncompressed: no compressor is needed on the
//! host, and the kernel accepts it as it is).
//!
//! Invariant: every entry's header is 110 bytes of ASCII hex fields, the
//! name is NUL-terminated and header+name and data are each padded to 4
//! bytes; the archive ends with the `TRAILER!!!` entry.

use std::io::{self, Write};

/// An archive being written to `out`.
pub struct Writer<W: Write> {
    out: W,
    /// Bytes written so far (for the 4-byte padding).
    at: u64,
    /// The next inode number.
    ino: u32,
}

impl<W: Write> Writer<W> {
    /// An empty archive.
    pub fn new(out: W) -> Self {
        Writer { out, at: 0, ino: 1 }
    }

    fn put(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.out.write_all(bytes)?;
        self.at += bytes.len() as u64;
        Ok(())
    }

    fn pad(&mut self) -> io::Result<()> {
        let n = (4 - self.at % 4) % 4;
        self.put(&[0u8; 3][..n as usize])
    }

    fn entry(&mut self, name: &str, mode: u32, data: &[u8]) -> io::Result<()> {
        let name = name.trim_start_matches('/');
        let ino = self.ino;
        self.ino += 1;
        let header = format!(
            "070701{ino:08x}{mode:08x}{uid:08x}{gid:08x}{nlink:08x}{mtime:08x}{size:08x}\
             {dmaj:08x}{dmin:08x}{rmaj:08x}{rmin:08x}{namesize:08x}{check:08x}",
            uid = 0,
            gid = 0,
            nlink = 1,
            mtime = 0,
            size = data.len(),
            dmaj = 0,
            dmin = 0,
            rmaj = 0,
            rmin = 0,
            namesize = name.len() + 1,
            check = 0,
        );
        self.put(header.as_bytes())?;
        self.put(name.as_bytes())?;
        self.put(&[0])?;
        self.pad()?;
        self.put(data)?;
        self.pad()
    }

    /// A directory (its parents must come first).
    pub fn dir(&mut self, name: &str) -> io::Result<()> {
        self.entry(name, 0o040755, &[])
    }

    /// A regular file with permissions `perm` (e.g. 0o755).
    pub fn file(&mut self, name: &str, perm: u32, data: &[u8]) -> io::Result<()> {
        self.entry(name, 0o100000 | perm, data)
    }

    /// A symbolic link `name` → `target`.
    pub fn symlink(&mut self, name: &str, target: &str) -> io::Result<()> {
        self.entry(name, 0o120777, target.as_bytes())
    }

    /// Writes the trailer and returns the output.
    pub fn finish(mut self) -> io::Result<W> {
        self.entry("TRAILER!!!", 0, &[])?;
        self.out.flush()?;
        Ok(self.out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_are_aligned_and_the_archive_ends_with_the_trailer() {
        let mut w = Writer::new(Vec::new());
        w.dir("/bin").unwrap();
        w.file("/bin/x", 0o755, b"hello").unwrap();
        w.symlink("/bin/y", "x").unwrap();
        let out = w.finish().unwrap();
        assert_eq!(out.len() % 4, 0);
        assert!(out.starts_with(b"070701"));
        let text = String::from_utf8_lossy(&out);
        assert!(text.contains("bin/x\0"), "{text}");
        assert!(text.contains("hello"));
        assert!(text.contains("TRAILER!!!\0"));
        // The file's header: mode 0100755, size 5.
        let at = text.find("bin/x\0").unwrap() - 110;
        assert_eq!(&text[at + 14..at + 22], "000081ed");
        assert_eq!(&text[at + 54..at + 62], "00000005");
    }
}
