//! [`MuxPool`]: a fixed number of multiplexed sessions used round robin, as
//! kcptun's client keeps them (`--conn`, `--autoexpire`, `--scavengettl`).

use std::future::Future;
use std::io;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::time::Instant;

use kcpio::mux::Mux;

/// A pool of [`Mux`] sessions: each call to [`get`](MuxPool::get) takes the
/// next slot in turn; a slot's session is created on its first use (no
/// traffic before), and replaced when it has ended or, with an expiry set,
/// when it is older than that. A replaced session that still works is
/// retired: streams already on it keep running until
/// [`scavenge`](MuxPool::scavenge) closes it, `grace` after its expiry.
///
/// This is kcptun's client pool: `size` = `--conn`, `expiry` =
/// `--autoexpire`, `grace` = `--scavengettl`. Memory: `size` slots plus the
/// retired sessions not yet scavenged (at most one per slot per expiry
/// period within `grace`).
pub(crate) struct MuxPool<S = Mux> {
    slots: Vec<tokio::sync::Mutex<Option<Slot<S>>>>,
    next: AtomicUsize,
    expiry: Option<Duration>,
    grace: Duration,
    retired: Mutex<Vec<(Instant, Arc<S>)>>,
}

struct Slot<S> {
    mux: Arc<S>,
    expires: Option<Instant>,
}

/// A pooled session: a [`Mux`], or a [`Mux`] with what its owner keeps
/// beside it.
pub(crate) trait Pooled {
    /// The session has ended.
    fn is_closed(&self) -> bool;
    /// Ends the session (its streams fail).
    fn close(&self);
}

impl Pooled for Mux {
    fn is_closed(&self) -> bool {
        Mux::is_closed(self)
    }
    fn close(&self) {
        Mux::close(self);
    }
}

impl<S: Pooled> MuxPool<S> {
    /// A pool of `size` slots (at least one), all empty. `expiry` of `None`
    /// keeps sessions until they end.
    #[must_use]
    pub(crate) fn new(size: usize, expiry: Option<Duration>, grace: Duration) -> Self {
        Self {
            slots: (0..size.max(1))
                .map(|_| tokio::sync::Mutex::new(None))
                .collect(),
            next: AtomicUsize::new(0),
            expiry: expiry.filter(|e| !e.is_zero()),
            grace,
            retired: Mutex::new(Vec::new()),
        }
    }

    /// The next slot's session, made with `connect` first when the slot is
    /// empty, its session has ended, or it has expired. Callers for the same
    /// slot wait for one `connect`.
    ///
    /// # Errors
    ///
    /// `connect`'s error; the slot stays empty and the next call for it
    /// tries again.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a cancelled `connect` leaves the slot as it was (an
    /// expired session is then retired already).
    pub(crate) async fn get<F, Fut>(&self, connect: F) -> io::Result<Arc<S>>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = io::Result<S>>,
    {
        let idx = self.next.fetch_add(1, Ordering::Relaxed) % self.slots.len();
        self.get_slot(idx, connect).await
    }

    /// The first slot's session, as [`get`](Self::get) gives it (made,
    /// replaced), without taking a turn of the round robin: one session
    /// for whoever must stay on one (the UDP flows of `--udplisten`).
    ///
    /// # Errors
    ///
    /// As [`get`](Self::get).
    ///
    /// # Cancel safety
    ///
    /// As [`get`](Self::get).
    pub(crate) async fn get_first<F, Fut>(&self, connect: F) -> io::Result<Arc<S>>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = io::Result<S>>,
    {
        self.get_slot(0, connect).await
    }

    /// Puts `fresh`, a session made beside the pool, into the first slot
    /// in place of the session `is_old` picks (one its user found dead
    /// before the pool did), and returns the slot's session. The old
    /// session is retired as an expired one is (its streams go on until
    /// [`scavenge`](Self::scavenge), or until it ends). When the slot has
    /// moved on already (the old session ended and a caller of
    /// [`get`](Self::get) replaced it), `fresh` is dropped and the slot's
    /// session returned.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: cancelled, `fresh` is dropped and the slot is as it
    /// was.
    pub(crate) async fn replace_first(&self, is_old: impl Fn(&S) -> bool, fresh: S) -> Arc<S> {
        let mut slot = self.slots[0].lock().await;
        let now = Instant::now();
        match slot.take() {
            Some(s) if !is_old(&s.mux) && !s.mux.is_closed() => {
                let mux = Arc::clone(&s.mux);
                *slot = Some(s);
                return mux;
            }
            Some(s) if !s.mux.is_closed() => {
                self.lock_retired().push((now + self.grace, s.mux));
            }
            _ => {}
        }
        let mux = Arc::new(fresh);
        *slot = Some(Slot {
            mux: Arc::clone(&mux),
            expires: self.expiry.map(|e| now + e),
        });
        mux
    }

