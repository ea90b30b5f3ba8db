//! What the drivers of one listener share: its `SO_REUSEPORT` sockets
//! (shards), each with its own driver task and session table.
//!
//! Nothing here is touched for a session's datagrams. The shards share:
//!
//! - the clock's epoch, so a session's times mean the same in every shard
//!   (a session may move to another shard);
//! - the admission [`Limits`] (the session count under the cap, the replay
//!   fingerprints, the per-source buckets) and the fingerprints' keys,
//!   consulted for a would-be new session only;
//! - with migration on and more than one shard, the conv directory: which
//!   shard holds each conv, updated when a session is made, removed or
//!   moved, and read only for a datagram from an address no session of
//!   the receiving shard has (a peer that moved, whose new address the
//!   kernel's hash steers to another socket). That shard forwards such
//!   datagrams to the session's shard ([`DriverShared::forward`], at most
//!   [`MAX_FORWARDED`](super::shared::MAX_FORWARDED) waiting), which
//!   validates the new address as it would its own; once the session moves,
//!   it is handed to the shard that receives its new address
//!   ([`DriverShared::adopt`]), so its datagrams cross no shard afterwards.

use std::collections::HashMap;
use std::collections::hash_map::RandomState;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, OnceLock};

use tokio::time::Instant;

use super::admission::Limits;
use super::shared::{DriverShared, lock};

/// The shard holding a conv, and how many sessions of the listener hold it.
#[derive(Clone, Copy, Debug)]
struct Home {
    /// Index of the shard; meaningless while `count > 1` (a conv two
    /// clients drew never migrates).
    shard: usize,
    count: u32,
}

/// The state the drivers of one listener share.
pub(crate) struct Group {
    pub(crate) epoch: Instant,
    pub(crate) limits: Arc<Limits>,
    /// The keys of the opener fingerprints: one for all shards, so the
    /// same datagram has the same fingerprint whichever socket it reaches.
    pub(crate) fingerprint: RandomState,
    /// conv → shard; `None` with one shard or migration off.
    homes: Option<Mutex<HashMap<u32, Home>>>,
    /// The shards' drivers, in bind order, set once all are bound.
    shards: OnceLock<Vec<Arc<DriverShared>>>,
    /// The listener's refusal episode: bumped when any shard admits a
    /// session, so refusals count peers once per episode of the listener,
    /// whichever socket a peer reaches.
    pub(crate) refusal_episode: Arc<AtomicU64>,
}

impl Group {
    /// The group of `shards` sockets; the conv directory only when
    /// `migration` is on and there is more than one.
    pub(crate) fn new(epoch: Instant, limits: Arc<Limits>, shards: usize, migration: bool) -> Self {
        Self {
            epoch,
            limits,
            fingerprint: RandomState::new(),
            homes: (migration && shards > 1).then(|| Mutex::new(HashMap::new())),
            shards: OnceLock::new(),
            refusal_episode: Arc::new(AtomicU64::new(0)),
        }
    }

    /// The drivers are all bound.
    pub(crate) fn set_shards(&self, shards: Vec<Arc<DriverShared>>) {
        let _ = self.shards.set(shards);
    }

    /// Shard `index`'s driver.
    pub(crate) fn shard(&self, index: usize) -> Option<&Arc<DriverShared>> {
        self.shards.get()?.get(index)
    }

    /// Whether datagrams may cross shards (more than one, migration on).
    pub(crate) fn crosses(&self) -> bool {
        self.homes.is_some()
    }

    /// Shard `shard` made a session of `conv`.
    pub(crate) fn added(&self, conv: u32, shard: usize) {
        if let Some(homes) = &self.homes {
            lock(homes)
                .entry(conv)
                .and_modify(|h| h.count += 1)
                .or_insert(Home { shard, count: 1 });
        }
    }

    /// A session of `conv` left the listener.
    pub(crate) fn removed(&self, conv: u32) {
        if let Some(homes) = &self.homes {
            let mut homes = lock(homes);
            if let Some(h) = homes.get_mut(&conv) {
                h.count -= 1;
                if h.count == 0 {
                    homes.remove(&conv);
                }
            }
        }
    }

    /// The session of `conv` moved to shard `shard`.
    pub(crate) fn moved(&self, conv: u32, shard: usize) {
        if let Some(homes) = &self.homes
            && let Some(h) = lock(homes).get_mut(&conv)
        {
            h.shard = shard;
        }
    }

    /// The other shard that alone holds `conv`, seen from shard `me`.
    pub(crate) fn home_elsewhere(&self, conv: u32, me: usize) -> Option<usize> {
        let homes = lock(self.homes.as_ref()?);
        let h = homes.get(&conv)?;
        (h.count == 1 && h.shard != me).then_some(h.shard)
    }
}
