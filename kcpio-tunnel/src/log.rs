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

/// A line that repeats while a fault lasts (a reconnect that keeps
/// failing): said the first [`FIRST`](Self::FIRST) times, then once per
/// [`EVERY`](Self::EVERY) with how many were held back since, so a long
/// outage costs an operator about a line a minute, not one per attempt.
#[derive(Debug, Default)]
pub(crate) struct Repeats {
    /// Lines said since the fault began.
    said: u32,
    /// Lines held back since the last one said.
    held: u32,
    /// When the last one was said.
    last: Option<std::time::Instant>,
}

impl Repeats {
    /// Lines said at once when a fault begins.
    pub(crate) const FIRST: u32 = 3;
    /// Then at most one per this.
    pub(crate) const EVERY: std::time::Duration = std::time::Duration::from_secs(60);

    /// Says `msg` (with the count held back since the last), or holds it
    /// back.
    pub(crate) fn line(&mut self, log: &Log, msg: impl Display) {
        self.line_at(std::time::Instant::now(), log, msg);
    }

    fn line_at(&mut self, now: std::time::Instant, log: &Log, msg: impl Display) {
        let due = self
            .last
            .is_none_or(|t| now.saturating_duration_since(t) >= Self::EVERY);
        if self.said >= Self::FIRST && !due {
            self.held = self.held.saturating_add(1);
            return;
        }
        match std::mem::take(&mut self.held) {
            0 => log.line(msg),
            held => log.line(format!("{msg} ({held} more like it since the last said)")),
        }
        self.said = self.said.saturating_add(1);
        self.last = Some(now);
    }

    /// The fault is over: the next one is said from its first line.
    pub(crate) fn clear(&mut self) {
        *self = Self::default();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    #[test]
    fn a_repeating_line_is_said_three_times_then_once_a_minute() {
        let dir = std::env::temp_dir().join(format!("kcpio-repeats-{}", std::process::id()));
        let log = Log::open(dir.to_str().unwrap(), false).unwrap();
        let mut r = Repeats::default();
        let t0 = Instant::now();
        // An attempt a second for ten minutes.
        for s in 0..600 {
            r.line_at(t0 + Duration::from_secs(s), &log, "re-connecting: refused");
        }
        r.clear();
        r.line_at(t0 + Duration::from_secs(601), &log, "re-connecting: again");
        let text = std::fs::read_to_string(&dir).unwrap();
        let _ = std::fs::remove_file(&dir);
        let lines: Vec<&str> = text.lines().collect();
        // 3 at once (0-2 s), then at 62, 122, ... 542 s, each with the 59
        // held back before it: 9 more; then a new fault, said at once.
        assert_eq!(lines.len(), 3 + 9 + 1, "{text}");
        assert!(
            lines[3].ends_with("(59 more like it since the last said)"),
            "{}",
            lines[3]
        );
        assert!(
            lines[4].ends_with("(59 more like it since the last said)"),
            "{}",
            lines[4]
        );
        assert!(lines[12].ends_with("re-connecting: again"), "{}", lines[12]);
    }
}
