//! The crate's one error type. Hot paths use cheap per-module enums (for example
//! [`crate::wire::WireError`]); they convert into [`Error`] at API boundaries.

use std::io;

/// Every error voltstream-core returns across its public API.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A packet or file failed a format check.
    #[error("malformed input: {0}")]
    Malformed(String),
    /// A configuration value is out of range or inconsistent.
    #[error("invalid configuration: {0}")]
    Config(String),
    /// The operating system refused an operation (bind, socket option, mmap...).
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: io::Error,
    },
}

impl Error {
    /// Wraps an `io::Error` with a sentence saying what was being done.
    pub fn io(context: impl Into<String>, source: io::Error) -> Self {
        Error::Io {
            context: context.into(),
            source,
        }
    }
}

pub type Result<T> = std::result::Result<T, Error>;
