//! A client's driver, run by its stream's task when that task is awake.
//!
//! On tokio's multi-thread runtime a client's two tasks, the application's
//! (which reads and writes the stream) and the driver's, woke each other
//! once per batch and were moved between the workers by whichever worker
//! polled the socket's readiness: a futex or eventfd wake-up per batch, the
//! written bytes sent from the other core. A client's [`Driver`] therefore
//! sits in an [`Inline`] that either task may run, one at a time:
//!
//! - `state` says whether someone runs it now (`RUNNING`) and whether a wake
//!   came meanwhile (`NOTIFIED`): the runner runs it again before it leaves,
//!   so a wake during a run costs no task wake-up at all.
//! - Every waker the driver registers (socket readiness, its `Sleep`, the
//!   inbox, its yields) is the [`Inline`] itself. Woken while nobody runs
//!   it, it wakes the stream's task when that task waits in a stream call
//!   (the runner: registered when the call returned `Pending` less than
//!   [`RUNNER_FRESH`] ago), else the spawned driver task.
//! - A stream call ([`SessionShared::poll_call`]) enters the driver first
//!   when nobody runs it; it runs it when a wake is pending, makes its
//!   call, and runs it again before it leaves when the call gave it work
//!   (a write queued data: it leaves from the writer's core, with the bytes
//!   still in its cache).
//! - The spawned task keeps the driver's other duties: timers and input
//!   while the application does not call the stream, the linger after the
//!   handles are gone. A runner that stopped waiting without calling again
//!   (its future was dropped) is owed at most one wake: the guard timer,
//!   armed when a runner registers, wakes the spawned task
//!   [`RUNNER_GUARD`] later, and a runner older than [`RUNNER_FRESH`] is
//!   never woken in the task's place.
//!
//! The cost: two compare-and-swaps per stream call (enter, leave), a
//! `try_lock` of an uncontended mutex per run, and a clock read when a call
//! returns `Pending`; nothing per packet.
//!
//! [`SessionShared::poll_call`]: super::shared::SessionShared::poll_call

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Wake, Waker};
use std::time::Duration;

use tokio::time::{Instant, Sleep};

use super::Driver;
use super::shared::{lock, register};

/// Nobody runs the driver.
const IDLE: u8 = 0;
/// A task runs it.
const RUNNING: u8 = 1;
/// A task runs it and a wake came meanwhile: it runs again.
const NOTIFIED: u8 = 2;

/// Runs in a row before the runner hands the rest to the spawned task.
const MAX_RUNS: usize = 4;
/// A stream task that called less than this long ago is the driver's
/// runner: wakes go to it (it waits) or wait for its next call (it runs).
pub(crate) const RUNNER_FRESH: Duration = Duration::from_millis(2);
/// The spawned task looks this long after the runner's last call, so work
/// left for a runner that stopped calling waits at most about this long.
pub(crate) const RUNNER_GUARD: Duration = Duration::from_millis(4);

/// The stream task that called last.
struct Runner {
    waker: Waker,
    /// When its last call began.
    since: Instant,
    /// That call returned `Pending`: the task waits for a wake.
    waiting: bool,
}

impl Runner {
    fn is_fresh(&self) -> bool {
        self.since.elapsed() < RUNNER_FRESH
    }
}

/// A client's driver and who may run it.
pub(crate) struct Inline {
    state: AtomicU8,
    /// A wake came while nobody ran the driver: the next run is due.
    pending: AtomicBool,
    /// `None` once the driver finished or its task was dropped.
    driver: Mutex<Option<Driver>>,
    /// The driver is gone (read without the mutex).
    gone: AtomicBool,
    runner: Mutex<Option<Runner>>,
    /// The spawned task's waker.
    task: Mutex<Option<Waker>>,
    /// Wakes the spawned task [`RUNNER_GUARD`] after the runner's last call.
    guard: Mutex<Pin<Box<Sleep>>>,
    guard_armed: AtomicBool,
}