    /// The sessions of the slots after the first that are not being made
    /// or replaced right now (a slot busy with a connect is skipped, not
    /// waited for).
    pub(crate) fn others(&self) -> Vec<Arc<S>> {
        self.slots
            .iter()
            .skip(1)
            .filter_map(|s| s.try_lock().ok()?.as_ref().map(|s| Arc::clone(&s.mux)))
            .collect()
    }

    async fn get_slot<F, Fut>(&self, idx: usize, connect: F) -> io::Result<Arc<S>>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = io::Result<S>>,
    {
        let mut slot = self.slots[idx].lock().await;
        let now = Instant::now();
        if let Some(s) = slot.take() {
            let expired = s.expires.is_some_and(|t| now >= t);
            if !s.mux.is_closed() && !expired {
                let mux = Arc::clone(&s.mux);
                *slot = Some(s);
                return Ok(mux);
            }
            if !s.mux.is_closed() {
                let at = s.expires.unwrap_or(now) + self.grace;
                self.lock_retired().push((at, s.mux));
            }
        }
        let mux = Arc::new(connect().await?);
        *slot = Some(Slot {
            mux: Arc::clone(&mux),
            expires: self.expiry.map(|e| now + e),
        });
        Ok(mux)
    }

    /// Closes the retired sessions whose grace period has passed (their
    /// streams fail); returns how many. Those that ended meanwhile are let
    /// go uncounted. Call it about once a second.
    pub(crate) fn scavenge(&self) -> usize {
        let now = Instant::now();
        let mut closed = 0;
        self.lock_retired().retain(|(at, mux)| {
            // One that ended already (its user closed it) is let go.
            if mux.is_closed() {
                return false;
            }
            if *at <= now {
                mux.close();
                closed += 1;
                false
            } else {
                true
            }
        });
        closed
    }

    /// Sessions retired and not yet scavenged.
    #[must_use]
    pub(crate) fn retired(&self) -> usize {
        self.lock_retired().len()
    }

    fn lock_retired(&self) -> std::sync::MutexGuard<'_, Vec<(Instant, Arc<S>)>> {
        self.retired.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl<S: Pooled> std::fmt::Debug for MuxPool<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MuxPool")
            .field("slots", &self.slots.len())
            .field("expiry", &self.expiry)
            .field("grace", &self.grace)
            .field("retired", &self.retired())
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kcpio::mux::MuxConfig;
    use std::sync::atomic::AtomicUsize;

    /// A connect function over in-memory pipes that counts its calls.
    fn connector(
        calls: &Arc<AtomicUsize>,
        peers: &Arc<Mutex<Vec<tokio::io::DuplexStream>>>,
    ) -> impl FnOnce() -> std::future::Ready<io::Result<Mux>> {
        let calls = Arc::clone(calls);
        let peers = Arc::clone(peers);
        move || {
            calls.fetch_add(1, Ordering::Relaxed);
            let (a, b) = tokio::io::duplex(1024);
            peers.lock().unwrap().push(b);
            std::future::ready(Ok(Mux::client(a, &MuxConfig::default())))
        }
    }

    #[tokio::test]
    async fn get_first_keeps_to_slot_zero_without_a_turn() {
        let calls = Arc::new(AtomicUsize::new(0));
        let peers = Arc::new(Mutex::new(Vec::new()));
        let pool = MuxPool::new(2, None, Duration::ZERO);
        let first = pool.get_first(connector(&calls, &peers)).await.unwrap();
        let again = pool.get_first(connector(&calls, &peers)).await.unwrap();
        assert!(Arc::ptr_eq(&first, &again), "the same session");
        // The round robin did not move: its first turn is slot 0's session.
        let turn = pool.get(connector(&calls, &peers)).await.unwrap();
        assert!(Arc::ptr_eq(&turn, &first));
        let turn = pool.get(connector(&calls, &peers)).await.unwrap();
        assert!(!Arc::ptr_eq(&turn, &first));
        // Slot 0's session ended: a new one.
        first.close();
        let next = pool.get_first(connector(&calls, &peers)).await.unwrap();
        assert!(!Arc::ptr_eq(&next, &first));
        assert_eq!(calls.load(Ordering::Relaxed), 3);
    }

