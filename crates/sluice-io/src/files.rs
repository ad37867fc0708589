//! `read_files` and `read_images`: one sample per file or object, `{path, bytes}` (+ `label`).
//! Objects in a bucket are listed when the source opens (random access stays O(1) through
//! the listing) and fetched ahead of need ([`ReadAhead`]).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rayon::prelude::*;

use sluice_core::{Error, Result, Sample, Source, SourceRef, Value};

use crate::pathlist::PathList;
pub use crate::spec::LabelMode;
use crate::spec::SourceSpec;
use crate::store::{expand_list, is_url, ReadAhead};

/// Objects fetched ahead of need per remote source at most (its memory bound: this many
/// objects; how many are in flight follows the store's latency and the rate they are read).
pub const READ_AHEAD_OBJECTS: usize = 512;

/// File extensions `read_images` picks up when given a directory.
pub const IMAGE_EXTENSIONS: &[&str] = &["jpg", "jpeg", "png", "bmp", "gif", "webp", "tif", "tiff"];

/// Expands paths, directories (recursively, filtered by `extensions` if given) and globs into a
/// sorted list of regular files. Fails with `FileNotFound` if an entry matches nothing or does
/// not exist, and with an I/O error naming the reason for a path that is not a regular file
/// or directory (a device, a FIFO) or cannot be read (permission denied).
///
/// ```
/// let dir = std::env::temp_dir().join("sluice-doc-expand");
/// std::fs::create_dir_all(&dir).unwrap();
/// std::fs::write(dir.join("a.txt"), "x").unwrap();
/// let files = sluice_io::expand_paths(&[dir.join("*.txt").display().to_string()], None).unwrap();
/// assert_eq!(files.len(), 1);
/// ```
pub fn expand_paths(entries: &[String], extensions: Option<&[&str]>) -> Result<Vec<String>> {
    Ok(expand_path_list(entries, extensions)?.to_vec())
}

/// [`expand_paths`] into a [`PathList`] (one buffer for every path).
pub fn expand_path_list(entries: &[String], extensions: Option<&[&str]>) -> Result<PathList> {
    if entries.is_empty() {
        return Err(Error::invalid("no paths given"));
    }
    let mut out = PathList::default();
    for entry in entries {
        let before = out.len();
        if entry.contains(['*', '?', '[']) {
            let matches = glob::glob(entry)
                .map_err(|e| Error::invalid(format!("bad glob '{entry}': {e}")))?;
            let mut found: Vec<String> = matches
                .filter_map(|m| m.ok())
                .filter(|p| p.is_file())
                .map(|p| p.display().to_string())
                .collect();
            found.sort();
            found.iter().for_each(|f| out.push(f));
        } else {
            let p = Path::new(entry);
            match std::fs::metadata(p) {
                Ok(m) if m.is_dir() => {
                    let real = std::fs::canonicalize(p).map_err(|e| Error::io(entry, e))?;
                    out.append(walk(p.to_path_buf(), extensions, &[real])?);
                }
                Ok(m) if m.is_file() => {
                    // Named files are opened now, so an unreadable one fails here, not
                    // mid-epoch (directories' files are many: those fail when read).
                    std::fs::File::open(p).map_err(|e| Error::io(entry, e))?;
                    out.push(entry);
                }
                Ok(m) => {
                    return Err(Error::Io {
                        path: entry.clone(),
                        message: format!(
                            "not a regular file ({}); sluice reads regular files and directories",
                            kind_of(&m.file_type())
                        ),
                    })
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    let why = match std::fs::symlink_metadata(p) {
                        Ok(_) => "a symbolic link to a missing file",
                        Err(_) => "no such file or directory",
                    };
                    return Err(Error::FileNotFound(format!("{entry}: {why}")));
                }
                Err(e) => return Err(Error::io(entry, e)),
            }
        }
        if out.len() == before {
            return Err(Error::FileNotFound(format!("{entry}: matched no files")));
        }
    }
    Ok(out)
}

/// What a non-regular, non-directory file is, for messages ("a FIFO", "a character device"):
/// the one wording for every path sluice refuses to open.
pub fn kind_of(t: &std::fs::FileType) -> &'static str {
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        if t.is_fifo() {
            return "a FIFO";
        }
        if t.is_char_device() {
            return "a character device";
        }
        if t.is_block_device() {
            return "a block device";
        }
        if t.is_socket() {
            return "a socket";
        }
    }
    let _ = t;
    "a special file"
}

