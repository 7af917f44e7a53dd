//! Where each image of a JPEG batch goes in its slot's device arena (nvJPEG route).
//!
//! The arena holds `batch × stride` bytes, the stride being a budget per image (640×480
//! RGB, [`super::JPEG_STAGING_PIXELS`]), not a place per image: images are packed one
//! after another, each at an [`ARENA_ALIGN`] boundary, so an image above the budget is
//! decoded on the device as long as the batch as a whole fits. ImageNet-like sets have a
//! tail of images above 640×480 (one in eight of the mixed set), and with a fixed place
//! per image each of those was decoded, cropped and resized on the producer thread, which
//! then set the loader's pace far below its decoder's.
//!
//! Only an image larger than what is left goes through the CPU, and the pack keeps room
//! for it: every place holds at least one CPU-resized output (`size² · 3` bytes, the
//! `floor`), and a place is given only while each position still without one can get a
//! floor after it.

use std::sync::Arc;

use cudarc::driver::sys::CUdeviceptr;
use cudarc::driver::{CudaSlice, CudaStream, DevicePtrMut, DeviceSlice, SyncOnDrop};

/// Alignment of every place in the arena: what `cuMemAlloc` gives the arena itself.
pub(super) const ARENA_ALIGN: usize = 256;

/// The places of one batch's images in an arena of `len` bytes.
#[derive(Debug)]
pub(super) struct ArenaPack {
    len: usize,
    /// The least bytes a place holds: a CPU-resized output, aligned.
    floor: usize,
    /// The first byte not given to a place.
    next: usize,
    /// Each position's place, `(offset, bytes)`, once it has one.
    places: Vec<Option<(usize, usize)>>,
    /// Positions without a place.
    unplaced: usize,
}

impl ArenaPack {
    /// A pack of `positions` images in an arena of `len` bytes, where a CPU-resized
    /// output takes `out` bytes. `None` when the arena cannot give every position a
    /// floor (a stride below the output size).
    pub(super) fn new(len: usize, positions: usize, out: usize) -> Option<ArenaPack> {
        let floor = out.max(1).next_multiple_of(ARENA_ALIGN);
        (floor.checked_mul(positions)? <= len).then(|| ArenaPack {
            len,
            floor,
            next: 0,
            places: vec![None; positions],
            unplaced: positions,
        })
    }

    /// A place for position `i`'s decode of `bytes`: the one it has (an image there
    /// failed) when that is large enough, else new space while the positions still
    /// without a place keep a floor each. `None`: the image is to be resized on the CPU
    /// into [`ArenaPack::cpu_place`].
    pub(super) fn place(&mut self, i: usize, bytes: usize) -> Option<(usize, usize)> {
        if let Some(place) = self.places[i].filter(|&(_, have)| bytes <= have) {
            return Some(place);
        }
        let need = bytes
            .max(self.floor)
            .checked_next_multiple_of(ARENA_ALIGN)?;
        let others = self.unplaced - usize::from(self.places[i].is_none());
        let end = self.next.checked_add(need)?;
        if end.checked_add(self.floor * others)? > self.len {
            return None;
        }
        if self.places[i].is_none() {
            self.unplaced -= 1;
        }
        self.places[i] = Some((self.next, need));
        self.next = end;
        self.places[i]
    }

    /// The offset of a place for position `i`'s CPU-resized output (a floor): the
    /// place it has, or a new one, which the pack always keeps room for.
    pub(super) fn cpu_place(&mut self, i: usize) -> usize {
        match self.places[i] {
            Some((at, _)) => at,
            None => {
                let at = self.next;
                self.next += self.floor;
                debug_assert!(self.next + self.floor * (self.unplaced - 1) <= self.len);
                self.unplaced -= 1;
                self.places[i] = Some((at, self.floor));
                at
            }
        }
    }

    /// The offset of every position's place, in position order (each has one once its
    /// image is staged).
    pub(super) fn offsets(&self) -> Vec<usize> {
        self.places
            .iter()
            .map(|p| p.map_or(0, |(at, _)| at))
            .collect()
    }
}

/// One image's place in an arena, as a decoder output. cudarc's views of one slice can
/// only be cut into equal chunks (or two by two, each borrowing the last), not at the
/// places of a pack; these are made together by [`ArenaPart::carve`], which holds the
/// arena's own borrow for them.
pub(super) struct ArenaPart<'a> {
    ptr: CUdeviceptr,
    len: usize,
    stream: Arc<CudaStream>,
    _arena: std::marker::PhantomData<&'a mut CudaSlice<u8>>,
}

/// The parts of one decode and the arena's borrow, which orders `stream` after the
/// arena's earlier readers and writers when made and records the decode's writes when
/// dropped (after the decode is enqueued, as for a view).
pub(super) struct Carved<'a> {
    pub(super) parts: Vec<ArenaPart<'a>>,
    _written: SyncOnDrop<'a>,
}

