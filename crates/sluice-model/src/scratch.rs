//! Files a process keeps in places other users share (`$TMPDIR`, `/dev/shm`, an output
//! directory), made so that nothing is left behind and nothing another local user can touch.
//!
//! - **One private directory per process**, [`dir`]: `$TMPDIR/sluice-<uid>/<tag>-<random>`,
//!   both levels mode 0700 and checked to be real directories owned by this user (a squatted
//!   `sluice-<uid>` is not used: a fresh `sluice-<uid>-<random>` is made instead). It is removed
//!   when the process exits normally; what a killed process left is removed by the next one.
//! - **Owner tags**, [`tag`]: `<pid>.<start>.<ns>` (the start time in clock ticks since boot
//!   and the pid namespace, from `/proc`), put into every name a sweep may later judge. A
//!   tag's owner is dead when `kill(pid, 0)` says ESRCH, or when a live process with that pid
//!   started at another time (the pid was reused). A tag from another pid namespace (a
//!   container sharing `/dev/shm` or `/tmp`) is never judged dead: its pid means nothing here.
//!   Tags of older versions, a bare `<pid>`, are judged by pid alone.
//! - **Sweeps**, [`sweep_once`]: a directory's entries whose owner is dead are removed, at most
//!   once per process per directory and kind; only plain files and directories owned by this
//!   user, never through a symbolic link.
//! - **Exclusive creation**, [`create_new_file`]: `O_CREAT|O_EXCL|O_NOFOLLOW` with a given
//!   mode, for names that end in [`random_hex`], so a name planted in advance (a symlink to a
//!   file the trainer can write) makes creation fail instead of writing through it.
//!
//! ```
//! let d = sluice_model::scratch::dir()?;
//! let f = d.join(format!("example-{}", sluice_model::scratch::random_hex()));
//! sluice_model::scratch::create_new_file(&f, 0o600).unwrap();
//! assert!(f.exists());
//! # Ok::<(), sluice_model::Error>(())
//! ```

use std::collections::HashSet;
use std::fs::{DirBuilder, File, OpenOptions};
use std::io;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Mutex, Once};

use crate::error::{Error, Result};

/// This process's owner tag, `<pid>.<start>.<ns>` (0 for what `/proc` cannot tell).
///
/// Computed per call so that a forked child never names its files with its parent's tag.
///
/// ```
/// let t = sluice_model::scratch::tag();
/// assert!(t.starts_with(&format!("{}.", std::process::id())));
/// assert_eq!(t.split('.').count(), 3);
/// ```
pub fn tag() -> String {
    let pid = std::process::id();
    format!(
        "{pid}.{}.{}",
        start_time(pid).unwrap_or(0),
        pid_namespace().unwrap_or(0)
    )
}

/// The inode number of this process's pid namespace (`/proc/self/ns/pid` reads
/// `pid:[4026531836]`); a process never changes its own.
fn pid_namespace() -> Option<u64> {
    static NS: std::sync::OnceLock<Option<u64>> = std::sync::OnceLock::new();
    *NS.get_or_init(|| {
        let link = std::fs::read_link("/proc/self/ns/pid").ok()?;
        link.to_str()?
            .strip_prefix("pid:[")?
            .strip_suffix(']')?
            .parse()
            .ok()
    })
}

/// 16 hex digits from the kernel's random source (the clock and a counter if it fails): the
/// unpredictable part of a name another user must not guess.
///
/// ```
/// assert_ne!(sluice_model::scratch::random_hex(), sluice_model::scratch::random_hex());
/// ```
pub fn random_hex() -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut buf = [0u8; 8];
    // SAFETY: getrandom writes at most `buf.len()` bytes into `buf`.
    let n = unsafe { libc::getrandom(buf.as_mut_ptr().cast(), buf.len(), 0) };
    let mut v = u64::from_le_bytes(buf);
    if n != buf.len() as isize {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        v = crate::rng::mix64(now ^ crate::rng::mix64(COUNTER.fetch_add(1, Relaxed)))
            ^ u64::from(std::process::id());
    }
    format!("{v:016x}")
}

/// Start time of process `pid` in clock ticks since boot (`/proc/<pid>/stat`, field 22).
fn start_time(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) is in parentheses and may hold spaces or ')'.
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(19)?.parse().ok()
}

