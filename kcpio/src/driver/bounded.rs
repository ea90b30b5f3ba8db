//! [`BoundedMap`]: a hash map with a capacity that forgets its oldest
//! entries first, for the admission memories whose keys an attacker picks
//! (tombstones, opener fingerprints, per-source buckets).
#![deny(clippy::disallowed_methods, clippy::disallowed_types)]

use std::collections::hash_map::{Entry, RandomState};
use std::collections::{HashMap, VecDeque};
use std::hash::Hash;

/// A map of at most `cap` entries, oldest first out.
///
/// Inserting a new key when the map is full forgets the oldest entry (in
/// order of first insertion; inserting a key again replaces its value and
/// keeps its place). [`expire`](Self::expire) forgets from the oldest end
/// while a predicate holds, so entries inserted with times that never
/// decrease expire in O(1) each. Keys are hashed with SipHash under random
/// keys (`RandomState`), so a peer that picks keys cannot aim them at one
/// bucket. Every operation is O(1) amortized; memory is the map's and one
/// key per entry in the order.
pub(crate) struct BoundedMap<K, V> {
    map: HashMap<K, V, RandomState>,
    /// Every key of `map`, oldest first.
    order: VecDeque<K>,
    cap: usize,
}

impl<K: Eq + Hash + Clone, V> BoundedMap<K, V> {
    /// An empty map holding at most `cap` (at least 1) entries; allocates
    /// on first use.
    pub(crate) fn new(cap: usize) -> Self {
        Self {
            map: HashMap::default(),
            order: VecDeque::new(),
            cap: cap.max(1),
        }
    }

    /// Entries held (at most the capacity).
    #[cfg(any(test, fuzzing))]
    pub(crate) fn len(&self) -> usize {
        self.map.len()
    }

    /// Whether `key` is held.
    pub(crate) fn contains_key(&self, key: &K) -> bool {
        self.map.contains_key(key)
    }

    /// The value of `key`.
    pub(crate) fn get(&self, key: &K) -> Option<&V> {
        self.map.get(key)
    }

    /// The value of `key`, to change.
    pub(crate) fn get_mut(&mut self, key: &K) -> Option<&mut V> {
        self.map.get_mut(key)
    }

    /// Holds `value` under `key` and returns it. A new key first makes
    /// room ([`make_room`](Self::make_room)) and becomes the newest; a held
    /// key gets the new value and keeps its place.
    pub(crate) fn insert(&mut self, key: K, value: V) -> &mut V {
        if !self.map.contains_key(&key) {
            self.make_room();
            self.order.push_back(key.clone());
        }
        match self.map.entry(key) {
            Entry::Occupied(mut held) => {
                held.insert(value);
                held.into_mut()
            }
            Entry::Vacant(new) => new.insert(value),
        }
    }

    /// Forgets the oldest entries until one more fits.
    pub(crate) fn make_room(&mut self) {
        while self.order.len() >= self.cap {
            self.pop_oldest();
        }
    }

    /// Forgets entries from the oldest while `done` says so of the oldest.
    pub(crate) fn expire(&mut self, mut done: impl FnMut(&V) -> bool) {
        while let Some(oldest) = self.order.front() {
            if !self.map.get(oldest).is_some_and(&mut done) {
                break;
            }
            self.pop_oldest();
        }
    }

    fn pop_oldest(&mut self) {
        if let Some(key) = self.order.pop_front() {
            self.map.remove(&key);
        }
    }

    /// The books balance: one order entry per key, within the capacity.
    #[cfg(any(test, fuzzing))]
    pub(crate) fn check(&self) {
        assert!(self.map.len() <= self.cap);
        assert_eq!(self.order.len(), self.map.len());
        assert!(self.order.iter().all(|k| self.map.contains_key(k)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forgets_the_oldest_at_the_capacity() {
        let mut m = BoundedMap::new(3);
        for k in 0..3 {
            m.insert(k, k * 10);
        }
        assert_eq!(m.len(), 3);
        m.insert(3, 30);
        assert_eq!(m.len(), 3);
        assert!(!m.contains_key(&0));
        assert!((1..4).all(|k| m.contains_key(&k)));
        m.check();
    }

    #[test]
    fn a_held_key_keeps_its_place_and_takes_the_new_value() {
        let mut m = BoundedMap::new(2);
        m.insert("a", 1);
        m.insert("b", 2);
        assert_eq!(*m.insert("a", 3), 3);
        assert_eq!(m.len(), 2);
        // "a" is still the oldest: the next new key pushes it out.
        m.insert("c", 4);
        assert!(!m.contains_key(&"a"));
        assert_eq!(m.get_mut(&"b").copied(), Some(2));
        m.check();
    }

    #[test]
    fn expire_stops_at_the_first_entry_that_stays() {
        let mut m = BoundedMap::new(8);
        for (k, until) in [(1, 10), (2, 20), (3, 30)] {
            m.insert(k, until);
        }
        m.expire(|&until| until <= 20);
        assert_eq!(m.len(), 1);
        assert!(m.contains_key(&3));
        // Only the oldest end is looked at.
        m.insert(4, 5);
        m.expire(|&until| until <= 10);
        assert_eq!(m.len(), 2);
        m.check();
    }

    #[test]
    fn make_room_leaves_space_for_one() {
        let mut m = BoundedMap::new(2);
        m.insert(1, ());
        m.insert(2, ());
        m.make_room();
        assert_eq!(m.len(), 1);
        assert!(m.contains_key(&2));
        m.check();
    }

    #[test]
    fn get_mut_changes_the_value_in_place() {
        let mut m = BoundedMap::new(2);
        m.insert(1u8, 1u32);
        if let Some(v) = m.get_mut(&1) {
            *v += 1;
        }
        assert_eq!(m.get_mut(&1).copied(), Some(2));
        assert_eq!(m.get_mut(&9), None);
    }
}