impl Inline {
    /// Wraps `driver` and spawns the task that keeps its timers.
    pub(crate) fn spawn(driver: Driver) -> Arc<Self> {
        let inline = Arc::new(Self {
            state: AtomicU8::new(IDLE),
            pending: AtomicBool::new(true),
            driver: Mutex::new(Some(driver)),
            gone: AtomicBool::new(false),
            runner: Mutex::new(None),
            task: Mutex::new(None),
            guard: Mutex::new(Box::pin(tokio::time::sleep(Duration::ZERO))),
            guard_armed: AtomicBool::new(false),
        });
        tokio::spawn(DriverTask(inline.clone()));
        inline
    }

    /// Takes the driver for the calling task unless another runs it.
    pub(crate) fn enter(self: &Arc<Self>) -> Option<Entered<'_>> {
        match self
            .state
            .compare_exchange(IDLE, RUNNING, Ordering::AcqRel, Ordering::Acquire)
        {
            Ok(_) => Some(Entered { inline: self }),
            Err(_) => None,
        }
    }

    /// One poll of the driver with `self` as its waker. False once the
    /// driver is gone (finished: its task is woken to end).
    fn run_once(self: &Arc<Self>) -> bool {
        self.pending.store(false, Ordering::Release);
        let waker = Waker::from(self.clone());
        let mut cx = Context::from_waker(&waker);
        // Only the holder of `RUNNING` gets here; a failed `try_lock` means
        // the task is being dropped (taking the driver), and it is gone.
        let Ok(mut slot) = self.driver.try_lock() else {
            return false;
        };
        let Some(driver) = slot.as_mut() else {
            return false;
        };
        if Pin::new(driver).poll(&mut cx).is_pending() {
            return true;
        }
        let finished = slot.take();
        self.gone.store(true, Ordering::Release);
        drop(slot);
        drop(finished);
        self.wake_task();
        false
    }

    /// Wakes the spawned task (its waker stays, for the guard timer).
    fn wake_task(&self) {
        if let Some(w) = lock(&self.task).as_ref() {
            w.wake_by_ref();
        }
    }

    /// Leaves `RUNNING`: runs again while wakes came meanwhile (at most
    /// [`MAX_RUNS`] times, then the spawned task takes the rest).
    fn leave(self: &Arc<Self>) {
        for _ in 0..MAX_RUNS {
            match self
                .state
                .compare_exchange(RUNNING, IDLE, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => return,
                Err(_) => {
                    self.state.store(RUNNING, Ordering::Release);
                    if !self.run_once() {
                        break;
                    }
                }
            }
        }
        self.pending.store(true, Ordering::Release);
        self.state.store(IDLE, Ordering::Release);
        self.wake_task();
    }

    /// A stream task called (`waiting`: the call returned `Pending` with
    /// this waker registered): it is the runner now, and the guard timer is
    /// armed unless it already is.
    fn set_runner(&self, waker: &Waker, waiting: bool) {
        let now = Instant::now();
        {
            let mut r = lock(&self.runner);
            match r.as_mut() {
                Some(r) if r.waker.will_wake(waker) => {
                    r.since = now;
                    r.waiting = waiting;
                }
                _ => {
                    *r = Some(Runner {
                        waker: waker.clone(),
                        since: now,
                        waiting,
                    });
                }
            }
        }
        if !self.guard_armed.load(Ordering::Acquire) {
            self.arm_guard(now + RUNNER_GUARD);
        }
    }

    /// A stream call that found the driver run by another task.
    pub(crate) fn called(&self, waker: &Waker, waiting: bool) {
        self.set_runner(waker, waiting);
    }

    /// Points the guard timer at `at`, registered with the spawned task.
    fn arm_guard(&self, at: Instant) {
        let task = lock(&self.task).clone();
        let Some(task) = task else {
            return;
        };
        let mut g = lock(&self.guard);
        g.as_mut().reset(at);
        self.guard_armed.store(true, Ordering::Release);
        if g.as_mut().poll(&mut Context::from_waker(&task)).is_ready() {
            task.wake_by_ref();
        }
    }

    /// Polls the guard timer for the spawned task; once it fired, it
    /// follows a runner that still calls.
    fn poll_guard(&self, cx: &mut Context<'_>) {
        if !self.guard_armed.load(Ordering::Acquire) {
            return;
        }
        let mut g = lock(&self.guard);
        if g.as_mut().poll(cx).is_pending() {
            return;
        }
        self.guard_armed.store(false, Ordering::Release);
        drop(g);
        let since = lock(&self.runner)
            .as_ref()
            .filter(|r| r.is_fresh())
            .map(|r| r.since);
        if let Some(since) = since {
            self.arm_guard(since + RUNNER_GUARD);
        }
    }

    /// A wake while nobody runs the driver: to the stream task that waits
    /// for it, to nobody when that task is running (its next call runs the
    /// driver, the guard timer bounds the wait), else to the spawned task.
    fn dispatch(&self) {
        self.pending.store(true, Ordering::Release);
        let to_runner = {
            let r = lock(&self.runner);
            match r.as_ref() {
                Some(r) if r.is_fresh() => Some(r.waiting.then(|| r.waker.clone())),
                _ => None,
            }
        };
        match to_runner {
            Some(Some(w)) => w.wake(),
            Some(None) => {}
            None => self.wake_task(),
        }
    }
}