/// `(pid, start time)` of a child process that has exited and been reaped: the parts of a
/// dead owner's tag, for the sweep tests here and in the crates that sweep.
#[doc(hidden)]
pub fn dead_process() -> (u32, String) {
    let mut child = std::process::Command::new("true")
        .spawn()
        .expect("cannot start `true`");
    let pid = child.id();
    let start = start_time(pid).map_or_else(|| "1".into(), |t| t.to_string());
    let _ = child.wait();
    (pid, start)
}

/// Whether the owner of `tag` (`<pid>.<start>.<ns>`, `<pid>.<start>` or a bare `<pid>`) may
/// still be running. Anything that is not a tag counts as alive, so it is never removed.
///
/// ```
/// use sluice_model::scratch::{owner_alive, tag};
/// assert!(owner_alive(&tag()));
/// assert!(owner_alive("not-a-tag"));
/// ```
pub fn owner_alive(tag: &str) -> bool {
    let mut parts = tag.split('.');
    let Some(Ok(pid)) = parts.next().map(str::parse::<u32>) else {
        return true;
    };
    let mut number = || parts.next().map(str::parse::<u64>);
    let start = match number() {
        None => None,
        Some(Ok(s)) => Some(s),
        Some(Err(_)) => return true,
    };
    let ns = match number() {
        None => None,
        Some(Ok(n)) => Some(n),
        Some(Err(_)) => return true,
    };
    if pid == 0 || pid > i32::MAX as u32 || parts.next().is_some() {
        return true;
    }
    if let (Some(theirs), Some(ours)) = (ns, pid_namespace()) {
        if theirs != 0 && theirs != ours {
            return true;
        }
    }
    // SAFETY: signal 0 only checks that the process exists; nothing is sent.
    let r = unsafe { libc::kill(pid as libc::pid_t, 0) };
    if r != 0 && io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH) {
        return false;
    }
    // A process with that pid exists (EPERM: another user's): the owner only if it started
    // when the tag says. An unknown start (0, or no /proc) cannot tell a reused pid apart.
    match (start, start_time(pid)) {
        (Some(s), Some(now)) if s != 0 => s == now,
        _ => true,
    }
}

/// The owner tag in `name` after `prefix`: the text up to the next `-` (or the end), if it
/// looks like a tag (one to three dot-separated numbers).
///
/// ```
/// use sluice_model::scratch::owner_in;
/// assert_eq!(owner_in("sluice-spill-12.345-ab", "sluice-spill-"), Some("12.345"));
/// assert_eq!(owner_in("sluice-spill-12-0", "sluice-spill-"), Some("12"));
/// assert_eq!(owner_in("12.34.56-x", ""), Some("12.34.56"));
/// assert_eq!(owner_in("sluice-shm-x", "sluice-"), None);
/// ```
pub fn owner_in<'a>(name: &'a str, prefix: &str) -> Option<&'a str> {
    let rest = name.strip_prefix(prefix)?;
    let tag = rest.split('-').next()?;
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    (tag.split('.').count() <= 3 && tag.split('.').all(digits)).then_some(tag)
}

/// Removes the entries of `dir` whose name `owner` maps to the tag of a dead process (see
/// [`owner_in`]); returns how many. Only plain files and directories owned by this user are removed (a directory with
/// everything in it, symbolic links inside removed, never followed); symbolic links and other
/// users' entries are left alone.
pub fn sweep(dir: &Path, owner: impl Fn(&str) -> Option<String>) -> usize {
    sweep_entries(dir, true, owner)
}

fn sweep_entries(dir: &Path, dirs_too: bool, owner: impl Fn(&str) -> Option<String>) -> usize {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    // SAFETY: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
    let mut removed = 0;
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(name) = name.to_str() else { continue };
        let Some(tag) = owner(name) else { continue };
        if owner_alive(&tag) {
            continue;
        }
        // `DirEntry::metadata` does not follow a symbolic link.
        let Ok(meta) = e.metadata() else { continue };
        if meta.uid() != me {
            continue;
        }
        let path = e.path();
        let gone = if meta.file_type().is_dir() && dirs_too {
            std::fs::remove_dir_all(&path)
        } else if meta.file_type().is_file() {
            std::fs::remove_file(&path)
        } else {
            continue;
        };
        if gone.is_ok() {
            removed += 1;
        }
    }
    removed
}