impl<'a> ArenaPart<'a> {
    /// The parts of `arena` at `places` (`(offset, bytes)`, disjoint: an [`ArenaPack`]'s),
    /// for writes on `stream`.
    ///
    /// # Panics
    ///
    /// When a place lies outside the arena (a pack made for another arena).
    pub(super) fn carve(
        arena: &'a mut CudaSlice<u8>,
        places: &[(usize, usize)],
        stream: &'a CudaStream,
    ) -> Carved<'a> {
        let len = arena.len();
        let owner = Arc::clone(arena.stream());
        let (base, written) = arena.device_ptr_mut(stream);
        let parts = places
            .iter()
            .map(|&(at, bytes)| {
                assert!(at.checked_add(bytes).is_some_and(|end| end <= len));
                ArenaPart {
                    ptr: base + at as u64,
                    len: bytes,
                    stream: Arc::clone(&owner),
                    _arena: std::marker::PhantomData,
                }
            })
            .collect();
        Carved {
            parts,
            _written: written,
        }
    }
}

impl DeviceSlice<u8> for ArenaPart<'_> {
    fn len(&self) -> usize {
        self.len
    }
    fn stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }
}

impl DevicePtrMut<u8> for ArenaPart<'_> {
    fn device_ptr_mut<'b>(&'b mut self, _: &'b CudaStream) -> (CUdeviceptr, SyncOnDrop<'b>) {
        // The ordering and the record are the arena's, in `Carved`.
        (self.ptr, SyncOnDrop::Record(None))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const OUT: usize = 224 * 224 * 3;
    const BUDGET: usize = 640 * 480 * 3;

    fn disjoint(places: &[(usize, usize)], len: usize) {
        let mut sorted = places.to_vec();
        sorted.sort_unstable();
        for w in sorted.windows(2) {
            assert!(w[0].0 + w[0].1 <= w[1].0, "{w:?} overlap");
        }
        for &(at, bytes) in places {
            assert_eq!(at % ARENA_ALIGN, 0);
            assert!(at + bytes <= len);
        }
    }

    /// Images above the per-image budget go on the device while the batch fits: a batch
    /// of mostly 500×375 images holds several 1,000×600 ones.
    #[test]
    fn images_above_the_budget_fit_beside_smaller_ones() {
        let n = 16;
        let mut pack = ArenaPack::new(n * BUDGET, n, OUT).unwrap();
        let big = 1000 * 600 * 3;
        let mut places = Vec::new();
        for i in 0..n {
            let bytes = if i % 4 == 0 { big } else { 500 * 375 * 3 };
            let place = pack.place(i, bytes).expect("fits");
            assert!(place.1 >= bytes);
            places.push(place);
        }
        disjoint(&places, n * BUDGET);
        assert_eq!(
            pack.offsets(),
            places.iter().map(|p| p.0).collect::<Vec<_>>()
        );
    }

    /// When the batch does not fit, the images that do not go to the CPU, and every
    /// position still gets a place for its CPU-resized output: the room is kept however
    /// large the images before it were.
    #[test]
    fn what_does_not_fit_goes_to_the_cpu_with_room_kept_for_it() {
        let n = 8;
        let len = n * BUDGET;
        let mut pack = ArenaPack::new(len, n, OUT).unwrap();
        let mut places = Vec::new();
        let mut on_cpu = 0;
        for i in 0..n {
            match pack.place(i, 4 * BUDGET) {
                Some(p) => places.push(p),
                None => {
                    on_cpu += 1;
                    places.push((pack.cpu_place(i), OUT.next_multiple_of(ARENA_ALIGN)));
                }
            }
        }
        assert!(on_cpu > 0 && on_cpu < n, "{on_cpu}");
        disjoint(&places, len);
        // A tiny image takes a floor: the CPU output can later go there.
        let mut pack = ArenaPack::new(len, n, OUT).unwrap();
        let (at, bytes) = pack.place(0, 10).unwrap();
        assert_eq!(bytes, OUT.next_multiple_of(ARENA_ALIGN));
        assert_eq!(pack.cpu_place(0), at);
    }

    /// A replacement (an image at this position failed) reuses the place when it fits,
    /// takes a new one when it does not, and never overlaps another position.
    #[test]
    fn a_replacement_reuses_its_place_or_takes_a_new_one() {
        let n = 4;
        let len = n * BUDGET;
        let mut pack = ArenaPack::new(len, n, OUT).unwrap();
        let first = pack.place(0, BUDGET).unwrap();
        assert_eq!(pack.place(0, BUDGET / 2), Some(first));
        let second = pack.place(0, BUDGET + 1).unwrap();
        assert!(second.0 >= first.0 + first.1 && second.1 > BUDGET);
        let rest: Vec<_> = (1..n).map(|i| pack.place(i, OUT).unwrap()).collect();
        disjoint(&[&[second][..], &rest].concat(), len);
        // Too large for anything now: the CPU output goes to the place it has.
        assert_eq!(pack.place(0, len), None);
        assert_eq!(pack.cpu_place(0), second.0);
    }

    /// An arena smaller than a floor per position is refused, not overrun.
    #[test]
    fn an_arena_without_a_floor_per_position_is_refused() {
        assert!(ArenaPack::new(3 * OUT, 4, OUT).is_none());
        assert!(ArenaPack::new(usize::MAX, usize::MAX, OUT).is_none());
        assert!(ArenaPack::new(4 * OUT.next_multiple_of(ARENA_ALIGN), 4, OUT).is_some());
    }
}