impl Wake for Inline {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        let mut s = self.state.load(Ordering::Acquire);
        loop {
            let next = match s {
                IDLE => break,
                RUNNING => NOTIFIED,
                _ => return,
            };
            match self
                .state
                .compare_exchange(s, next, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => return,
                Err(now) => s = now,
            }
        }
        self.dispatch();
    }
}

/// The calling task holds the driver (`RUNNING`).
pub(crate) struct Entered<'a> {
    inline: &'a Arc<Inline>,
}

impl Entered<'_> {
    /// A wake came since the last run: the caller should run it.
    pub(crate) fn is_due(&self) -> bool {
        self.inline.pending.load(Ordering::Acquire)
            || self.inline.state.load(Ordering::Acquire) == NOTIFIED
    }

    /// Runs the driver once.
    pub(crate) fn run(&self) {
        let _ = self.inline.state.compare_exchange(
            NOTIFIED,
            RUNNING,
            Ordering::AcqRel,
            Ordering::Acquire,
        );
        self.inline.run_once();
    }

    /// Leaves after the call, which returned `Pending` (`waiting`) or not.
    pub(crate) fn leave(self, waker: &Waker, waiting: bool) {
        let inline = self.inline;
        std::mem::forget(self);
        inline.set_runner(waker, waiting);
        inline.leave();
    }
}

impl Drop for Entered<'_> {
    /// Unwinding out of a run: the spawned task takes over.
    fn drop(&mut self) {
        self.inline.pending.store(true, Ordering::Release);
        self.inline.state.store(IDLE, Ordering::Release);
        self.inline.wake_task();
    }
}

/// The spawned task: runs the driver when nobody else does, ends when it
/// finished, and frees it when the runtime drops the task.
struct DriverTask(Arc<Inline>);

impl Future for DriverTask {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let inline = &self.0;
        register(&mut lock(&inline.task), cx);
        inline.poll_guard(cx);
        if !inline.pending.load(Ordering::Acquire) && !inline.gone.load(Ordering::Acquire) {
            // Only the guard (nothing owed), or a holder runs it again.
            return Poll::Pending;
        }
        for _ in 0..3 {
            if inline.gone.load(Ordering::Acquire) {
                return Poll::Ready(());
            }
            if inline
                .state
                .compare_exchange(IDLE, RUNNING, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
            {
                if !inline.run_once() {
                    inline.state.store(IDLE, Ordering::Release);
                    return Poll::Ready(());
                }
                inline.leave();
                return Poll::Pending;
            }
            // Someone runs it: it runs again for this wake.
            if inline
                .state
                .compare_exchange(RUNNING, NOTIFIED, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
                || inline.state.load(Ordering::Acquire) == NOTIFIED
            {
                return Poll::Pending;
            }
            // It was left meanwhile: try again.
        }
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}

impl Drop for DriverTask {
    fn drop(&mut self) {
        // Breaks the cycle (the driver's registrations hold `Inline`) and
        // ends the sessions, as dropping a spawned driver did.
        let driver = lock(&self.0.driver).take();
        self.0.gone.store(true, Ordering::Release);
        drop(driver);
        lock(&self.0.runner).take();
    }
}
