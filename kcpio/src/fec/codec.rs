//! The Reed-Solomon erasure code kcp-go uses, behind a small internal trait.
//!
//! kcp-go's codec (klauspost/reedsolomon with default options) builds the
//! `S x d` Vandermonde matrix `V[r][c] = r^c` over GF(2^8) (polynomial 0x11D)
//! and multiplies it by the inverse of its top `d x d` square, so the first `d`
//! rows are the identity and row `d + k` yields parity shard `k`.
//! `reed-solomon-erasure` 6 builds the same matrix; tests prove this codec
//! byte-identical to it.
//!
//! Shards live in flat arenas: for encoding, shard `i` at
//! `arena[i * stride ..][.. len]`; for decoding, at any offsets the caller
//! gives (the decoder stores shards in arrival order). No call builds a list
//! of slices and nothing allocates per call once the decode-matrix cache is
//! warm.

use std::sync::{Arc, Mutex, OnceLock, PoisonError, Weak};

use crate::simd::gf256::{self, Kernel, NibbleTable};

/// Why the codec refused a call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum CodecError {
    /// Shapes or buffer sizes do not fit the codec.
    BadArguments,
    /// Fewer than `data_shards` shards are present.
    TooFewShards,
    /// The chosen rows did not invert (impossible for this MDS code; kept
    /// so a bug is an error, not a panic).
    Singular,
}

/// An erasure code over flat shard arenas.
pub(crate) trait ErasureCodec: Send + Sync {
    /// Data shards per group.
    fn data_shards(&self) -> usize;
    /// Parity shards per group.
    fn parity_shards(&self) -> usize;
    /// Parity of the `d` data shards `data[j * stride ..][.. len]`, written to
    /// `parity[k * stride ..][.. len]` for `k < m`.
    fn encode(
        &mut self,
        data: &[u8],
        stride: usize,
        len: usize,
        parity: &mut [u8],
    ) -> Result<(), CodecError>;
    /// Rebuilds the missing data shards of a group. `shards[at[i] ..][.. len]`
    /// holds shard `i` (data then parity) where `present[i]` (zero-padded to
    /// `len`); the missing data shards, in ascending index order, are written
    /// to `out[n * out_stride ..][.. len]`.
    fn reconstruct_data(
        &mut self,
        shards: &[u8],
        at: &[usize],
        len: usize,
        present: &[bool],
        out: &mut [u8],
        out_stride: usize,
    ) -> Result<(), CodecError>;

    /// Heap bytes this codec holds, its shape's matrix included (even when
    /// shared with other codecs).
    fn heap_bytes(&self) -> usize {
        0
    }
}

/// Square matrix inverse over GF(2^8) by Gauss-Jordan elimination, row-major
/// (the tests' oracle for the systematic matrix).
#[cfg(test)]
fn invert(m: &[u8], n: usize) -> Option<Vec<u8>> {
    let (mut work, mut inv) = (Vec::new(), Vec::new());
    invert_into(m, n, &mut work, &mut inv).then_some(inv)
}

#[cfg(test)]
thread_local! {
    /// Work done by matrix arithmetic on this thread (GF(2^8) multiply-adds),
    /// so tests can bound what a peer's choices cost without timing anything.
    pub(crate) static MATRIX_WORK: core::cell::Cell<u64> = const { core::cell::Cell::new(0) };
}

#[inline]
fn count_work(_n: usize) {
    #[cfg(test)]
    MATRIX_WORK.with(|w| w.set(w.get() + _n as u64));
}

