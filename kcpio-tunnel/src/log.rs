//! Log lines: stderr or `--log FILE`, and kcptun's `--quiet`.

use std::fs::OpenOptions;
use std::io::{self, Write as _};
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

/// Where log lines go (stderr or `--log`), with kcptun's `--quiet`.
#[derive(Clone)]
pub struct Log {
    out: Arc<Mutex<Box<dyn io::Write + Send>>>,
    quiet: bool,
}

impl Log {
    /// Opens `path` for appending, or stderr when it is empty.
    pub fn open(path: &str, quiet: bool) -> io::Result<Self> {
        let out: Box<dyn io::Write + Send> = if path.is_empty() {
            Box::new(io::stderr())
        } else {
            Box::new(OpenOptions::new().create(true).append(true).open(path)?)
        };
        Ok(Self {
            out: Arc::new(Mutex::new(out)),
            quiet,
        })
    }

    /// One line, with Go's log timestamp (`2006/01/02 15:04:05`, UTC).
    pub fn line(&self, msg: impl std::fmt::Display) {
        let secs = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let (y, m, d) = civil_from_days(secs / 86_400);
        let t = secs % 86_400;
        let mut out = self
            .out
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let _ = writeln!(
            out,
            "{y:04}/{m:02}/{d:02} {:02}:{:02}:{:02} {msg}",
            t / 3600,
            t / 60 % 60,
            t % 60
        );
        let _ = out.flush();
    }

    /// A stream open/close line: dropped with `--quiet`.
    pub(crate) fn stream(&self, msg: impl std::fmt::Display) {
        if !self.quiet {
            self.line(msg);
        }
    }
}

/// Days since 1970-01-01 to (year, month, day), proleptic Gregorian.
fn civil_from_days(days: u64) -> (u64, u64, u64) {
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z % 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (yoe + era * 400 + u64::from(m <= 2), m, d)
}

pub(crate) fn log_close(
    log: &Log,
    from: impl std::fmt::Display,
    to: String,
    sid: u32,
    r: io::Result<(u64, u64)>,
) {
    match r {
        Ok((up, down)) => log.stream(format!(
            "stream closed in: {from} out: {to}({sid}), {up} B up, {down} B down"
        )),
        Err(e) => log.line(format!("stream closed in: {from} out: {to}({sid}): {e}")),
    }
}
