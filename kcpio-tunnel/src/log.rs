//! Log lines through `tracing`: stderr or `--log FILE` (appended), and
//! kcptun's `--quiet`, which drops the stream open/close lines only.

use std::fmt::Display;
use std::fs::OpenOptions;
use std::io;
use std::sync::Arc;

use tracing::Dispatch;
use tracing_subscriber::fmt::writer::BoxMakeWriter;

/// Where log lines go (stderr or `--log`), with kcptun's `--quiet`.
///
/// Each `Log` owns a `tracing` subscriber writing to its destination, so
/// two tunnels in one process (the tests) log to their own files;
/// [`install`](Self::install) also makes it the process's default, for
/// the library's own events.
#[derive(Clone)]
pub struct Log {
    dispatch: Dispatch,
    quiet: bool,
}

impl Log {
    /// Opens `path` for appending, or stderr when it is empty.
    ///
    /// # Errors
    ///
    /// The file cannot be opened for appending.
    pub fn open(path: &str, quiet: bool) -> io::Result<Self> {
        let writer = if path.is_empty() {
            BoxMakeWriter::new(io::stderr)
        } else {
            let file = OpenOptions::new().create(true).append(true).open(path)?;
            BoxMakeWriter::new(Arc::new(file))
        };
        let subscriber = tracing_subscriber::fmt()
            .with_writer(writer)
            .with_ansi(false)
            .with_target(false)
            .with_level(false)
            .with_max_level(tracing::Level::INFO)
            .finish();
        Ok(Self {
            dispatch: Dispatch::new(subscriber),
            quiet,
        })
    }

    /// Makes this the process's default subscriber (the library's events
    /// land in the same place). Does nothing if one is set already.
    pub fn install(&self) {
        let _ = tracing::dispatcher::set_global_default(self.dispatch.clone());
    }

    /// One line, timestamped.
    pub fn line(&self, msg: impl Display) {
        tracing::dispatcher::with_default(&self.dispatch, || tracing::info!("{msg}"));
    }

    /// A stream open/close line: dropped with `--quiet`.
    pub(crate) fn stream(&self, msg: impl Display) {
        if !self.quiet {
            self.line(msg);
        }
    }
}

/// The line for a stream that ended (a stream line: `--quiet` drops it,
/// errors too; a session that ends says so once, not per stream).
pub(crate) fn log_close(
    log: &Log,
    from: impl Display,
    to: String,
    sid: u32,
    r: io::Result<(u64, u64)>,
) {
    match r {
        Ok((up, down)) => log.stream(format!(
            "stream closed in: {from} out: {to}({sid}), {up} B up, {down} B down"
        )),
        Err(e) => log.stream(format!("stream closed in: {from} out: {to}({sid}): {e}")),
    }
}