/// The regular files under `dir` (links followed), in the order of their sorted paths
/// compared component by component (`a/b/c.jpg` before `a/b.jpg`). Subdirectories are walked
/// in parallel (rayon): a listing of ImageNet's 1,000 class folders is bound by system calls
/// per folder, not by one thread. An entry's type comes from the directory listing itself;
/// only links cost a `stat`. FIFOs, sockets and devices are passed over: reading a FIFO
/// would block the reader forever. `real` holds the resolved paths of `dir` and the folders
/// above it: a link back up the tree is not followed (as `find -L` and `os.walk` with
/// `followlinks` do, two links to one folder list its files under both names).
fn walk(dir: PathBuf, extensions: Option<&[&str]>, real: &[PathBuf]) -> Result<PathList> {
    let wanted = |name: &str| extensions.is_none_or(|exts| has_extension(name, exts));
    let here = real
        .last()
        .expect("walk starts with the folder's resolved path");
    let base = dir.to_string_lossy();
    let base = base.trim_end_matches('/');
    // The folder's entry names back to back, and per entry its name's span and, for a
    // folder, its resolved path: no allocation per file (a listing of a million files
    // otherwise pays a million in page faults). Sorted by name, which keeps the
    // component-wise order of the whole listing.
    let mut names = String::new();
    let mut entries: Vec<(usize, usize, Option<PathBuf>)> = Vec::new();
    for entry in std::fs::read_dir(&dir).map_err(|e| Error::io(dir.display(), e))? {
        let entry = entry.map_err(|e| Error::io(dir.display(), e))?;
        let os_name = entry.file_name();
        let name = os_name.to_string_lossy();
        let kind = entry.file_type().map_err(|e| Error::io(dir.display(), e))?;
        let folder = if kind.is_symlink() {
            // A broken link has no metadata: nothing to read there.
            let Ok(meta) = std::fs::metadata(entry.path()) else {
                continue;
            };
            if meta.is_dir() {
                let to = std::fs::canonicalize(entry.path())
                    .map_err(|e| Error::io(entry.path().display(), e))?;
                if real.contains(&to) {
                    continue;
                }
                Some(to)
            } else if meta.is_file() && wanted(&name) {
                None
            } else {
                continue;
            }
        } else if kind.is_dir() {
            Some(here.join(&os_name))
        } else if kind.is_file() && wanted(&name) {
            None
        } else {
            continue;
        };
        let start = names.len();
        names.push_str(&name);
        entries.push((start, names.len(), folder));
    }
    entries.sort_unstable_by(|a, b| names[a.0..a.1].cmp(&names[b.0..b.1]));
    let below: Vec<Result<PathList>> = entries
        .par_iter()
        .filter_map(|(start, end, folder)| {
            let to = folder.as_ref()?;
            let mut chain = real.to_vec();
            chain.push(to.clone());
            let path = format!("{base}/{}", &names[*start..*end]);
            Some(walk(PathBuf::from(path), extensions, &chain))
        })
        .collect();
    let files = entries.iter().filter(|e| e.2.is_none());
    let (mut count, mut bytes) = (0, 0);
    for (start, end, _) in files {
        count += 1;
        bytes += base.len() + 1 + end - start;
    }
    for l in below.iter().flatten() {
        count += l.len();
        bytes += l.bytes();
    }
    let mut below = below.into_iter();
    let mut out = PathList::with_capacity(count, bytes);
    for (start, end, folder) in &entries {
        match folder {
            Some(_) => out.append(below.next().expect("one listing per folder")?),
            None => out.push_parts(&[base, "/", &names[*start..*end]]),
        }
    }
    Ok(out)
}

/// Whether the file `name` ends in one of `exts` (lower case, without the dot), in any case;
/// a name that is only an extension (`.jpg`, a hidden file) has none, as `Path::extension`
/// says.
pub(crate) fn has_extension(name: &str, exts: &[&str]) -> bool {
    name.rsplit_once('.').is_some_and(|(stem, e)| {
        !stem.is_empty() && exts.contains(&e.to_ascii_lowercase().as_str())
    })
}

/// Files as samples `{path, bytes}`, plus `label` with [`LabelMode::ParentDir`].
#[derive(Debug, Clone)]
pub struct FilesSource {
    /// `read_images` (else `read_files`).
    images: bool,
    paths: Arc<PathList>,
    labels: Option<Arc<Vec<i64>>>,
    classes: Arc<Vec<String>>,
    /// For objects in a store: the fetches started ahead of need.
    ahead: Option<Arc<ReadAhead>>,
}

