//! A map and a set kept as one sorted vector: the thread document's run digests and terminal
//! execution ids. A `BTreeMap` allocates a whole node (room for 11 entries, ~540 B for
//! `String → String`) for its first entry, and every open stream of a new thread holds one;
//! a vector holds what it has (docs/performance.md, issue 26). Iteration is in key order, as
//! with the B-tree, so the state file's bytes are the same. Insert and remove move the tail
//! (the bounds keep these sets at ≤ 10 000 small entries); bulk removal is `retain`.

use std::borrow::Borrow;

use serde::ser::{Serialize, SerializeMap, Serializer};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SortedMap<K, V> {
    entries: Vec<(K, V)>,
}

impl<K, V> Default for SortedMap<K, V> {
    fn default() -> Self {
        SortedMap {
            entries: Vec::new(),
        }
    }
}

impl<K: Ord, V> SortedMap<K, V> {
    fn find<Q: Ord + ?Sized>(&self, key: &Q) -> Result<usize, usize>
    where
        K: Borrow<Q>,
    {
        self.entries.binary_search_by(|(k, _)| k.borrow().cmp(key))
    }

    pub fn get<Q: Ord + ?Sized>(&self, key: &Q) -> Option<&V>
    where
        K: Borrow<Q>,
    {
        self.find(key).ok().map(|i| &self.entries[i].1)
    }

    pub fn contains_key<Q: Ord + ?Sized>(&self, key: &Q) -> bool
    where
        K: Borrow<Q>,
    {
        self.find(key).is_ok()
    }

    /// The previous value of `key`, if it had one.
    pub fn insert(&mut self, key: K, value: V) -> Option<V> {
        match self.find(&key) {
            Ok(i) => Some(std::mem::replace(&mut self.entries[i].1, value)),
            Err(i) => {
                // Grow by one: a thread's sets grow a run at a time, and a stream holds them.
                self.entries.reserve_exact(1);
                self.entries.insert(i, (key, value));
                None
            }
        }
    }

    pub fn remove<Q: Ord + ?Sized>(&mut self, key: &Q) -> Option<V>
    where
        K: Borrow<Q>,
    {
        self.find(key).ok().map(|i| self.entries.remove(i).1)
    }

    pub fn retain(&mut self, mut keep: impl FnMut(&K, &V) -> bool) {
        self.entries.retain(|(k, v)| keep(k, v));
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    pub fn iter(&self) -> impl Iterator<Item = (&K, &V)> {
        self.entries.iter().map(|(k, v)| (k, v))
    }

    pub fn keys(&self) -> impl Iterator<Item = &K> {
        self.entries.iter().map(|(k, _)| k)
    }
}

impl<K: Ord, V> FromIterator<(K, V)> for SortedMap<K, V> {
    /// The last value of a repeated key wins, as with the B-tree's `collect`.
    fn from_iter<I: IntoIterator<Item = (K, V)>>(items: I) -> Self {
        let mut entries: Vec<(K, V)> = items.into_iter().collect();
        // Stable: equal keys keep their order, and the last of each run is kept below.
        entries.sort_by(|a, b| a.0.cmp(&b.0));
        let mut out: Vec<(K, V)> = Vec::with_capacity(entries.len());
        for e in entries {
            match out.last_mut() {
                Some(last) if last.0 == e.0 => *last = e,
                _ => out.push(e),
            }
        }
        SortedMap { entries: out }
    }
}

impl<K: Serialize, V: Serialize> Serialize for SortedMap<K, V> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(Some(self.entries.len()))?;
        for (k, v) in &self.entries {
            m.serialize_entry(k, v)?;
        }
        m.end()
    }
}

/// A set as a [`SortedMap`] without values.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SortedSet<K> {
    map: SortedMap<K, ()>,
}

impl<K> Default for SortedSet<K> {
    fn default() -> Self {
        SortedSet {
            map: SortedMap::default(),
        }
    }
}

impl<K: Ord> SortedSet<K> {
    pub fn contains<Q: Ord + ?Sized>(&self, key: &Q) -> bool
    where
        K: Borrow<Q>,
    {
        self.map.contains_key(key)
    }

    /// True when `key` was not there.
    pub fn insert(&mut self, key: K) -> bool {
        self.map.insert(key, ()).is_none()
    }

    pub fn remove<Q: Ord + ?Sized>(&mut self, key: &Q) -> bool
    where
        K: Borrow<Q>,
    {
        self.map.remove(key).is_some()
    }

    pub fn retain(&mut self, mut keep: impl FnMut(&K) -> bool) {
        self.map.retain(|k, _| keep(k));
    }

    pub fn len(&self) -> usize {
        self.map.len()
    }

    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    pub fn iter(&self) -> impl Iterator<Item = &K> {
        self.map.keys()
    }
}

impl<K: Ord> FromIterator<K> for SortedSet<K> {
    fn from_iter<I: IntoIterator<Item = K>>(items: I) -> Self {
        SortedSet {
            map: items.into_iter().map(|k| (k, ())).collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::{BTreeMap, BTreeSet};

    /// The same operations on a B-tree and here give the same contents, in the same order.
    #[test]
    fn a_sorted_map_and_set_behave_like_the_btree_they_replace() {
        let mut seed = 7u64;
        let mut next = move || {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (seed >> 33) as u32
        };
        let (mut b, mut s) = (BTreeMap::new(), SortedMap::default());
        let (mut bs, mut ss) = (BTreeSet::new(), SortedSet::default());
        for _ in 0..5_000 {
            let k = format!("k{}", next() % 300);
            let v = next();
            match next() % 4 {
                0 | 1 => {
                    assert_eq!(b.insert(k.clone(), v), s.insert(k.clone(), v));
                    assert_eq!(bs.insert(k.clone()), ss.insert(k));
                }
                2 => {
                    assert_eq!(b.remove(&k), s.remove(k.as_str()));
                    assert_eq!(bs.remove(&k), ss.remove(k.as_str()));
                }
                _ => {
                    assert_eq!(b.get(&k), s.get(k.as_str()));
                    assert_eq!(bs.contains(&k), ss.contains(k.as_str()));
                }
            }
            assert_eq!(b.len(), s.len());
            assert_eq!(bs.len(), ss.len());
        }
        assert!(b.iter().eq(s.iter()));
        assert!(bs.iter().eq(ss.iter()));
        b.retain(|k, _| k.ends_with('1'));
        s.retain(|k, _| k.ends_with('1'));
        assert!(b.iter().eq(s.iter()));
        assert_eq!(
            serde_json::to_string(&b).unwrap(),
            serde_json::to_string(&s).unwrap()
        );
    }

    #[test]
    fn collecting_keeps_the_last_value_of_a_repeated_key_like_the_btree() {
        let items = [("b", 1), ("a", 2), ("b", 3), ("c", 4), ("a", 5)];
        let b: BTreeMap<_, _> = items.into_iter().collect();
        let s: SortedMap<_, _> = items.into_iter().collect();
        assert!(b.iter().eq(s.iter()));
        let set: SortedSet<_> = ["z", "x", "z", "y"].into_iter().collect();
        assert_eq!(set.iter().copied().collect::<Vec<_>>(), ["x", "y", "z"]);
    }

    #[test]
    fn one_entry_holds_one_slot_not_a_node() {
        let mut s = SortedMap::default();
        s.insert("run".to_string(), "digest".to_string());
        assert_eq!(s.entries.capacity(), 1);
    }
}