/// Gauss-Jordan inversion (the tests' `invert`) into caller-owned buffers (`work` is scratch); `false` if `m`
/// is not `n x n` or is singular.
fn invert_into(m: &[u8], n: usize, work: &mut Vec<u8>, inv: &mut Vec<u8>) -> bool {
    if m.len() != n * n {
        return false;
    }
    let a = work;
    a.clear();
    a.extend_from_slice(m);
    inv.clear();
    inv.resize(n * n, 0);
    for i in 0..n {
        inv[i * n + i] = 1;
    }
    for col in 0..n {
        let Some(pivot) = (col..n).find(|&r| a[r * n + col] != 0) else {
            return false;
        };
        if pivot != col {
            for c in 0..n {
                a.swap(pivot * n + c, col * n + c);
                inv.swap(pivot * n + c, col * n + c);
            }
        }
        let Some(scale) = gf256::inv(a[col * n + col]) else {
            return false;
        };
        for c in 0..n {
            a[col * n + c] = gf256::mul(a[col * n + c], scale);
            inv[col * n + c] = gf256::mul(inv[col * n + c], scale);
        }
        for r in 0..n {
            let f = a[r * n + col];
            if r == col || f == 0 {
                continue;
            }
            count_work(2 * n);
            for c in 0..n {
                a[r * n + c] ^= gf256::mul(f, a[col * n + c]);
                inv[r * n + c] ^= gf256::mul(f, inv[col * n + c]);
            }
        }
    }
    true
}

/// The `total x data` systematic encoding matrix (row-major): the
/// Vandermonde matrix `V[r][c] = r^c` times the inverse of its top square.
///
/// Row `r` of that product holds the coefficients that give a polynomial's
/// value at `r` from its values at `0..data` (for every monomial `x^c`,
/// `sum_k M[r][k] * k^c = r^c`): the Lagrange basis polynomials of the nodes
/// `0..data` evaluated at `r`, `M[r][k] = prod_{j != k} (r - j) / (k - j)`
/// (subtraction is XOR in GF(2^8)). So no `data x data` inversion: building a
/// shape costs `O(total * data)`, which matters because a peer picks the
/// shape a decoder learns, as often as the decoder lets it.
fn encoding_matrix(data: usize, total: usize) -> Option<Vec<u8>> {
    if data == 0 || total <= data || total > 256 {
        return None;
    }
    // 1 / prod_{j != k} (k - j) for each node k.
    let mut inv_den = vec![0u8; data];
    for (k, slot) in inv_den.iter_mut().enumerate() {
        let den = (0..data)
            .filter(|&j| j != k)
            .fold(1u8, |acc, j| gf256::mul(acc, (k ^ j) as u8));
        *slot = gf256::inv(den)?;
    }
    count_work(data * data);
    let mut m = vec![0u8; total * data];
    for r in 0..data {
        m[r * data + r] = 1;
    }
    for r in data..total {
        // r >= data differs from every node, so no factor is zero.
        let num = (0..data).fold(1u8, |acc, j| gf256::mul(acc, (r ^ j) as u8));
        for k in 0..data {
            let without_k = gf256::mul(num, gf256::inv((r ^ k) as u8)?);
            m[r * data + k] = gf256::mul(without_k, inv_den[k]);
        }
        count_work(2 * data);
    }
    Some(m)
}

/// Set of shard indices (< 256) as a bitmask, the key of the decode cache.
type Pattern = [u64; 4];

/// A cached decode: for one present-shard pattern, the source shards used and
/// one row of tables per missing data shard.
struct DecodePlan {
    pattern: Pattern,
    /// Shard indices the missing data are computed from (the first `d` present).
    sources: Vec<usize>,
    /// `missing * d` tables, row-major.
    tables: Vec<NibbleTable>,
}

/// Decode plans kept per codec. kcp-go's codec caches inversions too; a
/// few dozen cover the patterns a lossy link repeats.
const PLAN_CACHE: usize = 32;
/// Table bytes the plan cache may hold; large shapes keep fewer plans
/// (at least one), so memory stays bounded whatever the shape. Shapes with
/// `data * min(data, parity) <= 51` (kcptun's 10 + 3 among them) keep all 32
/// plans, 20 + 10 keeps 8; a single plan is at most
/// `min(data, parity) * data * size_of::<NibbleTable>()` (40) bytes.
pub(crate) const PLAN_BUDGET: usize = 64 * 1024;

/// What a code of one shape computes once: read-only, shared by every codec
/// of that shape (see [`shared_shape`]).
struct Shape {
    data: usize,
    parity: usize,
    /// The full `S x d` encoding matrix.
    matrix: Vec<u8>,
    /// Tables of the parity rows, `m * d`, row-major: built for the first
    /// encoder of this shape (a decoder never needs them, and a peer can
    /// steer a decoder's shape).
    parity_tables: OnceLock<Vec<NibbleTable>>,
}