impl FilesSource {
    /// `read_files(entries)`.
    pub fn files(entries: &[String]) -> Result<Self> {
        let paths = expand_list(entries, None)?;
        Ok(FilesSource {
            images: false,
            ahead: read_ahead(&paths),
            paths: Arc::new(paths),
            labels: None,
            classes: Arc::new(vec![]),
        })
    }
    /// `read_images(entries, labels)`.
    pub fn images(entries: &[String], labels: LabelMode) -> Result<Self> {
        let paths = expand_list(entries, Some(IMAGE_EXTENSIONS))?;
        let (labels, classes) = match labels {
            LabelMode::None => (None, vec![]),
            LabelMode::ParentDir => {
                let (labels, classes) = parent_dir_labels(&paths);
                (Some(Arc::new(labels)), classes)
            }
        };
        Ok(FilesSource {
            images: true,
            ahead: read_ahead(&paths),
            paths: Arc::new(paths),
            labels,
            classes: Arc::new(classes),
        })
    }
    /// Class names in label order (empty without labels).
    pub fn classes(&self) -> &[String] {
        &self.classes
    }
    /// The expanded file list.
    pub fn paths(&self) -> &PathList {
        &self.paths
    }
    /// The spec that reopens exactly these files, in this order.
    pub fn source_spec(&self) -> SourceSpec {
        let paths = self.paths.to_vec();
        let cache = crate::store::cache::spec_of(&paths);
        match (self.images, &self.labels) {
            (false, _) => SourceSpec::ReadFiles { paths, cache },
            (true, None) => SourceSpec::ReadImages {
                paths,
                labels: LabelMode::None,
                cache,
            },
            (true, Some(_)) => SourceSpec::ReadImages {
                paths,
                labels: LabelMode::ParentDir,
                cache,
            },
        }
    }
}

/// Each path's label, the index of its parent folder's name among the sorted names, and
/// those names. Paths of one folder come together in a listing, so the folder's name is
/// worked out once per run of paths with the same folder (a `/` search and a comparison per
/// path), not per path.
fn parent_dir_labels(paths: &PathList) -> (Vec<i64>, Vec<String>) {
    fn parent(p: &str) -> &str {
        Path::new(p)
            .parent()
            .and_then(|d| d.file_name())
            .and_then(|n| n.to_str())
            .unwrap_or_default()
    }
    let mut names: Vec<&str> = Vec::new();
    let mut seen: HashMap<&str, u32> = HashMap::new();
    let mut found = Vec::with_capacity(paths.len());
    let mut last: Option<(&str, u32)> = None;
    for p in paths.iter() {
        let dir = p.rsplit_once('/').map_or("", |(d, _)| d);
        let class = match last {
            Some((d, c)) if d == dir => c,
            _ => {
                let name = parent(p);
                let c = *seen.entry(name).or_insert_with(|| {
                    names.push(name);
                    names.len() as u32 - 1
                });
                last = Some((dir, c));
                c
            }
        };
        found.push(class);
    }
    let mut order: Vec<usize> = (0..names.len()).collect();
    order.sort_unstable_by_key(|&i| names[i]);
    let mut rank = vec![0i64; names.len()];
    for (r, &i) in order.iter().enumerate() {
        rank[i] = r as i64;
    }
    let labels = found.iter().map(|&c| rank[c as usize]).collect();
    (labels, order.iter().map(|&i| names[i].to_owned()).collect())
}

/// A read-ahead for file lists that name objects in a store.
fn read_ahead(paths: &PathList) -> Option<Arc<ReadAhead>> {
    paths
        .iter()
        .any(is_url)
        .then(|| Arc::new(ReadAhead::new(READ_AHEAD_OBJECTS)))
}

impl FilesSource {
    fn wanted(&self, indices: &[u64]) -> Vec<(u64, String)> {
        indices
            .iter()
            .map(|&i| (i, self.paths.get(i as usize).to_owned()))
            .collect()
    }

    fn sample(&self, index: u64, bytes: Arc<[u8]>) -> Sample {
        sluice_core::field_names!(PATH = "path", BYTES = "bytes", LABEL = "label");
        let mut s = Sample::with_capacity(3);
        s.set(
            PATH.clone(),
            Value::Str(self.paths.get(index as usize).into()),
        );
        s.set(BYTES.clone(), Value::Bytes(bytes));
        if let Some(labels) = &self.labels {
            s.set(LABEL.clone(), Value::Int(labels[index as usize]));
        }
        s
    }
}

