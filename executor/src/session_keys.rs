//! The shuffle key of each client session this executor ran tasks for: what a fetch of
//! its blocks must carry, and what a peer's pushed replica must carry.
//!
//! Invariants: a key is learned from the session's launched tasks (or, for a session
//! with no task here yet, from a replica push, which only executors can make) and is
//! never replaced by a push; keys are compared in constant time and never logged; a
//! session cleaned up here is retired, so a late push cannot teach its key again (or
//! leave files) until a task of its id range runs here again.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex};

use ember_proto::IdRange;
use tonic::Status;

/// The shuffle key of each client session this executor ran tasks for, by the
/// session's id range ([`IdRange`]), shared by the registration (which learns and
/// forgets them) and the shuffle service (which checks fetches against them).
#[derive(Clone, Default)]
pub struct SessionKeys(Arc<Mutex<Keys>>);

#[derive(Default)]
struct Keys {
    by_session: HashMap<IdRange, String>,
    /// Sessions cleaned up here (at most [`MAX_RETIRED`], oldest forgotten first): no
    /// push may teach their key again until a task of theirs runs here.
    retired: HashSet<IdRange>,
    retired_order: VecDeque<IdRange>,
}

/// Cleaned-up sessions remembered for refusing late pushes.
pub const MAX_RETIRED: usize = 4096;

impl SessionKeys {
    fn map(&self) -> std::sync::MutexGuard<'_, Keys> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Remembers `key` for the session owning RDD or shuffle id `owned_id`; an empty key
    /// is ignored (such a task's session gets no blocks served). Returns the session's
    /// id range when it replaced another key: files in that range's directory are an
    /// earlier session's (kept over a lost registration, whose cleanup never came), and
    /// must go before the new session's task writes any.
    pub fn learn(&self, owned_id: u32, key: &str) -> Option<IdRange> {
        if key.is_empty() {
            return None;
        }
        let range = IdRange::of_id(owned_id);
        let mut keys = self.map();
        keys.retired.remove(&range);
        let old = keys.by_session.insert(range, key.to_string());
        old.filter(|o| !ember_proto::auth::constant_time_eq(o.as_bytes(), key.as_bytes()))
            .map(|_| range)
    }

    /// The SHA-256 (lower-case hex) of each known session key, by id range: what tells
    /// a driver whose outputs the files of a session directory are.
    pub fn digests(&self) -> Vec<(IdRange, String)> {
        use sha2::Digest;
        let keys = self.map();
        let mut out: Vec<(IdRange, String)> = (keys.by_session.iter())
            .map(|(range, key)| {
                let digest = sha2::Sha256::digest(key.as_bytes());
                (*range, ember_proto::digest::to_hex(&digest))
            })
            .collect();
        out.sort_by_key(|(r, _)| *r);
        out
    }

    /// For a pushed replica (the pusher holds the executor secret): `Ok` if `given` is
    /// the key of the session owning `shuffle_id`, or if no key is known for it (then
    /// `given` becomes its key); a known key is never replaced.
    pub fn check_or_learn(&self, shuffle_id: u32, given: &str) -> Result<(), Status> {
        let range = IdRange::of_id(shuffle_id);
        let mut keys = self.map();
        if keys.retired.contains(&range) {
            return Err(Status::failed_precondition(format!(
                "push of a map output of shuffle {shuffle_id}: its session was cleaned up here"
            )));
        }
        match keys.by_session.get(&range) {
            Some(key) if ember_proto::auth::constant_time_eq(key.as_bytes(), given.as_bytes()) => {
                Ok(())
            }
            Some(_) => Err(Status::permission_denied(format!(
                "push of a map output of shuffle {shuffle_id} carries a key other than its \
                 session's"
            ))),
            None if given.is_empty() => Err(Status::permission_denied(format!(
                "push of a map output of shuffle {shuffle_id} carries no session key"
            ))),
            None => {
                keys.by_session.insert(range, given.to_string());
                Ok(())
            }
        }
    }

    /// The key of the session owning `shuffle_id`, if this executor knows it.
    pub fn key_of(&self, shuffle_id: u32) -> Option<String> {
        self.map()
            .by_session
            .get(&IdRange::of_id(shuffle_id))
            .cloned()
    }

    /// Forgets the keys of the sessions owning ids `[id_lo, id_hi)` (their session was
    /// cleaned up), and refuses pushes for them until they run a task here again.
    pub fn forget_range(&self, id_lo: u32, id_hi: u32) {
        let (lo, hi) = (IdRange::of_id(id_lo), IdRange::of_id(id_hi));
        let mut keys = self.map();
        keys.by_session
            .retain(|range, _| *range < lo || *range >= hi);
        // A session owns one range; a wider release retires at most a few.
        for index in (lo.index()..hi.index()).take(16) {
            let Some(range) = IdRange::new(index) else {
                continue;
            };
            if keys.retired.insert(range) {
                keys.retired_order.push_back(range);
            }
        }
        while keys.retired_order.len() > MAX_RETIRED {
            if let Some(old) = keys.retired_order.pop_front() {
                keys.retired.remove(&old);
            }
        }
    }

    /// Forgets every key (the registration ended).
    pub fn clear(&self) {
        let mut keys = self.map();
        keys.by_session.clear();
        keys.retired.clear();
        keys.retired_order.clear();
    }

    /// `Ok` if `given` is the key of the session owning `shuffle_id`.
    pub fn check(&self, shuffle_id: u32, given: &str) -> Result<(), Status> {
        let range = IdRange::of_id(shuffle_id);
        let keys = self.map();
        match keys.by_session.get(&range) {
            Some(key) if ember_proto::auth::constant_time_eq(key.as_bytes(), given.as_bytes()) => {
                Ok(())
            }
            Some(_) if given.is_empty() => Err(Status::permission_denied(format!(
                "fetch of shuffle {shuffle_id} carries no session key; its blocks are served \
                 only to tasks of the session that owns it"
            ))),
            Some(_) => Err(Status::permission_denied(format!(
                "fetch of shuffle {shuffle_id} carries the key of another session; its blocks \
                 are served only to tasks of the session that owns it"
            ))),
            None => Err(Status::permission_denied(format!(
                "shuffle {shuffle_id} belongs to a session this executor ran no task for; \
                 refusing to serve it"
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_key_for_a_range_says_so_and_digests_name_each_key() {
        let keys = SessionKeys::default();
        let per = ember_proto::IDS_PER_SESSION;
        assert_eq!(keys.learn(per + 3, "k1"), None, "a first key");
        assert_eq!(keys.learn(per + 9, "k1"), None, "the same key again");
        assert_eq!(keys.learn(per, ""), None, "an empty key is ignored");
        assert_eq!(
            keys.learn(per + 1, "k2"),
            IdRange::new(1),
            "another session took the range"
        );
        assert_eq!(keys.learn(2 * per, "k3"), None);
        let digests = keys.digests();
        let sha = |k: &str| {
            use sha2::Digest;
            ember_proto::digest::to_hex(&sha2::Sha256::digest(k.as_bytes()))
        };
        assert_eq!(
            digests,
            vec![
                (IdRange::new(1).unwrap(), sha("k2")),
                (IdRange::new(2).unwrap(), sha("k3"))
            ]
        );
    }
}