/// [`sweep`] of `dir` for `kind` (a name for the `owner` rule), at most once per process.
pub fn sweep_once(dir: &Path, kind: &str, owner: impl Fn(&str) -> Option<String>) -> usize {
    if first_sweep(dir, kind) {
        sweep_entries(dir, true, owner)
    } else {
        0
    }
}

/// [`sweep_once`] that removes plain files only (for a directory such as `/dev/shm` where a
/// directory of a matching name is none of ours).
pub fn sweep_files_once(dir: &Path, kind: &str, owner: impl Fn(&str) -> Option<String>) -> usize {
    if first_sweep(dir, kind) {
        sweep_entries(dir, false, owner)
    } else {
        0
    }
}

/// Whether this process has not swept `dir` for `kind` yet (and now counts it as swept).
fn first_sweep(dir: &Path, kind: &str) -> bool {
    static SWEPT: Mutex<Option<HashSet<(u32, PathBuf, String)>>> = Mutex::new(None);
    let key = (std::process::id(), dir.to_path_buf(), kind.to_string());
    let mut swept = SWEPT.lock().unwrap_or_else(|p| p.into_inner());
    swept.get_or_insert_with(HashSet::new).insert(key)
}

/// Creates `path` for reading and writing with `mode` (less the umask), failing if anything
/// is there already, a symbolic link included.
pub fn create_new_file(path: &Path, mode: u32) -> io::Result<File> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .mode(mode)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
}

/// Creates directory `path` with mode 0700 (its parent must exist; fails if `path` does).
pub fn create_private_dir(path: &Path) -> io::Result<()> {
    DirBuilder::new().mode(0o700).create(path)
}

/// Whether `path` is a real directory (not a link) owned by this user; tightened to 0700 if
/// it was looser.
fn usable_parent(path: &Path) -> bool {
    let Ok(meta) = std::fs::symlink_metadata(path) else {
        return false;
    };
    // SAFETY: geteuid has no preconditions.
    if !meta.file_type().is_dir() || meta.uid() != unsafe { libc::geteuid() } {
        return false;
    }
    meta.mode() & 0o077 == 0
        || std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o700)).is_ok()
}

/// The parent of per-process directories: `base/sluice-<uid>`, or a fresh random one beside it
/// when that name is taken by someone else.
fn parent_in(base: &Path) -> io::Result<PathBuf> {
    // SAFETY: geteuid has no preconditions.
    let uid = unsafe { libc::geteuid() };
    let shared = base.join(format!("sluice-{uid}"));
    match create_private_dir(&shared) {
        Ok(()) => return Ok(shared),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(e),
    }
    if usable_parent(&shared) {
        return Ok(shared);
    }
    loop {
        let own = base.join(format!("sluice-{uid}-{}", random_hex()));
        match create_private_dir(&own) {
            Ok(()) => return Ok(own),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        }
    }
}

/// The process's directory and its parent, with the pid that made them (a forked child makes
/// its own).
type Made = (u32, PathBuf, PathBuf);

static DIR: Mutex<Option<Made>> = Mutex::new(None);
/// Paths removed at a normal exit, with the pid that registered them.
static AT_EXIT: Mutex<Vec<(u32, PathBuf)>> = Mutex::new(Vec::new());

/// This process's private directory (mode 0700, under `$TMPDIR/sluice-<uid>`), made on first
/// use. Making it sweeps the directories of dead processes beside it and the files older
/// versions left in `$TMPDIR` (`sluice-cache-<pid>-*`, `sluice-spill-<pid>-*`), and arranges
/// its removal at a normal exit.
pub fn dir() -> Result<PathBuf> {
    let pid = std::process::id();
    let mut made = DIR.lock().unwrap_or_else(|p| p.into_inner());
    if let Some((p, d, _)) = made.as_ref() {
        if *p == pid {
            return Ok(d.clone());
        }
    }
    let base = std::env::temp_dir();
    let fail = |e: io::Error| Error::io(base.display(), e);
    // A `$TMPDIR` that does not exist yet is made, as spilling always did.
    std::fs::create_dir_all(&base).map_err(fail)?;
    // Another process's exit may remove an empty parent between our mkdirs: try again.
    let mut tries = 0;
    let (parent, own) = loop {
        let parent = parent_in(&base).map_err(fail)?;
        let own = parent.join(format!("{}-{}", tag(), random_hex()));
        match create_private_dir(&own) {
            Ok(()) => break (parent, own),
            Err(e) if e.kind() == io::ErrorKind::NotFound && tries < 8 => tries += 1,
            Err(e) => return Err(Error::io(own.display(), e)),
        }
    };
    sweep_once(&parent, "scratch", |n| owner_in(n, "").map(str::to_owned));
    sweep_once(&base, "legacy-cache", |n| {
        owner_in(n, "sluice-cache-").map(str::to_owned)
    });
    sweep_once(&base, "legacy-spill", |n| {
        owner_in(n, "sluice-spill-").map(str::to_owned)
    });
    register_exit_hook();
    *made = Some((pid, own.clone(), parent));
    Ok(own)
}