    #[tokio::test(start_paused = true)]
    async fn replace_first_retires_the_old_session_or_defers_to_a_newer_one() {
        let calls = Arc::new(AtomicUsize::new(0));
        let peers = Arc::new(Mutex::new(Vec::new()));
        let pool = MuxPool::new(2, None, Duration::from_secs(5));
        let old = pool.get_first(connector(&calls, &peers)).await.unwrap();
        // Found dead by its user: the fresh session takes the slot, and
        // the old one is retired, open, until its grace has passed.
        let fresh = connector(&calls, &peers)().await.unwrap();
        let new = pool
            .replace_first(|m| std::ptr::eq(m, Arc::as_ptr(&old)), fresh)
            .await;
        assert!(!Arc::ptr_eq(&new, &old));
        let got = pool.get_first(connector(&calls, &peers)).await.unwrap();
        assert!(Arc::ptr_eq(&got, &new), "the slot holds the fresh one");
        assert_eq!(pool.retired(), 1);
        assert!(!old.is_closed(), "its streams go on");
        tokio::time::advance(Duration::from_secs(5)).await;
        assert_eq!(pool.scavenge(), 1);
        assert!(old.is_closed());
        // The slot moved on before the user's replacement came: the
        // slot's session stays, the late one is dropped.
        new.close();
        let newer = pool.get_first(connector(&calls, &peers)).await.unwrap();
        let late = connector(&calls, &peers)().await.unwrap();
        let got = pool
            .replace_first(|m| std::ptr::eq(m, Arc::as_ptr(&new)), late)
            .await;
        assert!(Arc::ptr_eq(&got, &newer));
        assert_eq!(pool.retired(), 0, "an ended session is not retired");
        assert_eq!(calls.load(Ordering::Relaxed), 4);
    }

    #[tokio::test(start_paused = true)]
    async fn lazy_round_robin_expiry_and_scavenging() {
        let calls = Arc::new(AtomicUsize::new(0));
        let peers = Arc::new(Mutex::new(Vec::new()));
        let pool = MuxPool::new(2, Some(Duration::from_secs(3)), Duration::from_secs(2));
        assert_eq!(calls.load(Ordering::Relaxed), 0, "nothing before first use");
        let a = pool.get(connector(&calls, &peers)).await.unwrap();
        let b = pool.get(connector(&calls, &peers)).await.unwrap();
        let a2 = pool.get(connector(&calls, &peers)).await.unwrap();
        assert_eq!(calls.load(Ordering::Relaxed), 2);
        assert!(Arc::ptr_eq(&a, &a2) && !Arc::ptr_eq(&a, &b));

        // Slot 1's session ended: replaced at its next use, not retired.
        b.close();
        let b2 = pool.get(connector(&calls, &peers)).await.unwrap();
        assert!(!Arc::ptr_eq(&b, &b2));
        assert_eq!((calls.load(Ordering::Relaxed), pool.retired()), (3, 0));

        // Past slot 0's expiry: a new session, the old one retired but open.
        tokio::time::advance(Duration::from_secs(4)).await;
        let a3 = pool.get(connector(&calls, &peers)).await.unwrap();
        assert!(!Arc::ptr_eq(&a, &a3));
        assert_eq!(pool.retired(), 1);
        assert_eq!(pool.scavenge(), 0, "grace runs from the expiry");
        assert!(!a.is_closed());
        tokio::time::advance(Duration::from_secs(2)).await;
        assert_eq!(pool.scavenge(), 1);
        assert!(a.is_closed() && !a3.is_closed());
        assert_eq!(pool.retired(), 0);
    }

    #[tokio::test]
    async fn failed_connect_leaves_the_slot_empty() {
        let pool = MuxPool::new(1, None, Duration::ZERO);
        let err = pool
            .get(|| std::future::ready(Err(io::Error::other("down"))))
            .await
            .unwrap_err();
        assert_eq!(err.to_string(), "down");
        let calls = Arc::new(AtomicUsize::new(0));
        let peers = Arc::new(Mutex::new(Vec::new()));
        pool.get(connector(&calls, &peers)).await.unwrap();
        pool.get(connector(&calls, &peers)).await.unwrap();
        assert_eq!(calls.load(Ordering::Relaxed), 1);
    }
}
