//! [`StateLock`]: one run per state directory. Two runs writing the same
//! manifests and state objects would corrupt each other's checkpoints, so
//! a run holds an exclusive advisory lock on `<state>/LOCK` for its whole
//! life and writes its pid there, which a refused run names.
//!
//! The operating system releases the lock when the holder dies (SIGKILL
//! included): a crash never leaves a stale lock behind. Acquiring never
//! waits. This module only locks; it never reads or writes checkpoints.

use std::fs::{File, OpenOptions, TryLockError};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

/// Why a state directory could not be locked.
#[derive(Debug, thiserror::Error)]
pub enum LockError {
    /// Another process holds it.
    #[error(
        "the state directory {} is in use by another fvhost run (pid {pid}); two runs on one state would corrupt its checkpoints: stop that run first, or give this one another --state-dir",
        dir.display()
    )]
    Held {
        /// The state directory.
        dir: PathBuf,
        /// The holder's pid, as it wrote it (`unknown` if unreadable).
        pid: String,
    },
    /// The lock file could not be opened or locked.
    #[error("cannot lock the state directory {}: {message}", dir.display())]
    Io {
        /// The state directory.
        dir: PathBuf,
        /// What failed.
        message: String,
    },
}

/// The exclusive lock of one state directory, released on drop.
#[derive(Debug)]
pub struct StateLock {
    _file: File,
}

impl StateLock {
    /// Lock `dir` (which must exist) for this process, or say who holds it.
    pub fn acquire(dir: &Path) -> Result<Self, LockError> {
        let io = |e: std::io::Error| LockError::Io {
            dir: dir.to_path_buf(),
            message: e.to_string(),
        };
        let path = dir.join("LOCK");
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(io)?;
        match file.try_lock() {
            Ok(()) => {
                file.set_len(0).map_err(io)?;
                file.seek(SeekFrom::Start(0)).map_err(io)?;
                write!(file, "{}", std::process::id()).map_err(io)?;
                Ok(StateLock { _file: file })
            }
            Err(TryLockError::WouldBlock) => {
                let mut pid = String::new();
                let _ = file.read_to_string(&mut pid);
                let pid = pid.trim();
                Err(LockError::Held {
                    dir: dir.to_path_buf(),
                    pid: if pid.is_empty() { "unknown" } else { pid }.to_string(),
                })
            }
            Err(TryLockError::Error(e)) => Err(io(e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_holder_is_refused_with_the_first_ones_pid_until_it_lets_go() {
        let dir = tempfile::tempdir().expect("dir");
        let first = StateLock::acquire(dir.path()).expect("first");
        // A second open file description conflicts like another process.
        let err = StateLock::acquire(dir.path()).expect_err("held");
        let text = err.to_string();
        assert!(
            text.contains(&format!("pid {}", std::process::id()))
                && text.contains("in use by another fvhost run"),
            "{text}"
        );
        drop(first);
        let again = StateLock::acquire(dir.path()).expect("released on drop");
        drop(again);
    }
}