impl Source for FilesSource {
    fn name(&self) -> &str {
        if self.images {
            "read_images"
        } else {
            "read_files"
        }
    }
    fn spec(&self) -> serde_json::Value {
        SourceSpec::files_summary(self.images, self.paths.len(), self.labels.is_some())
    }
    fn len(&self) -> Option<u64> {
        Some(self.paths.len() as u64)
    }
    fn class_names(&self) -> Option<Vec<String>> {
        self.labels.as_ref().map(|_| self.classes.to_vec())
    }
    fn fields(&self) -> Option<Vec<String>> {
        let mut f = vec!["path".to_string(), "bytes".to_string()];
        if self.labels.is_some() {
            f.push("label".into());
        }
        Some(f)
    }
    fn ship(&self) -> Option<serde_json::Value> {
        Some(self.source_spec().to_json())
    }
    fn will_need_ahead(&self) -> u64 {
        // Named well past what the queues hold, so a bucket's latency is hidden whatever the
        // pipeline's queue depths.
        match self.ahead {
            Some(_) => crate::store::ahead::NAMED_AHEAD,
            None => 0,
        }
    }
    fn will_need(&self, indices: &[u64]) {
        if let Some(ahead) = &self.ahead {
            ahead.start(&self.wanted(indices));
        }
    }
    fn get(&self, index: u64) -> Result<Sample> {
        self.get_many(&[index])
            .pop()
            .unwrap_or_else(|| Err(Error::Internal("read_files: no result for a read".into())))
    }
    fn get_many(&self, indices: &[u64]) -> Vec<Result<Sample>> {
        match &self.ahead {
            Some(ahead) => ahead
                .take_many(&self.wanted(indices))
                .into_iter()
                .zip(indices)
                .map(|(bytes, &i)| bytes.map(|b| self.sample(i, Arc::from(&b[..]))))
                .collect(),
            None => indices
                .iter()
                .map(|&i| {
                    let path = self.paths.get(i as usize);
                    let bytes = std::fs::read(path).map_err(|e| Error::io(path, e))?;
                    Ok(self.sample(i, bytes.into()))
                })
                .collect(),
        }
    }
    fn clone_arc(&self) -> SourceRef {
        Arc::new(self.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_from_parent_dirs() {
        let dir = tempfile::tempdir().unwrap();
        for (cls, name) in [("cat", "a.jpg"), ("dog", "b.png"), ("cat", "c.jpg")] {
            std::fs::create_dir_all(dir.path().join(cls)).unwrap();
            std::fs::write(dir.path().join(cls).join(name), b"x").unwrap();
        }
        std::fs::write(dir.path().join("cat").join("notes.txt"), b"x").unwrap();
        let src =
            FilesSource::images(&[dir.path().display().to_string()], LabelMode::ParentDir).unwrap();
        assert_eq!(src.len(), Some(3));
        assert_eq!(src.classes(), ["cat", "dog"]);
        let labels: Vec<i64> = (0..3)
            .map(|i| src.get(i).unwrap().get("label").unwrap().as_int().unwrap())
            .collect();
        assert_eq!(labels, [0, 0, 1]);
    }

    #[test]
    #[cfg(unix)]
    fn special_files_are_named_for_what_they_are() {
        let e = FilesSource::files(&["/dev/null".into()]).unwrap_err();
        assert!(matches!(e, Error::Io { .. }), "{e:?}");
        assert!(e.to_string().contains("character device"), "{e}");
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("pipe");
        let made = std::process::Command::new("mkfifo").arg(&fifo).status();
        if made.is_ok_and(|s| s.success()) {
            let e = FilesSource::files(&[fifo.display().to_string()]).unwrap_err();
            assert!(e.to_string().contains("a FIFO"), "{e}");
            // Inside a directory it is passed over (reading it would block forever).
            std::fs::write(dir.path().join("a.txt"), b"x").unwrap();
            let src = FilesSource::files(&[dir.path().display().to_string()]).unwrap();
            assert_eq!(src.paths().len(), 1);
        }
        let link = dir.path().join("dangling");
        std::os::unix::fs::symlink(dir.path().join("gone"), &link).unwrap();
        let e = FilesSource::files(&[link.display().to_string()]).unwrap_err();
        assert!(
            e.to_string().contains("symbolic link to a missing file"),
            "{e}"
        );
    }

    #[test]
    #[cfg(unix)]
    fn a_link_back_up_the_tree_is_walked_once() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("sub")).unwrap();
        std::fs::write(dir.path().join("sub").join("a.txt"), b"x").unwrap();
        std::os::unix::fs::symlink(dir.path(), dir.path().join("sub").join("up")).unwrap();
        let src = FilesSource::files(&[dir.path().display().to_string()]).unwrap();
        assert_eq!(src.paths().len(), 1, "{:?}", src.paths());
    }