/// Removes `path` (a file, or a directory and everything in it) at a normal exit of this
/// process, if it is still there; [`forget_at_exit`] when it is removed earlier.
pub fn remove_at_exit(path: &Path) {
    register_exit_hook();
    let mut paths = AT_EXIT.lock().unwrap_or_else(|p| p.into_inner());
    paths.push((std::process::id(), path.to_path_buf()));
}

/// Drops `path` from [`remove_at_exit`]'s list.
pub fn forget_at_exit(path: &Path) {
    let mut paths = AT_EXIT.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(i) = paths.iter().position(|(_, p)| p == path) {
        paths.swap_remove(i);
    }
}

fn register_exit_hook() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // SAFETY: `at_exit` is a plain `extern "C" fn()` that never unwinds.
        unsafe { libc::atexit(at_exit) };
    });
}

fn remove_path(p: &Path) {
    match std::fs::symlink_metadata(p) {
        Ok(m) if m.file_type().is_dir() => {
            let _ = std::fs::remove_dir_all(p);
        }
        Ok(_) => {
            let _ = std::fs::remove_file(p);
        }
        Err(_) => {}
    }
}

extern "C" fn at_exit() {
    // `try_lock`: a thread stopped while holding a lock must not hang the exit. A forked child
    // inherits this hook and the lists, and must not remove its parent's files.
    let pid = std::process::id();
    let _ = std::panic::catch_unwind(|| {
        if let Ok(paths) = AT_EXIT.try_lock() {
            for (_, p) in paths.iter().filter(|(owner, _)| *owner == pid) {
                remove_path(p);
            }
        }
        if let Ok(made) = DIR.try_lock() {
            if let Some((owner, d, parent)) = made.as_ref() {
                if *owner == pid {
                    let _ = std::fs::remove_dir_all(d);
                    // Fails while another process's directory is in it: then it stays.
                    let _ = std::fs::remove_dir(parent);
                }
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn base(name: &str) -> PathBuf {
        let d =
            std::env::temp_dir().join(format!("sluice-scratch-test-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    /// The tag of a child process that has exited and been reaped.
    fn dead_tag() -> String {
        let (pid, start) = dead_process();
        format!("{pid}.{start}")
    }

    #[test]
    fn tags_tell_live_dead_and_reused_pids_apart() {
        assert!(owner_alive(&tag()));
        let me = std::process::id();
        assert!(owner_alive(&me.to_string()), "a bare pid: by pid alone");
        let start = start_time(me).unwrap();
        assert!(
            !owner_alive(&format!("{me}.{}", start + 1)),
            "same pid, other start: reused"
        );
        assert!(!owner_alive(&dead_tag()));
        let ns = pid_namespace().unwrap();
        assert!(!owner_alive(&format!("{}.{ns}", dead_tag())));
        assert!(
            owner_alive(&format!("{}.{}", dead_tag(), ns + 1)),
            "another pid namespace: its pids mean nothing here, kept"
        );
        for junk in ["", "x", "1.x", "0", "99999999999", "1.2.3.4", "1.2.x"] {
            assert!(owner_alive(junk), "{junk:?} is not a tag: kept");
        }
    }

    #[test]
    fn the_private_directory_is_0700_in_a_0700_parent_and_stable() {
        let d = dir().unwrap();
        assert_eq!(dir().unwrap(), d);
        for p in [d.as_path(), d.parent().unwrap()] {
            let m = std::fs::symlink_metadata(p).unwrap();
            assert!(m.is_dir());
            assert_eq!(m.mode() & 0o777, 0o700, "{}", p.display());
        }
        assert!(d.file_name().unwrap().to_str().unwrap().starts_with(&tag()));
    }

    #[test]
    fn a_squatted_parent_is_not_used() {
        let b = base("squat");
        let uid = unsafe { libc::geteuid() };
        // A symlink at the shared name (as another user would plant): a fresh one is made.
        let target = b.join("elsewhere");
        std::fs::create_dir(&target).unwrap();
        std::os::unix::fs::symlink(&target, b.join(format!("sluice-{uid}"))).unwrap();
        let p = parent_in(&b).unwrap();
        assert_ne!(p, b.join(format!("sluice-{uid}")));
        assert!(std::fs::symlink_metadata(&p).unwrap().is_dir());
        assert_eq!(std::fs::read_dir(&target).unwrap().count(), 0);
        // Our own but too open: tightened and used.
        let c = base("loose");
        let shared = c.join(format!("sluice-{uid}"));
        std::fs::create_dir(&shared).unwrap();
        std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o777)).unwrap();
        assert_eq!(parent_in(&c).unwrap(), shared);
        assert_eq!(std::fs::metadata(&shared).unwrap().mode() & 0o777, 0o700);
        let _ = std::fs::remove_dir_all(b);
        let _ = std::fs::remove_dir_all(c);
    }

    #[test]
    fn sweeps_remove_only_dead_owners_own_plain_entries_once() {
        let b = base("sweep");
        let dead = dead_tag();
        let live = tag();
        let target = b.join("target");
        std::fs::write(&target, b"keep").unwrap();
        std::fs::create_dir(b.join(format!("x-{dead}-dir"))).unwrap();
        std::fs::write(b.join(format!("x-{dead}-dir/f")), b"1").unwrap();
        // A link inside a dead directory is removed, its target not.
        std::os::unix::fs::symlink(&target, b.join(format!("x-{dead}-dir/l"))).unwrap();
        std::fs::write(b.join(format!("x-{dead}-file")), b"1").unwrap();
        std::fs::write(b.join(format!("x-{live}-file")), b"1").unwrap();
        std::os::unix::fs::symlink(&target, b.join(format!("x-{dead}-link"))).unwrap();
        std::fs::write(b.join("x-notatag-file"), b"1").unwrap();
        let n = sweep_once(&b, "test", |n| owner_in(n, "x-").map(str::to_owned));
        assert_eq!(n, 2, "the dead directory and the dead file");
        let mut left: Vec<String> = std::fs::read_dir(&b)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        left.sort();
        let mut want = vec![
            "target".to_string(),
            format!("x-{live}-file"),
            format!("x-{dead}-link"),
            "x-notatag-file".to_string(),
        ];
        want.sort();
        assert_eq!(left, want);
        assert_eq!(std::fs::read(&target).unwrap(), b"keep");
        std::fs::write(b.join(format!("x-{dead}-again")), b"1").unwrap();
        assert_eq!(
            sweep_once(&b, "test", |n| owner_in(n, "x-").map(str::to_owned)),
            0,
            "once"
        );
        assert_eq!(sweep(&b, |n| owner_in(n, "x-").map(str::to_owned)), 1);
        let _ = std::fs::remove_dir_all(b);
    }

    #[test]
    fn exclusive_creation_refuses_planted_names_and_links() {
        use std::os::unix::fs::PermissionsExt as _;
        let b = base("excl");
        let victim = b.join("victim");
        std::fs::write(&victim, b"precious").unwrap();
        let link = b.join("tmp-name");
        std::os::unix::fs::symlink(&victim, &link).unwrap();
        assert!(create_new_file(&link, 0o600).is_err());
        assert_eq!(std::fs::read(&victim).unwrap(), b"precious");
        let f = b.join("fresh");
        create_new_file(&f, 0o600).unwrap();
        assert_eq!(
            std::fs::metadata(&f).unwrap().permissions().mode() & 0o777,
            0o600
        );
        assert!(create_new_file(&f, 0o600).is_err(), "exists");
        let _ = std::fs::remove_dir_all(b);
    }
}
