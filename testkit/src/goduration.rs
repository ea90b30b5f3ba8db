//! Go's `time.ParseDuration` for the command lines of the peers that mirror
//! Go programs (the lab's `peer` and `mux_peer`).

use std::time::Duration;

/// Go's `time.ParseDuration`: a sequence of decimal numbers with units
/// `ns`, `us`/`µs`, `ms`, `s`, `m`, `h` ("1m30s", "1.5s", "300ms"); "0" alone is allowed.
pub fn parse_duration(s: &str) -> Option<Duration> {
    if s == "0" {
        return Some(Duration::ZERO);
    }
    let s = s.strip_prefix('+').unwrap_or(s);
    if s.is_empty() || s.starts_with('-') {
        return None; // negative durations make no sense for any flag here
    }
    let mut total = 0f64;
    let mut rest = s;
    while !rest.is_empty() {
        let num_end = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let (num, tail) = rest.split_at(num_end);
        if num.is_empty() || num == "." {
            return None;
        }
        let value: f64 = num.parse().ok()?;
        let unit_end = tail
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(tail.len());
        let (unit, tail) = tail.split_at(unit_end);
        let scale = match unit {
            "ns" => 1e-9,
            "us" | "µs" | "μs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            _ => return None,
        };
        total += value * scale;
        rest = tail;
    }
    Duration::try_from_secs_f64(total).ok()
}