impl Shape {
    fn parity_tables(&self) -> &[NibbleTable] {
        self.parity_tables.get_or_init(|| {
            self.matrix
                .get(self.data * self.data..)
                .unwrap_or_default()
                .iter()
                .map(|&c| NibbleTable::new(c))
                .collect()
        })
    }

    /// The matrix, which every codec of the shape needs. The parity tables
    /// exist only when this process encodes with the shape (its own
    /// configuration, not a peer's choice), so they are not counted.
    fn heap_bytes(&self) -> usize {
        self.matrix.capacity()
    }
}

/// Shapes in use, weakly held: one matrix and one set of parity tables per
/// `(data, parity)` however many encoders and decoders use it (a server has
/// one of each per session). Consulted when a codec is made, never per packet.
static SHAPES: Mutex<Vec<Weak<Shape>>> = Mutex::new(Vec::new());

/// The shared [`Shape`] of `(data, parity)`, built on first use; `None` for
/// an invalid shape.
fn shared_shape(data: usize, parity: usize) -> Option<Arc<Shape>> {
    if data == 0 || parity == 0 || data + parity > 256 {
        return None;
    }
    let mut shapes = SHAPES.lock().unwrap_or_else(PoisonError::into_inner);
    let found = shapes
        .iter()
        .filter_map(Weak::upgrade)
        .find(|s| s.data == data && s.parity == parity);
    if let Some(shape) = found {
        return Some(shape);
    }
    let matrix = encoding_matrix(data, data + parity)?;
    let parity_tables = OnceLock::new();
    let shape = Arc::new(Shape {
        data,
        parity,
        matrix,
        parity_tables,
    });
    // Shapes nobody uses any more leave the list here, so it stays as long
    // as the number of shapes alive.
    shapes.retain(|w| w.strong_count() > 0);
    shapes.push(Arc::downgrade(&shape));
    Some(shape)
}

/// kcp-go's Reed-Solomon code on the runtime-dispatched GF(2^8) kernel.
pub(crate) struct VandermondeCodec {
    data: usize,
    parity: usize,
    /// Matrix and parity tables, shared with the other codecs of this shape.
    shape: Arc<Shape>,
    plans: Vec<DecodePlan>,
    /// Plans kept at most (`PLAN_CACHE`, fewer for large shapes).
    plan_cap: usize,
    next_victim: usize,
    /// The GF(2^8) kernel (the CPU's best unless a benchmark picks one).
    kernel: Kernel,
    /// Scratch offsets (reused).
    offsets: Vec<usize>,
    /// Scratch for building decode plans: the chosen rows, elimination work
    /// space, and the inverse (allocated by the first decode).
    sub: Vec<u8>,
    work: Vec<u8>,
    inverse: Vec<u8>,
}

impl VandermondeCodec {
    /// The code with `data` data and `parity` parity shards, ready to
    /// encode; `None` unless both are positive and the total is at most 256.
    pub(crate) fn new(data: usize, parity: usize) -> Option<Self> {
        let codec = Self::for_decoding(data, parity)?;
        codec.shape.parity_tables();
        Some(codec)
    }

    /// As [`new`](Self::new), without building the parity tables unless
    /// another codec of the shape already did (an encode builds them).
    pub(crate) fn for_decoding(data: usize, parity: usize) -> Option<Self> {
        let shape = shared_shape(data, parity)?;
        Some(Self {
            data,
            parity,
            shape,
            plans: Vec::new(),
            plan_cap: (PLAN_BUDGET / (data * parity.min(data) * size_of::<NibbleTable>()))
                .clamp(1, PLAN_CACHE),
            next_victim: 0,
            kernel: Kernel::detect(),
            offsets: Vec::with_capacity(data + parity),
            sub: Vec::new(),
            work: Vec::new(),
            inverse: Vec::new(),
        })
    }

    /// Runs on `kernel` instead of the CPU's best (benchmarks compare them; a
    /// kernel the CPU lacks falls back to the portable one).
    pub(crate) fn set_kernel(&mut self, kernel: Kernel) {
        self.kernel = kernel;
    }

