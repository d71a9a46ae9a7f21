//! A queue from tasks to one receiving task: a `VecDeque` under a lock, and a wake-up.
//!
//! Why not a tokio channel: each allocates its first block of 32 slots with the channel, and
//! a connection has three (commands from its handlers, buffers to its writer and back): about
//! 3 kB that every idle connection paid for. This queue holds nothing until it is used, and
//! hands its room back when the receiver asks ([`Receiver::shrink`]).
//!
//! Semantics, as the channels it replaces: `send` fails once the receiver is gone; `recv`
//! returns `None` once every sender is gone and the queue is empty. No wake-up is lost:
//! `Notify::notify_one` stores a permit when the receiver is not waiting, and a receiver
//! looks at the queue before it waits.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::Notify;

struct Shared<T> {
    queue: Mutex<VecDeque<T>>,
    ready: Notify,
    senders: AtomicUsize,
    receiver_alive: AtomicBool,
}

impl<T> Shared<T> {
    fn queue(&self) -> MutexGuard<'_, VecDeque<T>> {
        // Pushing and popping cannot leave the queue half-changed: a poisoned lock is fine.
        self.queue.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// A new mailbox: its sending side (clone it for more senders) and its receiving side.
pub(crate) fn mailbox<T>() -> (Sender<T>, Receiver<T>) {
    let shared = Arc::new(Shared {
        queue: Mutex::new(VecDeque::new()),
        ready: Notify::new(),
        senders: AtomicUsize::new(1),
        receiver_alive: AtomicBool::new(true),
    });
    (Sender(shared.clone()), Receiver(shared))
}

fn shrink<T>(shared: &Shared<T>) {
    let mut q = shared.queue();
    if q.is_empty() {
        *q = VecDeque::new();
    }
}

pub(crate) struct Sender<T>(Arc<Shared<T>>);

impl<T> Sender<T> {
    /// Queue `value`; it comes back when the receiver is gone.
    pub(crate) fn send(&self, value: T) -> Result<(), T> {
        if !self.0.receiver_alive.load(Ordering::Acquire) {
            return Err(value);
        }
        self.0.queue().push_back(value);
        self.0.ready.notify_one();
        Ok(())
    }

    /// Hand back the queue's room if it is empty (as [`Receiver::shrink`], from this side).
    pub(crate) fn shrink(&self) {
        shrink(&self.0);
    }
}

impl<T> Clone for Sender<T> {
    fn clone(&self) -> Self {
        self.0.senders.fetch_add(1, Ordering::Relaxed);
        Self(self.0.clone())
    }
}

impl<T> Drop for Sender<T> {
    fn drop(&mut self) {
        if self.0.senders.fetch_sub(1, Ordering::AcqRel) == 1 {
            // The last one: a waiting receiver must see the end.
            self.0.ready.notify_one();
        }
    }
}

pub(crate) struct Receiver<T>(Arc<Shared<T>>);

impl<T> Receiver<T> {
    /// The next value, if one is queued.
    pub(crate) fn try_recv(&mut self) -> Option<T> {
        self.0.queue().pop_front()
    }

    /// The next value; `None` once every sender is gone and nothing is queued. Cancel-safe: a
    /// value is taken only when this returns it.
    pub(crate) async fn recv(&mut self) -> Option<T> {
        loop {
            if let Some(v) = self.try_recv() {
                return Some(v);
            }
            if self.0.senders.load(Ordering::Acquire) == 0 {
                // A send that came before the last sender left is in the queue by now.
                return self.try_recv();
            }
            self.0.ready.notified().await;
        }
    }

    /// Hand back the queue's room if it is empty (an idle connection).
    pub(crate) fn shrink(&self) {
        shrink(&self.0);
    }
}

impl<T> Drop for Receiver<T> {
    fn drop(&mut self) {
        self.0.receiver_alive.store(false, Ordering::Release);
        // What was queued is not going to be read: drop it now, not with the last sender.
        let dropped = std::mem::take(&mut *self.0.queue());
        drop(dropped);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn values_arrive_in_order_and_the_end_is_seen() {
        let (tx, mut rx) = mailbox::<u32>();
        let tx2 = tx.clone();
        let producer = tokio::spawn(async move {
            for i in 0..1000 {
                tx2.send(i).unwrap();
                if i % 7 == 0 {
                    tokio::task::yield_now().await;
                }
            }
        });
        for i in 0..1000 {
            let v = tokio::time::timeout(Duration::from_secs(5), rx.recv()).await.expect("no lost wake-up");
            assert_eq!(v, Some(i));
        }
        producer.await.unwrap();
        // One sender left: nothing queued, and no end yet.
        assert!(tokio::time::timeout(Duration::from_millis(50), rx.recv()).await.is_err());
        tx.send(7).unwrap();
        drop(tx);
        assert_eq!(rx.recv().await, Some(7), "a value sent before the end still arrives");
        assert_eq!(rx.recv().await, None);
    }

    #[tokio::test]
    async fn the_last_sender_leaving_wakes_a_waiting_receiver() {
        let (tx, mut rx) = mailbox::<u32>();
        let waiting = tokio::spawn(async move { rx.recv().await });
        tokio::time::sleep(Duration::from_millis(20)).await;
        drop(tx);
        let got = tokio::time::timeout(Duration::from_secs(5), waiting).await.expect("woken").unwrap();
        assert_eq!(got, None);
    }

    #[test]
    fn sends_fail_once_the_receiver_is_gone_and_shrink_hands_back_room() {
        let (tx, mut rx) = mailbox::<Vec<u8>>();
        for _ in 0..100 {
            tx.send(vec![1]).unwrap();
        }
        while rx.try_recv().is_some() {}
        assert!(rx.0.queue().capacity() >= 100);
        rx.shrink();
        assert_eq!(rx.0.queue().capacity(), 0);
        // From the sending side too, and only while the queue is empty.
        for _ in 0..100 {
            tx.send(vec![1]).unwrap();
        }
        tx.shrink();
        assert_eq!(rx.0.queue().len(), 100);
        while rx.try_recv().is_some() {}
        tx.shrink();
        assert_eq!(rx.0.queue().capacity(), 0);
        drop(rx);
        assert_eq!(tx.send(vec![2]), Err(vec![2]));
    }
}
