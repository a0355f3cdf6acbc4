//! The crate's one error type. Every message says what to change.

/// Everything that can go wrong in lively. A failed call leaves the simulation untouched.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A mesh is malformed: inverted or degenerate element, index out of range, bad file.
    #[error("bad mesh: {0}")]
    Mesh(String),
    /// A parameter is out of its valid range (the message names it and the range).
    #[error("bad parameter: {0}")]
    Parameter(String),
    /// A state passed in has the wrong size or non-finite entries.
    #[error("bad state: {0}")]
    State(String),
    /// A feature that is part of the API but not available in this build or configuration.
    #[error("not supported: {0}")]
    Unsupported(String),
    /// No GPU adapter could be found for `Backend::Gpu`.
    #[error("no GPU adapter: {0}")]
    NoGpu(String),
    /// The GPU device was lost or ran out of memory.
    #[error("GPU device lost: {0}")]
    DeviceLost(String),
    /// The step produced a non-finite value; the state was left as it was before the step.
    #[error("solver failure: {0}")]
    Solver(String),
    /// Reading a mesh or scene file failed.
    #[error("i/o error on {path}: {source}")]
    Io {
        /// The file that could not be read or written.
        path: String,
        /// The underlying error.
        source: std::io::Error,
    },
}

/// `Result` with lively's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Returns a parameter error unless `value` is finite and strictly positive.
pub(crate) fn require_positive(name: &str, value: f64) -> Result<()> {
    if value.is_finite() && value > 0.0 {
        Ok(())
    } else {
        Err(Error::Parameter(format!("{name} must be a finite number greater than zero, got {value}")))
    }
}
