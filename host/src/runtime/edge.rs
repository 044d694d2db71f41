//! How full each edge is: an [`EdgeGauge`] counts the messages waiting in
//! every bounded channel between two nodes, so the status record can show
//! where backpressure builds (an edge that stays full is one whose
//! consumer cannot keep up).
//!
//! A channel's count goes up before a message is sent and down once it is
//! received, so it never falls below what the channel holds; a sender
//! blocked on a full channel counts one over, which reads as full. The
//! gauge holds neither end of a channel: a channel still closes when its
//! last sender or receiver goes, exactly as without it. It never blocks.
//! An [`EdgeSender`] whose pair goes through another process sends through
//! its transport's [`RemoteSend`] instead, which counts for itself.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use crossbeam_channel::{SendError, Sender};

use super::message::Message;
use super::status::EdgeStatus;
use super::transport::RemoteSend;

/// The channels of one edge: every producer task to every consumer task
/// of one (upstream, downstream) pair.
#[derive(Debug)]
pub struct EdgeGauge {
    /// The upstream source or stage.
    pub from: String,
    /// The downstream stage or sink.
    pub to: String,
    /// A side output (dead letters, late rows) rather than an `input`.
    pub side: bool,
    /// Messages one channel holds before its sender waits.
    pub capacity: u64,
    /// Per channel, messages sent and not yet received.
    queued: Vec<AtomicU64>,
}

impl EdgeGauge {
    /// A gauge over `channels` channels of `capacity` messages each.
    pub fn new(from: &str, to: &str, side: bool, channels: usize, capacity: usize) -> Arc<Self> {
        Arc::new(EdgeGauge {
            from: from.to_string(),
            to: to.to_string(),
            side,
            capacity: capacity as u64,
            queued: (0..channels).map(|_| AtomicU64::new(0)).collect(),
        })
    }

    /// The handle of channel `index` (0 ≤ index < channels).
    pub fn channel(self: &Arc<Self>, index: usize) -> ChannelGauge {
        ChannelGauge {
            edge: Arc::clone(self),
            index,
        }
    }

    /// The edge now: messages waiting in all its channels, and in its
    /// fullest one (each at most the capacity).
    pub fn status(&self) -> EdgeStatus {
        let per_channel: Vec<u64> = self
            .queued
            .iter()
            .map(|q| q.load(Ordering::Relaxed).min(self.capacity))
            .collect();
        EdgeStatus {
            from: self.from.clone(),
            to: self.to.clone(),
            side: self.side,
            channels: per_channel.len() as u64,
            capacity: self.capacity,
            queued: per_channel.iter().sum(),
            fullest: per_channel.iter().copied().max().unwrap_or(0),
        }
    }
}

/// One channel of an edge, as its sender and its receiver count it.
#[derive(Debug, Clone)]
pub struct ChannelGauge {
    edge: Arc<EdgeGauge>,
    index: usize,
}

impl ChannelGauge {
    fn counter(&self) -> Option<&AtomicU64> {
        self.edge.queued.get(self.index)
    }

    /// A message is about to be sent.
    fn sending(&self) {
        if let Some(q) = self.counter() {
            q.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// A message was received (or a send failed).
    pub fn received(&self) {
        if let Some(q) = self.counter() {
            let _ = q.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
                Some(n.saturating_sub(1))
            });
        }
    }
}

/// The sending end of one channel of an edge, counted by its gauge: a
/// bounded channel in memory, or a pair of an edge a transport carries
/// through another process (a cluster member's keyed edge).
#[derive(Debug, Clone)]
pub struct EdgeSender {
    route: Route,
}

#[derive(Debug, Clone)]
enum Route {
    Channel {
        tx: Sender<Message>,
        gauge: Option<ChannelGauge>,
    },
    Remote(Arc<dyn RemoteSend>),
}

impl EdgeSender {
    /// `tx`, counted on `gauge`.
    pub fn new(tx: Sender<Message>, gauge: ChannelGauge) -> Self {
        EdgeSender {
            route: Route::Channel {
                tx,
                gauge: Some(gauge),
            },
        }
    }

    /// Through a transport (its sender does its own backpressure and
    /// counting).
    pub fn remote(sender: Arc<dyn RemoteSend>) -> Self {
        EdgeSender {
            route: Route::Remote(sender),
        }
    }

    /// Send, blocking while the channel is full (the backpressure).
    pub fn send(&self, message: Message) -> Result<(), SendError<Message>> {
        let (tx, gauge) = match &self.route {
            Route::Channel { tx, gauge } => (tx, gauge),
            Route::Remote(sender) => return sender.send(message),
        };
        // Counted before it can be received, so the count never runs
        // behind the channel.
        if let Some(g) = gauge {
            g.sending();
        }
        let sent = tx.send(message);
        if sent.is_err()
            && let Some(g) = gauge
        {
            g.received();
        }
        sent
    }
}

/// An uncounted sender (tests, edges nobody watches).
impl From<Sender<Message>> for EdgeSender {
    fn from(tx: Sender<Message>) -> Self {
        EdgeSender {
            route: Route::Channel { tx, gauge: None },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crossbeam_channel::bounded;

    #[test]
    fn an_edge_counts_what_waits_in_each_channel_and_its_fullest() {
        let gauge = EdgeGauge::new("nums", "evens", false, 2, 4);
        let (a_tx, a_rx) = bounded(4);
        let (b_tx, b_rx) = bounded(4);
        let (a, b) = (gauge.channel(0), gauge.channel(1));
        let (a_tx, b_tx) = (
            EdgeSender::new(a_tx, a.clone()),
            EdgeSender::new(b_tx, b.clone()),
        );
        for _ in 0..3 {
            a_tx.send(Message::Barrier(1)).expect("send");
        }
        b_tx.send(Message::Barrier(1)).expect("send");
        let s = gauge.status();
        assert_eq!((s.from.as_str(), s.to.as_str()), ("nums", "evens"));
        assert_eq!((s.channels, s.capacity, s.queued, s.fullest), (2, 4, 4, 3));
        let Route::Channel { tx: a_chan, .. } = &a_tx.route else {
            panic!("a channel")
        };
        assert_eq!(a_chan.len() as u64, s.fullest, "the count is the channel's");
        // The consumer drains channel a.
        while a_rx.try_recv().is_ok() {
            a.received();
        }
        let s = gauge.status();
        assert_eq!((s.queued, s.fullest), (1, 1));
        // A full channel reads full, not over.
        for _ in 0..3 {
            b_tx.send(Message::Barrier(2)).expect("send");
        }
        let s = gauge.status();
        assert_eq!((s.queued, s.fullest), (4, 4));
        // A send to a consumer that is gone is not counted as waiting.
        drop(b_rx);
        for _ in 0..4 {
            b.received();
        }
        assert!(b_tx.send(Message::EndOfStream).is_err());
        assert_eq!(gauge.status().queued, 0);
        // Receiving more than was counted never wraps around.
        a.received();
        assert_eq!(gauge.status().queued, 0);
    }

    #[test]
    fn the_gauge_does_not_keep_a_channel_open() {
        let gauge = EdgeGauge::new("a", "b", false, 1, 2);
        let (tx, rx) = bounded::<Message>(2);
        let tx = EdgeSender::new(tx, gauge.channel(0));
        drop(tx);
        assert!(
            rx.recv().is_err(),
            "the receiver sees the sender gone although the gauge lives"
        );
        assert_eq!(gauge.status().queued, 0);
    }
}
