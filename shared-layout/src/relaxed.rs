//! The relaxed protocol: monotonic cursors under the lock; the producer never
//! blocks and overwrites the oldest samples, the consumer counts exactly what
//! it lost (pfprof.h, "Relaxed protocol").

use std::sync::Arc;

use crate::abi::Sample;
use crate::area::Area;
use crate::lock::{lock_consumer, try_lock_producer};
use crate::mode::Mode;
/// What [`RelaxedProducer::push`] returns.
pub use crate::protocol::Push;
use crate::protocol::{check_mode, next_seq, ProtocolError};
use crate::sync::Ordering;

/// What one [`RelaxedConsumer::drain`] did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Drain {
    /// Samples appended to the output.
    pub received: usize,
    /// Samples overwritten before they could be copied, or while they were.
    pub lost: u64,
    /// The producer canceled the ring and everything it wrote is accounted for.
    pub ended: bool,
}

/// The consumer of the relaxed protocol.
pub struct RelaxedConsumer {
    area: Arc<Area>,
    /// Our own copy of read_seq: we are its only writer.
    read_seq: u64,
}

impl RelaxedConsumer {
    pub fn new(area: Arc<Area>) -> Self {
        // Pairs with the store-release of read_seq by a consumer before this one
        // (RelaxedConsumer::drain).
        let read_seq = area.read_seq().load(Ordering::Acquire);
        RelaxedConsumer { area, read_seq }
    }

    /// Snapshot the cursors under the lock, copy without it, then detect under
    /// the lock again which copied slots the producer reused meanwhile. A drain
    /// that finds nothing new takes the lock once.
    pub fn drain(&mut self, out: &mut Vec<Sample>) -> Result<Drain, ProtocolError> {
        let area = &*self.area;
        check_mode(area, Mode::Relaxed)?;
        let n = area.slot_count();
        let r = self.read_seq;
        let (w, canceled) = {
            let _lock = lock_consumer(area);
            // canceled first: it is set after the last write_seq, so once it
            // reads 1 the write_seq read next is final. The loads pair with the
            // producer's store-releases of canceled (kmod/ring.c pfprof_cancel_locked;
            // RelaxedProducer::cancel) and of write_seq after the slot (kmod/ring.c
            // pfprof_write_slot; RelaxedProducer::push). The lock orders both as well
            // (litmus relaxed-cancel, relaxed-publish need one of the two).
            let canceled = area.canceled().load(Ordering::Acquire) != 0;
            (area.write_seq().load(Ordering::Acquire), canceled)
        };
        if w < r {
            return Err(ProtocolError::CursorOutOfRange {
                write_seq: w,
                read_seq: r,
            });
        }
        if w == r {
            // Nothing new: no slot to copy or check, and read_seq already says r.
            return Ok(Drain {
                ended: canceled,
                ..Drain::default()
            });
        }
        let start = r.max(w.saturating_sub(n));
        let mut lost = start - r;
        let first = out.len();
        out.extend(area.read_slots(start, w - start));
        let w2 = {
            let _lock = lock_consumer(area);
            // Pairs with the producer's store-release of write_seq, as above; the
            // lock's acquire is what relaxed-torn needs. read_seq: for a consumer
            // that takes over, and the producer's advisory count, which the lock
            // orders (litmus relaxed-overwritten).
            let w2 = area.write_seq().load(Ordering::Acquire);
            area.read_seq().store(w, Ordering::Release);
            w2
        };
        // Sample s shares its slot with s + n: every s < w2 - n may be torn.
        let torn = w2.saturating_sub(n).clamp(start, w) - start;
        out.drain(first..first + torn as usize);
        lost += torn;
        self.read_seq = w;
        Ok(Drain {
            received: (w - start - torn) as usize,
            lost,
            ended: canceled,
        })
    }
}

/// The producer of the relaxed protocol (the module's role, in user space).
pub struct RelaxedProducer {
    area: Arc<Area>,
    /// Our own write_seq: published, never read back.
    write_seq: u64,
}

impl RelaxedProducer {
    pub fn new(area: Arc<Area>) -> Self {
        // Pairs with the store-release of write_seq by a producer before this one
        // (RelaxedProducer::push).
        let write_seq = area.write_seq().load(Ordering::Acquire);
        RelaxedProducer { area, write_seq }
    }

    /// lock, write the slot (overwriting the oldest when the ring is full),
    /// publish write_seq, unlock. Never blocks: a held lock gives `LockBusy`.
    pub fn push(&mut self, sample: Sample) -> Result<Push, ProtocolError> {
        let area = &*self.area;
        check_mode(area, Mode::Relaxed)?;
        let next_seq = next_seq(self.write_seq)?;
        // Pairs with the store of canceled by whoever ended the ring
        // (RelaxedProducer::cancel, sequentially consistent).
        if area.canceled().load(Ordering::Acquire) != 0 {
            return Ok(Push::Canceled);
        }
        let Some(_lock) = try_lock_producer(area) else {
            return Ok(Push::LockBusy);
        };
        let seq = self.write_seq;
        area.write_slot(seq, &sample);
        // Advisory: read_seq is the consumer's word and may hold anything.
        let read_seq = area.read_seq().load(Ordering::Relaxed);
        if seq >= read_seq.saturating_add(area.slot_count()) {
            area.overwritten().fetch_add(1, Ordering::Relaxed);
        }
        self.write_seq = next_seq;
        // As kmod/ring.c pfprof_write_slot's: the unlock's release orders the slot
        // as well (litmus relaxed-publish, relaxed-torn need one of the two).
        area.write_seq().store(self.write_seq, Ordering::Release);
        Ok(Push::Written)
    }

    /// Set `canceled` after the last sample. Nobody sleeps in relaxed mode.
    pub fn cancel(&mut self) -> Result<(), ProtocolError> {
        // This release or the last push's unlock orders the sample first (litmus
        // relaxed-cancel needs one of the two).
        self.area.canceled().store(1, Ordering::SeqCst);
        Ok(())
    }
}
