//! Choosing an upstream server: smooth weighted round-robin (the sequence nginx uses: each
//! server's current weight grows by its weight, the largest is picked and lowered by the
//! total), least requests in progress per unit of weight, or weighted rendezvous hashing
//! (each server scores `-weight / ln(u)` with `u` uniform from hash(key, server); the best
//! score wins, so only the keys of a server that leaves move). Pure: callers pass which
//! servers are usable and how busy they are.

/// Smooth weighted round-robin state.
#[derive(Debug, Default)]
pub(crate) struct RoundRobin {
    current: Vec<i64>,
}

impl RoundRobin {
    /// The next server among those `usable`, by `weights`.
    pub(crate) fn pick(&mut self, weights: &[u32], usable: &[bool]) -> Option<usize> {
        if self.current.len() != weights.len() {
            self.current = vec![0; weights.len()];
        }
        let mut total = 0i64;
        let mut best: Option<usize> = None;
        for i in 0..weights.len() {
            if !usable[i] {
                continue;
            }
            self.current[i] += i64::from(weights[i]);
            total += i64::from(weights[i]);
            if best.is_none_or(|b| self.current[i] > self.current[b]) {
                best = Some(i);
            }
        }
        let b = best?;
        self.current[b] -= total;
        Some(b)
    }
}

/// The usable server with the fewest requests in progress per unit of weight; ties go to
/// the one after `start` (so equal servers take turns).
pub(crate) fn least_requests(weights: &[u32], usable: &[bool], active: &[usize], start: usize) -> Option<usize> {
    let n = weights.len();
    let mut best: Option<(usize, u64)> = None;
    for k in 0..n {
        let i = (start + k) % n;
        if !usable[i] {
            continue;
        }
        // active / weight compared without division: scale by the product of the others'
        // weights is overkill; 1000 × active / weight keeps ties stable enough.
        let load = (active[i] as u64 * 1000) / u64::from(weights[i]);
        if best.is_none_or(|(_, l)| load < l) {
            best = Some((i, load));
        }
    }
    best.map(|(i, _)| i)
}

/// 64-bit FNV-1a, then a finaliser so that nearby keys spread (this needs no resistance to a
/// chosen key: a client can always pick its own server by choosing its key).
fn hash(key: &[u8], server: usize) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in key.iter().chain((server as u64).to_le_bytes().iter()) {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    // splitmix64's finaliser.
    h ^= h >> 30;
    h = h.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    h ^= h >> 27;
    h = h.wrapping_mul(0x94d0_49bb_1331_11eb);
    h ^ (h >> 31)
}

/// Weighted rendezvous hashing of `key` over the usable servers.
pub(crate) fn rendezvous(key: &[u8], weights: &[u32], usable: &[bool]) -> Option<usize> {
    let mut best: Option<(usize, f64)> = None;
    for (i, &w) in weights.iter().enumerate() {
        if !usable[i] {
            continue;
        }
        // u in (0, 1): never 0, so ln(u) is finite and negative.
        let u = ((hash(key, i) >> 11) as f64 + 0.5) / (1u64 << 53) as f64;
        let score = -f64::from(w) / u.ln();
        if best.is_none_or(|(_, s)| score > s) {
            best = Some((i, score));
        }
    }
    best.map(|(i, _)| i)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_robin_follows_the_weights_smoothly() {
        let mut rr = RoundRobin::default();
        let picks: Vec<usize> = (0..7).map(|_| rr.pick(&[5, 1, 1], &[true; 3]).unwrap()).collect();
        // nginx's example sequence for weights 5, 1, 1: a a b a c a a.
        assert_eq!(picks, vec![0, 0, 1, 0, 2, 0, 0]);
        // A server that is out is skipped; none usable is None.
        let picks: Vec<usize> = (0..4).map(|_| rr.pick(&[1, 1, 1], &[true, false, true]).unwrap()).collect();
        assert!(picks.iter().all(|&p| p != 1));
        assert_eq!(picks.iter().filter(|&&p| p == 0).count(), 2);
        assert_eq!(rr.pick(&[1, 1, 1], &[false; 3]), None);
    }

    #[test]
    fn least_requests_by_weight() {
        assert_eq!(least_requests(&[1, 1, 1], &[true; 3], &[3, 1, 2], 0), Some(1));
        // Twice the weight carries twice the requests for the same load.
        assert_eq!(least_requests(&[2, 1], &[true; 2], &[3, 2], 0), Some(0));
        assert_eq!(least_requests(&[1, 1], &[false, true], &[0, 9], 0), Some(1));
        // Ties rotate with the start.
        assert_eq!(least_requests(&[1, 1], &[true; 2], &[0, 0], 1), Some(1));
    }

    #[test]
    fn rendezvous_is_stable_and_moves_only_a_lost_servers_keys() {
        let w = [1, 1, 1, 1];
        let all = [true; 4];
        let keys: Vec<String> = (0..2000).map(|i| format!("10.0.{}.{}", i / 256, i % 256)).collect();
        let before: Vec<usize> = keys.iter().map(|k| rendezvous(k.as_bytes(), &w, &all).unwrap()).collect();
        // Spread: each server gets a fair share (expected 500).
        for s in 0..4 {
            let n = before.iter().filter(|&&b| b == s).count();
            assert!((380..620).contains(&n), "server {s}: {n}");
        }
        let without_2 = [true, true, false, true];
        for (k, &b) in keys.iter().zip(&before) {
            let after = rendezvous(k.as_bytes(), &w, &without_2).unwrap();
            if b != 2 {
                assert_eq!(after, b, "a key whose server stayed must not move");
            } else {
                assert_ne!(after, 2);
            }
        }
        // Weights: a server of weight 3 gets about three times the keys of one of weight 1.
        let heavy = keys.iter().filter(|k| rendezvous(k.as_bytes(), &[3, 1], &[true; 2]) == Some(0)).count();
        assert!((1350..1650).contains(&heavy), "{heavy}");
    }
}