    #[test]
    fn listings_keep_the_component_order_of_sorted_paths_and_follow_links() {
        // `b/` sorts before `b.jpg` component by component (as Rust's sorted PathBufs and
        // the listing before it was parallel did), not byte by byte ('.' < '/').
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        let mut want = Vec::new();
        for rel in [
            "b/x.jpg",
            "b.jpg",
            "a/z/y.jpg",
            "a/c.jpg",
            "B.jpg",
            "b/a/q.jpg",
            "é.jpg",
        ] {
            let p = root.join(rel);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(&p, b"x").unwrap();
            want.push(p);
        }
        // Two links to one folder list it under both names (as `find -L` and `os.walk`
        // with followlinks do); a link to a file counts as the file.
        std::fs::create_dir(root.join("shared")).unwrap();
        std::fs::write(root.join("shared").join("s.jpg"), b"x").unwrap();
        want.push(root.join("shared/s.jpg"));
        std::os::unix::fs::symlink(root.join("shared"), root.join("link1")).unwrap();
        std::os::unix::fs::symlink(root.join("shared"), root.join("link2")).unwrap();
        std::os::unix::fs::symlink(root.join("b.jpg"), root.join("to-file.jpg")).unwrap();
        want.extend(["link1/s.jpg", "link2/s.jpg", "to-file.jpg"].map(|r| root.join(r)));
        want.sort();
        let want: Vec<String> = want.iter().map(|p| p.display().to_string()).collect();
        let entry = [root.display().to_string()];
        for _ in 0..5 {
            let got = FilesSource::images(&entry, LabelMode::None).unwrap();
            assert_eq!(got.paths().to_vec(), want);
        }
    }

    #[test]
    fn a_wide_listing_is_the_same_on_every_run() {
        // Enough folders for the parallel walk to interleave its work differently each time.
        let dir = tempfile::tempdir().unwrap();
        for c in 0..64 {
            let d = dir.path().join(format!("class{c:02}"));
            std::fs::create_dir(&d).unwrap();
            for i in 0..20 {
                std::fs::write(d.join(format!("{i}.png")), b"").unwrap();
            }
        }
        let entry = [dir.path().display().to_string()];
        let first = FilesSource::images(&entry, LabelMode::ParentDir).unwrap();
        assert_eq!(first.len(), Some(64 * 20));
        let mut sorted = first.paths().to_vec();
        sorted.sort();
        assert_eq!(first.paths().to_vec(), sorted);
        assert_eq!(first.classes().len(), 64);
        for _ in 0..5 {
            let again = FilesSource::images(&entry, LabelMode::ParentDir).unwrap();
            assert_eq!(again.paths(), first.paths());
            let label = |s: &FilesSource, i| s.get(i).unwrap().get("label").unwrap().as_int();
            assert_eq!(label(&again, 1279), label(&first, 1279));
        }
    }

    #[test]
    #[ignore = "timing: SLUICE_LIST_DIR=/tmp/sluice-scale cargo test -p sluice-io --profile dev-release -- --ignored listing_speed --nocapture"]
    fn listing_speed() {
        let Ok(dir) = std::env::var("SLUICE_LIST_DIR") else {
            return;
        };
        let rss = || {
            std::fs::read_to_string("/proc/self/statm")
                .ok()
                .and_then(|s| s.split_whitespace().nth(1)?.parse::<u64>().ok())
                .map_or(0, |p| (p * 4096) >> 20)
        };
        let t = std::time::Instant::now();
        let paths = expand_paths(std::slice::from_ref(&dir), Some(IMAGE_EXTENSIONS)).unwrap();
        println!(
            "expand: {} paths in {:?}, rss {} MiB",
            paths.len(),
            t.elapsed(),
            rss()
        );
        let t = std::time::Instant::now();
        let src = FilesSource::images(&[dir], LabelMode::ParentDir).unwrap();
        println!(
            "images: {:?} in {:?}, rss {} MiB",
            src.len(),
            t.elapsed(),
            rss()
        );
    }

    #[test]
    fn missing_paths_fail_early() {
        let e = FilesSource::files(&["/nonexistent/x.jpg".into()]).unwrap_err();
        assert!(matches!(e, Error::FileNotFound(_)));
        let e = FilesSource::files(&["/nonexistent/*.jpg".into()]).unwrap_err();
        assert!(matches!(e, Error::FileNotFound(_)));
    }
}
