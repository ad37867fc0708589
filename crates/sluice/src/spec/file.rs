//! Reading a small file the user names (a pipeline, a plan, a profile) without trusting it to
//! be one: `/dev/zero` would be read until memory runs out and a FIFO with no writer would
//! block forever, so only regular files are opened, and only up to [`MAX_FILE_SIZE`].

use std::io::Read;

use sluice_core::{Error, Result};

/// The largest pipeline, plan or profile file read: far above any real one (a pipeline is a
/// few hundred bytes, a plan tens of kilobytes), far below what could hurt.
pub const MAX_FILE_SIZE: u64 = 16 << 20;

/// The text of `path`, a `what` ("pipeline file"), refusing what is not a regular file (named
/// as `read_files` names it: "not a regular file (a FIFO)"), a file over [`MAX_FILE_SIZE`]
/// and text that is not UTF-8.
pub fn read_small_file(path: &str, what: &str) -> Result<String> {
    // `metadata` does not open, so it cannot block on a FIFO; opening may.
    let meta = std::fs::metadata(path).map_err(|e| Error::io(path, e))?;
    let refuse = |m: &std::fs::Metadata| -> Result<()> {
        if m.is_dir() {
            return Err(Error::Io {
                path: path.to_string(),
                message: format!("is a directory, not a {what}"),
            });
        }
        if !m.is_file() {
            return Err(Error::Io {
                path: path.to_string(),
                message: format!(
                    "not a regular file ({}); a {what} must be one",
                    sluice_io::files::kind_of(&m.file_type())
                ),
            });
        }
        if m.len() > MAX_FILE_SIZE {
            return Err(too_big(path, what, m.len()));
        }
        Ok(())
    };
    refuse(&meta)?;
    let file = std::fs::File::open(path).map_err(|e| Error::io(path, e))?;
    // What was opened may not be what was looked at (the path replaced in between).
    refuse(&file.metadata().map_err(|e| Error::io(path, e))?)?;
    let mut bytes = Vec::new();
    file.take(MAX_FILE_SIZE + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| Error::io(path, e))?;
    if bytes.len() as u64 > MAX_FILE_SIZE {
        return Err(too_big(path, what, bytes.len() as u64));
    }
    String::from_utf8(bytes).map_err(|e| {
        Error::invalid(format!(
            "{path}: a {what} must be UTF-8 text ({})",
            e.utf8_error()
        ))
    })
}

fn too_big(path: &str, what: &str, size: u64) -> Error {
    Error::invalid(format!(
        "{path}: {size} bytes, over the {} MiB a {what} may be; is it the right file?",
        MAX_FILE_SIZE >> 20
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn special_and_oversized_files_are_refused_without_reading_them() {
        let e = read_small_file("/dev/zero", "pipeline file").unwrap_err();
        assert!(matches!(e, Error::Io { .. }), "{e:?}");
        assert!(
            e.to_string()
                .contains("/dev/zero: not a regular file (a character device)"),
            "{e}"
        );
        let dir = std::env::temp_dir().join(format!("sluice-small-file-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let fifo = dir.join("p.toml");
        let made = std::process::Command::new("mkfifo").arg(&fifo).status();
        if made.is_ok_and(|s| s.success()) {
            // Would block forever if it were opened.
            let e = read_small_file(&fifo.display().to_string(), "pipeline file").unwrap_err();
            assert!(e.to_string().contains("not a regular file (a FIFO)"), "{e}");
        }
        let big = dir.join("big.toml");
        std::fs::File::create(&big)
            .unwrap()
            .set_len(MAX_FILE_SIZE + 1)
            .unwrap();
        let e = read_small_file(&big.display().to_string(), "pipeline file").unwrap_err();
        assert!(e.to_string().contains("over the 16 MiB"), "{e}");
        let e = read_small_file(&dir.display().to_string(), "plan file").unwrap_err();
        assert!(e.to_string().contains("is a directory"), "{e}");
        let missing = dir.join("nope.toml").display().to_string();
        assert!(matches!(
            read_small_file(&missing, "pipeline file"),
            Err(Error::FileNotFound(_))
        ));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
