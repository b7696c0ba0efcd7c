//! Names inside a job's sandbox, resolved so that nothing outside it can be
//! reached: relative names only, no `.` or `..` component, and every
//! component opened relative to its parent directory without following a
//! symbolic link, so a link the job planted cannot point the agent (which may
//! run as root) at another user's files.

use std::fs::File;
use std::io;
use std::os::fd::OwnedFd;
use std::path::Path;

use rustix::fs::{fstat, openat, FileType, Mode, OFlags, CWD};

/// Checks that `name` is a relative path of plain components (`a/b.txt`),
/// and returns its components; the message says what is wrong.
pub fn components(name: &str) -> Result<Vec<&str>, String> {
    if name.is_empty() {
        return Err("the name is empty".into());
    }
    if name.starts_with('/') {
        return Err(format!(
            "`{name}` is an absolute name; give one relative to the job's directory"
        ));
    }
    if name.contains('\0') {
        return Err("the name holds a NUL character".into());
    }
    let parts: Vec<&str> = name.split('/').collect();
    if parts.iter().any(|p| p.is_empty() || *p == "." || *p == "..") {
        return Err(format!(
            "`{name}` has an empty, `.` or `..` component; names stay inside the job's directory"
        ));
    }
    Ok(parts)
}

fn dir_flags() -> OFlags {
    OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC
}

/// Opens the directory `root` itself (it must not be a symbolic link).
fn open_root(root: &Path) -> io::Result<OwnedFd> {
    Ok(openat(CWD, root, dir_flags(), Mode::empty())?)
}

/// Walks to the directory holding the last component of `parts`.
fn parent_of(root: &Path, parts: &[&str]) -> io::Result<OwnedFd> {
    let mut dir = open_root(root)?;
    for p in &parts[..parts.len().saturating_sub(1)] {
        dir = openat(&dir, *p, dir_flags(), Mode::empty())?;
    }
    Ok(dir)
}

/// Opens `name` inside `root` with `flags`, following no link on the way or
/// at its end.
fn open_in(root: &Path, name: &str, flags: OFlags, mode: Mode) -> io::Result<OwnedFd> {
    let parts = components(name).map_err(bad)?;
    let dir = parent_of(root, &parts)?;
    let last = parts[parts.len() - 1];
    Ok(openat(&dir, last, flags | OFlags::NOFOLLOW | OFlags::CLOEXEC, mode)?)
}

fn bad(message: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, message)
}

/// Opens the regular file `name` inside `root` for reading. A symbolic link
/// anywhere on the way, a directory, a FIFO or a device is refused; opening
/// never blocks (a FIFO is opened non-blocking, then refused).
pub fn open_read(root: &Path, name: &str) -> io::Result<File> {
    open_read_owned(root, name, None)
}

/// [`open_read`], refusing a file that `owner` (a uid) does not own: a job
/// running as its own account could hard-link another account's file into
/// its sandbox, and the agent, as root, would read it.
pub fn open_read_owned(root: &Path, name: &str, owner: Option<u32>) -> io::Result<File> {
    let fd = open_in(root, name, OFlags::RDONLY | OFlags::NONBLOCK, Mode::empty())?;
    let stat = fstat(&fd)?;
    if FileType::from_raw_mode(stat.st_mode) != FileType::RegularFile {
        return Err(bad(format!("`{name}` is not a regular file")));
    }
    if owner.is_some_and(|uid| stat.st_uid != uid) {
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!("`{name}` does not belong to the job's account"),
        ));
    }
    // Back to blocking reads for the caller.
    rustix::fs::fcntl_setfl(&fd, OFlags::empty())?;
    Ok(File::from(fd))
}

/// Creates the regular file `name` inside `root` afresh for writing, with
/// mode 0600; its parent directories must already exist. Whatever had the
/// name is unlinked first, and the file made with `O_EXCL`: the agent (which
/// may be root) never truncates, writes or `chown`s through a hard link or
/// a symbolic link the job planted under that name.
pub fn create_write(root: &Path, name: &str) -> io::Result<File> {
    let parts = components(name).map_err(bad)?;
    let dir = parent_of(root, &parts)?;
    let last = parts[parts.len() - 1];
    match rustix::fs::unlinkat(&dir, last, rustix::fs::AtFlags::empty()) {
        Ok(()) | Err(rustix::io::Errno::NOENT) => {}
        Err(e) => return Err(e.into()),
    }
    let fd = openat(
        &dir,
        last,
        OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::RUSR | Mode::WUSR,
    )?;
    Ok(File::from(fd))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    fn scratch(tag: &str) -> std::path::PathBuf {
        let d = std::env::temp_dir().join(format!("brokk-sandbox-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(d.join("box/sub")).unwrap();
        d
    }

    #[test]
    fn reads_plain_and_nested_names() {
        let d = scratch("plain");
        std::fs::write(d.join("box/out.txt"), "hello").unwrap();
        std::fs::write(d.join("box/sub/deep.txt"), "deep").unwrap();
        let mut s = String::new();
        open_read(&d.join("box"), "out.txt")
            .unwrap()
            .read_to_string(&mut s)
            .unwrap();
        assert_eq!(s, "hello");
        s.clear();
        open_read(&d.join("box"), "sub/deep.txt")
            .unwrap()
            .read_to_string(&mut s)
            .unwrap();
        assert_eq!(s, "deep");
    }

    #[test]
    fn refuses_escapes_links_and_special_files() {
        let d = scratch("escape");
        std::fs::write(d.join("secret.txt"), "secret").unwrap();
        let root = d.join("box");
        for name in [
            "../secret.txt",
            "/etc/passwd",
            "sub/../../secret.txt",
            "",
            "a//b",
            "./x",
        ] {
            let e = open_read(&root, name).unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::InvalidInput, "{name}");
        }
        std::os::unix::fs::symlink(d.join("secret.txt"), root.join("link")).unwrap();
        std::os::unix::fs::symlink(&d, root.join("up")).unwrap();
        assert!(open_read(&root, "link").is_err());
        assert!(open_read(&root, "up/secret.txt").is_err());
        assert_eq!(std::fs::read_to_string(d.join("secret.txt")).unwrap(), "secret");
        assert!(open_read(&root, "sub").is_err());
        nix::unistd::mkfifo(&root.join("fifo"), nix::sys::stat::Mode::S_IRWXU).unwrap();
        assert!(open_read(&root, "fifo").is_err());
    }

    #[test]
    fn a_file_written_afresh_leaves_what_a_planted_link_points_at() {
        let d = scratch("fresh");
        std::fs::write(d.join("secret.txt"), "secret").unwrap();
        let root = d.join("box");
        std::fs::hard_link(d.join("secret.txt"), root.join("hard")).unwrap();
        std::os::unix::fs::symlink(d.join("secret.txt"), root.join("soft")).unwrap();
        for name in ["hard", "soft"] {
            std::io::Write::write_all(&mut create_write(&root, name).unwrap(), b"mine").unwrap();
            assert_eq!(std::fs::read_to_string(root.join(name)).unwrap(), "mine");
            assert!(!std::fs::symlink_metadata(root.join(name))
                .unwrap()
                .file_type()
                .is_symlink());
        }
        assert_eq!(std::fs::read_to_string(d.join("secret.txt")).unwrap(), "secret");
        // A directory in the way stays, and the write fails.
        std::fs::create_dir(root.join("dir")).unwrap();
        assert!(create_write(&root, "dir").is_err());
    }
}
