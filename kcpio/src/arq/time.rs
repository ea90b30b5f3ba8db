//! Wrapping millisecond timestamps, as KCP carries them on the wire.

use core::fmt;

/// A point in time in milliseconds on a 32-bit wrapping clock.
///
/// KCP's `ts` field is a `u32` millisecond counter that wraps after about 49.7
/// days. Every comparison goes through [`Timestamp::diff`], which is correct
/// across the wrap as long as the two instants are less than 2^31 ms apart.
/// The clock's origin is the caller's choice: the sans-IO core never reads a
/// clock, it is handed `now` on every call.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Timestamp(u32);

impl Timestamp {
    /// The timestamp `ms` milliseconds after the caller's clock origin (mod 2^32).
    #[must_use]
    pub const fn from_millis(ms: u32) -> Self {
        Self(ms)
    }

    /// The raw wrapping millisecond value, as written to the wire.
    #[must_use]
    pub const fn as_millis(self) -> u32 {
        self.0
    }

    /// Signed distance `self - earlier` in milliseconds, correct across the wrap.
    ///
    /// Positive when `self` is later than `earlier`.
    #[must_use]
    pub const fn diff(self, earlier: Timestamp) -> i32 {
        self.0.wrapping_sub(earlier.0) as i32
    }

    /// This timestamp moved `ms` milliseconds later (wrapping).
    #[must_use]
    pub const fn add_millis(self, ms: u32) -> Self {
        Self(self.0.wrapping_add(ms))
    }

    /// `true` when `self` is at or after `other` on the wrapping clock.
    #[must_use]
    pub const fn is_at_or_after(self, other: Timestamp) -> bool {
        self.diff(other) >= 0
    }

    /// The earlier of two timestamps on the wrapping clock.
    #[must_use]
    pub const fn earliest(self, other: Timestamp) -> Timestamp {
        if self.diff(other) <= 0 { self } else { other }
    }
}

impl fmt::Debug for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}ms", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn diff_and_order_hold_across_the_wrap() {
        let before = Timestamp::from_millis(u32::MAX - 5);
        let after = before.add_millis(10);
        assert_eq!(after.as_millis(), 4);
        assert_eq!(after.diff(before), 10);
        assert_eq!(before.diff(after), -10);
        assert!(after.is_at_or_after(before));
        assert!(!before.is_at_or_after(after));
        assert_eq!(before.earliest(after), before);
        assert_eq!(after.earliest(before), before);
    }
}