    /// Both codecs use the same shared matrix and tables.
    #[cfg(test)]
    pub(crate) fn shares_shape_with(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.shape, &other.shape)
    }

    /// The shape's parity tables exist (an encode, or [`new`](Self::new),
    /// built them).
    #[cfg(test)]
    pub(crate) fn parity_tables_built(&self) -> bool {
        self.shape.parity_tables.get().is_some()
    }

    /// Codecs alive with this codec's shape (this one included).
    #[cfg(test)]
    pub(crate) fn shape_users(&self) -> usize {
        Arc::strong_count(&self.shape)
    }

    #[cfg(test)]
    pub(crate) fn matrix(&self) -> &[u8] {
        &self.shape.matrix
    }

    fn plan_for(&mut self, present: &[bool]) -> Result<usize, CodecError> {
        let total = self.data + self.parity;
        let d = self.data;
        let mut pattern: Pattern = [0; 4];
        let mut count = 0;
        for (i, _) in present.iter().enumerate().take(total).filter(|(_, p)| **p) {
            pattern[i / 64] |= 1 << (i % 64);
            count += 1;
        }
        if count < d {
            return Err(CodecError::TooFewShards);
        }
        if let Some(i) = self.plans.iter().position(|p| p.pattern == pattern) {
            return Ok(i);
        }
        // Build the plan in a cache entry, reusing an evicted entry's buffers.
        let idx = if self.plans.len() < self.plan_cap {
            self.plans.push(DecodePlan {
                pattern: [0; 4],
                sources: Vec::with_capacity(d),
                tables: Vec::new(),
            });
            self.plans.len() - 1
        } else {
            let v = self.next_victim;
            self.next_victim = (v + 1) % self.plan_cap;
            v
        };
        let plan = &mut self.plans[idx];
        // Invalid until complete (no real pattern is empty: count >= d >= 1).
        plan.pattern = [0; 4];
        plan.sources.clear();
        plan.sources
            .extend((0..total).filter(|&i| present[i]).take(d));
        // The sources are the present data shards, then the first `m`
        // present parity rows `R`, one per missing data shard `K`. With
        // `A = M[R][K]` (m x m) and `B = M[R][present data]`, the missing data
        // are `A^-1 * parity + A^-1 * B * data` (XOR is both + and -): only
        // `A` is inverted, so a plan costs `O(m * m * d)`, not the `O(d^3)` of
        // inverting the chosen `d` rows whole (a peer picks the pattern).
        let matrix = &self.shape.matrix;
        let m = (0..d).filter(|&i| !present[i]).count();
        let (known, rows) = plan.sources.split_at(d - m);
        self.sub.clear();
        for &r in rows {
            let row = &matrix[r * d..(r + 1) * d];
            self.sub
                .extend((0..d).filter(|&k| !present[k]).map(|k| row[k]));
        }
        if !invert_into(&self.sub, m, &mut self.work, &mut self.inverse) {
            return Err(CodecError::Singular);
        }
        plan.tables.clear();
        for i in 0..m {
            let inv_row = &self.inverse[i * m..(i + 1) * m];
            for &s in known {
                let c = rows
                    .iter()
                    .zip(inv_row)
                    .fold(0u8, |acc, (&r, &a)| acc ^ gf256::mul(a, matrix[r * d + s]));
                plan.tables.push(NibbleTable::new(c));
            }
            count_work(m * known.len());
            plan.tables
                .extend(inv_row.iter().map(|&a| NibbleTable::new(a)));
        }
        plan.pattern = pattern;
        Ok(idx)
    }
}

impl ErasureCodec for VandermondeCodec {
    fn data_shards(&self) -> usize {
        self.data
    }

    fn parity_shards(&self) -> usize {
        self.parity
    }

