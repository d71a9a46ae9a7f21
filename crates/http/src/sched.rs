//! The send scheduler: which stream's data goes next (RFC 9218 §10).
//!
//! Strictly by urgency; within one urgency, non-incremental streams one after another in stream
//! order, then incremental streams round-robin. One pick is one quantum; the engine calls
//! [`Scheduler::next`] again for every quantum, so a newly urgent stream wins the very next pick.

use std::collections::VecDeque;

use crate::priority::Priority;

#[derive(Default, Debug)]
struct Bucket {
    /// Non-incremental streams, in id order. A sorted vector, not a `BTreeSet`: a set
    /// allocates its first node whenever it goes from empty to one stream and frees it when it
    /// empties again, which a connection of short responses does for nearly every response
    /// (about 250 instructions each time). Streams mostly arrive in id order, so an insertion
    /// goes at the end; the vector holds at most the streams the connection allows.
    sequential: Vec<u32>,
    round_robin: VecDeque<u32>,
}

/// Ready streams by urgency: eight buckets (0 most urgent), each with its non-incremental
/// streams in id order and its incremental streams in round-robin order.
#[derive(Default, Debug)]
pub struct Scheduler {
    buckets: [Bucket; 8],
}

impl Scheduler {
    /// Mark `id` ready with priority `p` (it must not already be scheduled).
    pub fn push(&mut self, id: u32, p: Priority) {
        let b = &mut self.buckets[usize::from(p.urgency.min(7))];
        if p.incremental {
            b.round_robin.push_back(id);
        } else if let Err(at) = b.sequential.binary_search(&id) {
            b.sequential.insert(at, id);
        }
    }

    /// Remove `id`, scheduled with priority `p`.
    pub fn remove(&mut self, id: u32, p: Priority) {
        let b = &mut self.buckets[usize::from(p.urgency.min(7))];
        if p.incremental {
            b.round_robin.retain(|&s| s != id);
        } else if let Ok(at) = b.sequential.binary_search(&id) {
            b.sequential.remove(at);
        }
    }

    /// Whether no stream is ready.
    pub fn is_empty(&self) -> bool {
        self.buckets.iter().all(|b| b.sequential.is_empty() && b.round_robin.is_empty())
    }

    /// The urgency of the most urgent ready stream.
    pub fn urgency(&self) -> Option<u8> {
        self.buckets.iter().position(|b| !b.sequential.is_empty() || !b.round_robin.is_empty()).map(|u| u as u8)
    }

    /// The next stream to serve. It stays scheduled; for round-robin streams the pick moves it
    /// to the back of its bucket.
    // Not an iterator: a pick does not consume the stream.
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> Option<u32> {
        self.next_run().map(|(id, _)| id)
    }

    /// As [`Scheduler::next`], and whether the following picks would be the same stream for as
    /// long as nothing is pushed or removed: a non-incremental stream stays first in its
    /// urgency, an incremental one alone in its urgency is picked again. An engine may then
    /// give such a stream more than one quantum in one go without changing the order.
    pub fn next_run(&mut self) -> Option<(u32, bool)> {
        for b in &mut self.buckets {
            if let Some(&id) = b.sequential.first() {
                return Some((id, true));
            }
            if let Some(id) = b.round_robin.pop_front() {
                b.round_robin.push_back(id);
                return Some((id, b.round_robin.len() == 1));
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(urgency: u8, incremental: bool) -> Priority {
        Priority { urgency, incremental }
    }

    #[test]
    fn exact_order() {
        let mut s = Scheduler::default();
        s.push(9, p(5, true));
        s.push(11, p(5, true));
        s.push(7, p(3, false));
        s.push(5, p(3, false));
        s.push(13, p(3, true));
        let picks: Vec<_> = (0..3).map(|_| s.next().unwrap()).collect();
        assert_eq!(picks, [5, 5, 5], "non-incremental lowest id first, repeatedly");
        s.remove(5, p(3, false));
        assert_eq!(s.next(), Some(7));
        s.remove(7, p(3, false));
        assert_eq!((0..3).map(|_| s.next().unwrap()).collect::<Vec<_>>(), [13, 13, 13]);
        s.remove(13, p(3, true));
        assert_eq!((0..4).map(|_| s.next().unwrap()).collect::<Vec<_>>(), [9, 11, 9, 11]);
        s.push(1, p(0, false));
        assert_eq!(s.next(), Some(1), "urgent stream wins the next pick");
        s.remove(1, p(0, false));
        s.remove(9, p(5, true));
        s.remove(11, p(5, true));
        assert_eq!(s.next(), None);
    }

    #[test]
    fn a_run_is_reported_only_where_the_next_pick_repeats() {
        let mut s = Scheduler::default();
        s.push(9, p(3, true));
        assert_eq!(s.next_run(), Some((9, true)), "alone in its urgency");
        s.push(11, p(3, true));
        assert_eq!(s.next_run(), Some((9, false)), "round-robin with 11");
        assert_eq!(s.next_run(), Some((11, false)));
        s.push(5, p(3, false));
        s.push(3, p(3, false));
        assert_eq!(s.next_run(), Some((3, true)), "non-incremental: lowest id, again and again");
        assert_eq!(s.next_run(), Some((3, true)));
        s.remove(3, p(3, false));
        s.remove(5, p(3, false));
        s.remove(11, p(3, true));
        s.push(13, p(6, true));
        assert_eq!(s.next_run(), Some((9, true)), "a less urgent stream does not break the run");
    }

    #[test]
    fn most_urgent_ready_and_empty() {
        let mut s = Scheduler::default();
        assert!(s.is_empty());
        assert_eq!(s.urgency(), None);
        s.push(3, p(5, true));
        s.push(5, p(7, false));
        assert_eq!(s.urgency(), Some(5));
        s.push(7, p(0, false));
        assert_eq!(s.urgency(), Some(0));
        s.remove(7, p(0, false));
        s.remove(3, p(5, true));
        assert_eq!(s.urgency(), Some(7));
        s.remove(5, p(7, false));
        assert!(s.is_empty());
    }
}