    fn encode(
        &mut self,
        data: &[u8],
        stride: usize,
        len: usize,
        parity: &mut [u8],
    ) -> Result<(), CodecError> {
        let d = self.data;
        if len > stride || parity.len() < (self.parity - 1) * stride + len {
            return Err(CodecError::BadArguments);
        }
        self.offsets.clear();
        self.offsets.extend((0..d).map(|j| j * stride));
        rows_product(
            self.kernel,
            self.shape.parity_tables(),
            data,
            &self.offsets,
            parity,
            stride,
            len,
        )
    }

    fn reconstruct_data(
        &mut self,
        shards: &[u8],
        at: &[usize],
        len: usize,
        present: &[bool],
        out: &mut [u8],
        out_stride: usize,
    ) -> Result<(), CodecError> {
        let d = self.data;
        if present.len() != d + self.parity || at.len() != present.len() || len > out_stride {
            return Err(CodecError::BadArguments);
        }
        if present[..d].iter().all(|&p| p) {
            return Ok(());
        }
        let plan = self.plan_for(present)?;
        let plan = &self.plans[plan];
        self.offsets.clear();
        self.offsets.extend(plan.sources.iter().map(|&s| at[s]));
        rows_product(
            self.kernel,
            &plan.tables,
            shards,
            &self.offsets,
            out,
            out_stride,
            len,
        )
    }

    fn heap_bytes(&self) -> usize {
        let plans: usize = self
            .plans
            .iter()
            .map(|p| {
                size_of::<DecodePlan>()
                    + p.sources.capacity() * size_of::<usize>()
                    + p.tables.capacity() * size_of::<NibbleTable>()
            })
            .sum();
        self.shape.heap_bytes()
            + plans
            + (self.plans.capacity() - self.plans.len()) * size_of::<DecodePlan>()
            + self.offsets.capacity() * size_of::<usize>()
            + self.sub.capacity()
            + self.work.capacity()
            + self.inverse.capacity()
    }
}

/// [`gf256::dot_rows_with`], with arguments that do not fit as
/// [`CodecError::BadArguments`].
#[inline]
fn rows_product(
    kernel: Kernel,
    tables: &[NibbleTable],
    src: &[u8],
    offsets: &[usize],
    out: &mut [u8],
    stride: usize,
    len: usize,
) -> Result<(), CodecError> {
    if gf256::dot_rows_with(kernel, tables, src, offsets, out, stride, len) {
        Ok(())
    } else {
        Err(CodecError::BadArguments)
    }
}

/// `reed-solomon-erasure` behind the same trait: the reference the tests
/// compare [`VandermondeCodec`] with.
#[cfg(test)]
pub(crate) struct ReferenceCodec(reed_solomon_erasure::galois_8::ReedSolomon);

#[cfg(test)]
impl ReferenceCodec {
    pub(crate) fn new(data: usize, parity: usize) -> Option<Self> {
        reed_solomon_erasure::galois_8::ReedSolomon::new(data, parity)
            .ok()
            .map(Self)
    }
}

#[cfg(test)]
impl ErasureCodec for ReferenceCodec {
    fn data_shards(&self) -> usize {
        self.0.data_shard_count()
    }

    fn parity_shards(&self) -> usize {
        self.0.parity_shard_count()
    }

    fn encode(
        &mut self,
        data: &[u8],
        stride: usize,
        len: usize,
        parity: &mut [u8],
    ) -> Result<(), CodecError> {
        let d: Vec<&[u8]> = (0..self.data_shards())
            .map(|j| &data[j * stride..j * stride + len])
            .collect();
        let mut p: Vec<Vec<u8>> = vec![vec![0; len]; self.parity_shards()];
        self.0
            .encode_sep(&d, &mut p)
            .map_err(|_| CodecError::BadArguments)?;
        for (k, s) in p.iter().enumerate() {
            parity[k * stride..k * stride + len].copy_from_slice(s);
        }
        Ok(())
    }

    fn reconstruct_data(
        &mut self,
        shards: &[u8],
        at: &[usize],
        len: usize,
        present: &[bool],
        out: &mut [u8],
        stride: usize,
    ) -> Result<(), CodecError> {
        let mut v: Vec<Option<Vec<u8>>> = present
            .iter()
            .enumerate()
            .map(|(i, &p)| p.then(|| shards[at[i]..at[i] + len].to_vec()))
            .collect();
        self.0
            .reconstruct_data(&mut v)
            .map_err(|_| CodecError::TooFewShards)?;
        let mut n = 0;
        for i in 0..self.data_shards() {
            if !present[i] {
                let s = v[i].as_ref().ok_or(CodecError::TooFewShards)?;
                out[n * stride..n * stride + len].copy_from_slice(s);
                n += 1;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn fill(seed: u64, n: usize) -> Vec<u8> {
        let mut x = seed | 1;
        (0..n)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect()
    }

    #[test]
    fn top_of_the_encoding_matrix_is_the_identity() {
        for (d, m) in [(1, 1), (10, 3), (3, 2), (200, 56), (1, 255)] {
            let c = VandermondeCodec::new(d, m).unwrap();
            for r in 0..d {
                for col in 0..d {
                    assert_eq!(c.matrix()[r * d + col], u8::from(r == col));
                }
            }
        }
        assert!(VandermondeCodec::new(0, 1).is_none());
        assert!(VandermondeCodec::new(1, 0).is_none());
        assert!(VandermondeCodec::new(200, 57).is_none());
        assert!(VandermondeCodec::new(255, 1).is_some());
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(120))]
        /// Parity and reconstruction are byte-identical to reed-solomon-erasure
        /// for random shapes (1..=32 data, 1..=16 parity), lengths and erasures.
        #[test]
        fn codec_matches_reed_solomon_erasure(
            d in 1usize..=32,
            m in 1usize..=16,
            len in prop_oneof![1usize..=200, 1400usize..=1500],
            stride_extra in 0usize..40,
            seed in any::<u64>(),
            erase_seed in any::<u64>(),
        ) {
            let stride = len + stride_extra;
            let total = d + m;
            let mut arena = fill(seed, total * stride);
            let mut ours = VandermondeCodec::new(d, m).unwrap();
            let mut reference = ReferenceCodec::new(d, m).unwrap();
            let mut p1 = vec![0u8; m * stride];
            let mut p2 = vec![0u8; m * stride];
            ours.encode(&arena[..d * stride], stride, len, &mut p1).unwrap();
            reference.encode(&arena[..d * stride], stride, len, &mut p2).unwrap();
            for k in 0..m {
                prop_assert_eq!(&p1[k * stride..k * stride + len], &p2[k * stride..k * stride + len]);
            }
            arena[d * stride..].copy_from_slice(&p1);
            // Erase up to m shards, at least one data shard when possible.
            let order = fill(erase_seed, total);
            let mut idx: Vec<usize> = (0..total).collect();
            idx.sort_by_key(|&i| order[i]);
            let lost = 1 + (order[0] as usize % m);
            let mut present = vec![true; total];
            for &i in idx.iter().take(lost) {
                present[i] = false;
            }
            let missing: Vec<usize> = (0..d).filter(|&i| !present[i]).collect();
            let mut out1 = vec![0u8; d * stride];
            let mut out2 = vec![0u8; d * stride];
            let mut damaged = arena.clone();
            for (i, _) in present.iter().enumerate().filter(|(_, p)| !**p) {
                damaged[i * stride..(i + 1) * stride].fill(0x5A);
            }
            let at: Vec<usize> = (0..total).map(|i| i * stride).collect();
            ours.reconstruct_data(&damaged, &at, len, &present, &mut out1, stride).unwrap();
            reference.reconstruct_data(&damaged, &at, len, &present, &mut out2, stride).unwrap();
            for (n, &i) in missing.iter().enumerate() {
                prop_assert_eq!(&out1[n * stride..n * stride + len], &arena[i * stride..i * stride + len]);
                prop_assert_eq!(&out2[n * stride..n * stride + len], &arena[i * stride..i * stride + len]);
            }
            // Same pattern again: served from the plan cache, same bytes.
            let mut out3 = vec![0u8; d * stride];
            ours.reconstruct_data(&damaged, &at, len, &present, &mut out3, stride).unwrap();
            prop_assert_eq!(out1, out3);
        }
    }

    #[test]
    fn large_and_lopsided_shapes_match_the_reference() {
        for (d, m) in [
            (128, 128),
            (200, 56),
            (255, 1),
            (1, 255),
            (100, 100),
            (64, 32),
        ] {
            let len = 37;
            let arena = fill((d * 1000 + m) as u64, d * len);
            let mut p1 = vec![0u8; m * len];
            let mut p2 = vec![0u8; m * len];
            VandermondeCodec::new(d, m)
                .unwrap()
                .encode(&arena, len, len, &mut p1)
                .unwrap();
            ReferenceCodec::new(d, m)
                .unwrap()
                .encode(&arena, len, len, &mut p2)
                .unwrap();
            assert_eq!(p1, p2, "{d}+{m}");
        }
    }

    /// The systematic matrix built from Lagrange coefficients is the
    /// Vandermonde matrix times the inverse of its top square, as kcp-go's
    /// codec builds it, for small, large and lopsided shapes.
    #[test]
    fn lagrange_matrix_is_the_inverted_vandermonde() {
        for (d, p) in [
            (1, 1),
            (1, 255),
            (2, 1),
            (3, 2),
            (10, 3),
            (20, 10),
            (64, 64),
            (127, 1),
            (187, 3),
            (255, 1),
        ] {
            let total = d + p;
            let mut v = vec![0u8; total * d];
            for r in 0..total {
                for c in 0..d {
                    v[r * d + c] = gf256::pow(r as u8, c);
                }
            }
            let top = invert(&v[..d * d], d).unwrap();
            let mut want = vec![0u8; total * d];
            for r in 0..total {
                for c in 0..d {
                    want[r * d + c] =
                        (0..d).fold(0, |acc, k| acc ^ gf256::mul(v[r * d + k], top[k * d + c]));
                }
            }
            assert_eq!(encoding_matrix(d, total).unwrap(), want, "{d} + {p}");
        }
    }

    /// A shape's matrix costs `O(total * data)` and a decode plan for `m`
    /// missing shards `O(m * m * data)`: both are picked by the peer (the
    /// learned shape, the loss pattern), so neither may cost a `data x data`
    /// inversion (about 4 million multiply-adds for 127 + 1).
    #[test]
    fn building_a_shape_and_a_plan_costs_no_full_inversion() {
        let work = || MATRIX_WORK.with(core::cell::Cell::get);
        let (d, p) = (127, 1);
        let before = work();
        let mut codec = VandermondeCodec::for_decoding(d, p).unwrap();
        let built = work() - before;
        assert!(built <= 3 * ((d + p) * d) as u64, "shape: {built}");
        let len = 16;
        let data = fill(7, d * len);
        let mut parity = vec![0u8; p * len];
        let mut enc = VandermondeCodec::new(d, p).unwrap();
        enc.encode(&data, len, len, &mut parity).unwrap();
        let mut shards = data.clone();
        shards.extend_from_slice(&parity);
        let at: Vec<usize> = (0..d + p).map(|i| i * len).collect();
        for missing in [0, 63, 126] {
            let mut present = vec![true; d + p];
            present[missing] = false;
            let before = work();
            let mut out = vec![0u8; len];
            codec
                .reconstruct_data(&shards, &at, len, &present, &mut out, len)
                .unwrap();
            let plan = work() - before;
            assert_eq!(out, data[missing * len..][..len]);
            assert!(plan <= 2 * d as u64, "plan for shard {missing}: {plan}");
        }
    }

    #[test]
    fn too_few_shards_is_an_error() {
        let mut c = VandermondeCodec::new(3, 2).unwrap();
        let shards = vec![0u8; 5 * 4];
        let mut out = vec![0u8; 3 * 4];
        let present = [true, false, false, false, true];
        assert_eq!(
            c.reconstruct_data(&shards, &[0, 4, 8, 12, 16], 4, &present, &mut out, 4),
            Err(CodecError::TooFewShards)
        );
        assert_eq!(
            c.reconstruct_data(&shards, &[0, 4, 8, 12], 4, &present[..4], &mut out, 4),
            Err(CodecError::BadArguments)
        );
        assert_eq!(
            c.encode(&shards, 4, 5, &mut out),
            Err(CodecError::BadArguments)
        );
    }
}
