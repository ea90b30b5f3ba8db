//! GF(2^8) arithmetic and the multiply-accumulate kernel behind the FEC codec.
//!
//! The field is the one kcp-go's Reed-Solomon code uses: polynomial
//! x^8 + x^4 + x^3 + x^2 + 1 (0x11D), generator 2.
//!
//! The hot operation is a dot product of shards with constants:
//! `out[i] = c_0 * in_0[i] ^ c_1 * in_1[i] ^ ...`. A product `c * x` is split
//! by nibbles, `c * x = c * (x & 15) ^ c * (x & 0xF0)`, so two 16-entry tables
//! per constant ([`NibbleTable`]) answer it; `pshufb` looks up 16 or 32 bytes
//! at once. Where the CPU has GFNI, one `vgf2p8affineqb` multiplies 32 bytes
//! by a constant instead: multiplication by `c` is linear over GF(2), an 8x8
//! bit matrix ([`NibbleTable`] carries it too). The implementation (GFNI,
//! AVX2, SSSE3 or portable) is chosen once per process with
//! `is_x86_feature_detected!` and all four give identical bytes.

use std::sync::atomic::{AtomicU8, Ordering};

/// The field's reducing polynomial (without the x^8 term: 0x11D & 0xFF).
const POLY: u16 = 0x11D;

/// `EXP[i] = 2^i`, doubled in length so `EXP[log a + log b]` needs no reduction.
static EXP: [u8; 512] = build_exp();
/// `LOG[a]` = discrete log of `a` base 2; `LOG[0]` is unused.
static LOG: [u8; 256] = build_log();
/// `MUL[c][x] = c * x`: the portable kernel's one lookup per byte (64 KiB).
static MUL: [[u8; 256]; 256] = build_mul();

const fn build_mul() -> [[u8; 256]; 256] {
    let exp = build_exp();
    let log = build_log();
    let mut t = [[0u8; 256]; 256];
    let mut c = 1;
    while c < 256 {
        let mut x = 1;
        while x < 256 {
            t[c][x] = exp[log[c] as usize + log[x] as usize];
            x += 1;
        }
        c += 1;
    }
    t
}

const fn build_exp() -> [u8; 512] {
    let mut t = [0u8; 512];
    let mut x: u16 = 1;
    let mut i = 0;
    while i < 255 {
        t[i] = x as u8;
        t[i + 255] = x as u8;
        x <<= 1;
        if x & 0x100 != 0 {
            x ^= POLY;
        }
        i += 1;
    }
    // Entries 510 and 511 are never read (log a + log b <= 508).
    t
}

const fn build_log() -> [u8; 256] {
    let exp = build_exp();
    let mut t = [0u8; 256];
    let mut i = 0;
    while i < 255 {
        t[exp[i] as usize] = i as u8;
        i += 1;
    }
    t
}

/// `a * b` in GF(2^8).
#[inline]
pub(crate) fn mul(a: u8, b: u8) -> u8 {
    if a == 0 || b == 0 {
        0
    } else {
        EXP[LOG[a as usize] as usize + LOG[b as usize] as usize]
    }
}

/// The multiplicative inverse of `a`; `None` for zero.
#[inline]
pub(crate) fn inv(a: u8) -> Option<u8> {
    if a == 0 {
        None
    } else {
        Some(EXP[255 - LOG[a as usize] as usize])
    }
}

/// `a^n`, with `a^0 = 1` for every `a` (also 0), as the Vandermonde
/// construction of kcp-go's codec defines it (the codec builds its matrix
/// from Lagrange coefficients; tests check it against this definition).
#[cfg(test)]
pub(crate) fn pow(a: u8, n: usize) -> u8 {
    if n == 0 {
        1
    } else if a == 0 {
        0
    } else {
        EXP[(LOG[a as usize] as usize * n) % 255]
    }
}

/// Multiplication by one constant `c`: the two 16-entry lookup tables
/// `lo[x] = c * x` and `hi[x] = c * (x << 4)` for `x < 16`, and the same map
/// as the 8x8 bit matrix `vgf2p8affineqb` applies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(C)]
pub(crate) struct NibbleTable {
    lo: [u8; 16],
    hi: [u8; 16],
    /// Byte `7 - i` holds, at bit `k`, bit `i` of `c * 2^k`: output bit `i`
    /// is the parity of that byte AND the input (Intel's `affine_byte`).
    affine: u64,
}

impl NibbleTable {
    /// The tables of multiplication by `c`.
    pub(crate) fn new(c: u8) -> Self {
        // Multiplication by `c` is linear over XOR: build each table from the
        // products of its four bits (8 multiplications instead of 32).
        let mut lo = [0u8; 16];
        let mut hi = [0u8; 16];
        for bit in 0..4 {
            let step = 1usize << bit;
            let (pl, ph) = (mul(c, 1 << bit), mul(c, 16 << bit));
            for x in step..2 * step {
                lo[x] = lo[x - step] ^ pl;
                hi[x] = hi[x - step] ^ ph;
            }
        }
        // Column k of the matrix is the product of bit k: lo[1, 2, 4, 8]
        // and hi[1, 2, 4, 8] are c * 2^0 .. c * 2^7.
        let mut affine = 0u64;
        for k in 0..8 {
            let product = if k < 4 { lo[1 << k] } else { hi[1 << (k - 4)] };
            for i in 0..8 {
                if product >> i & 1 != 0 {
                    affine |= 1u64 << (8 * (7 - i) + k);
                }
            }
        }
        Self { lo, hi, affine }
    }

    #[cfg(test)]
    #[inline(always)]
    fn apply(&self, x: u8) -> u8 {
        self.lo[(x & 15) as usize] ^ self.hi[(x >> 4) as usize]
    }
}

/// Which implementation [`dot_rows_with`] and [`dot_with`] run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kernel {
    /// Byte-at-a-time table lookups; runs everywhere.
    Portable,
    /// 16 bytes per `pshufb`.
    Ssse3,
    /// 32 bytes per `vpshufb`.
    Avx2,
    /// 32 bytes per `vgf2p8affineqb` (GFNI with AVX2).
    Gfni,
    /// 64 bytes per `vgf2p8affineqb` with the matrix broadcast from memory
    /// in the same instruction (GFNI with AVX-512).
    Gfni512,
}

const UNKNOWN: u8 = 0;
static SELECTED: AtomicU8 = AtomicU8::new(UNKNOWN);

impl Kernel {
    /// The best kernel this CPU supports, detected once per process.
    pub(crate) fn detect() -> Kernel {
        match SELECTED.load(Ordering::Relaxed) {
            1 => Kernel::Portable,
            2 => Kernel::Ssse3,
            3 => Kernel::Avx2,
            4 => Kernel::Gfni,
            5 => Kernel::Gfni512,
            _ => {
                let k = Self::probe();
                let code = match k {
                    Kernel::Portable => 1,
                    Kernel::Ssse3 => 2,
                    Kernel::Avx2 => 3,
                    Kernel::Gfni => 4,
                    Kernel::Gfni512 => 5,
                };
                SELECTED.store(code, Ordering::Relaxed);
                k
            }
        }
    }

    fn probe() -> Kernel {
        #[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
        {
            if Self::gfni512_supported() {
                return Kernel::Gfni512;
            }
            if Self::gfni_supported() {
                return Kernel::Gfni;
            }
            if std::is_x86_feature_detected!("avx2") {
                return Kernel::Avx2;
            }
            if std::is_x86_feature_detected!("ssse3") {
                return Kernel::Ssse3;
            }
        }
        Kernel::Portable
    }

    /// Every kernel this CPU can run (for tests and benchmarks).
    #[cfg_attr(not(test), allow(dead_code))]
    pub(crate) fn available() -> Vec<Kernel> {
        let mut v = vec![Kernel::Portable];
        #[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
        {
            if std::is_x86_feature_detected!("ssse3") {
                v.push(Kernel::Ssse3);
            }
            if std::is_x86_feature_detected!("avx2") {
                v.push(Kernel::Avx2);
            }
            if Self::gfni_supported() {
                v.push(Kernel::Gfni);
            }
            if Self::gfni512_supported() {
                v.push(Kernel::Gfni512);
            }
        }
        v
    }

    /// GFNI with AVX-512 (F and BW), and a compiler with their intrinsics.
    #[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
    fn gfni512_supported() -> bool {
        Self::gfni_supported()
            && std::is_x86_feature_detected!("avx512f")
            && std::is_x86_feature_detected!("avx512bw")
    }

    /// GFNI and AVX2, and a compiler with their intrinsics (stable since
    /// Rust 1.89: `kcpio_vaes`, set by build.rs).
    #[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
    fn gfni_supported() -> bool {
        cfg!(kcpio_vaes)
            && std::is_x86_feature_detected!("avx2")
            && std::is_x86_feature_detected!("gfni")
    }
}

/// `out[i] = XOR over j of tables[j] * src[offsets[j] + i]` for every
/// `i < out.len()`, with the kernel chosen for this CPU.
///
/// Returns `false` (and leaves `out` untouched) when the arguments do not fit:
/// `tables` and `offsets` differ in length or some `offsets[j] + out.len()`
/// exceeds `src.len()`.
#[cfg(test)]
pub(crate) fn dot(tables: &[NibbleTable], src: &[u8], offsets: &[usize], out: &mut [u8]) -> bool {
    dot_with(Kernel::detect(), tables, src, offsets, out)
}

/// One dot product, `out[i] = XOR over j of tables[j] * src[offsets[j] + i]`,
/// with an explicit kernel (tests compare them; a kernel the CPU cannot run
/// falls back to the portable one). `false`, with `out` untouched, when the
/// arguments do not fit.
pub(crate) fn dot_with(
    kernel: Kernel,
    tables: &[NibbleTable],
    src: &[u8],
    offsets: &[usize],
    out: &mut [u8],
) -> bool {
    if tables.len() != offsets.len() {
        return false;
    }
    let n = out.len();
    for &off in offsets {
        match off.checked_add(n) {
            Some(end) if end <= src.len() => {}
            _ => return false,
        }
    }
    if tables.is_empty() {
        out.fill(0);
        return true;
    }
    #[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
    {
        match kernel {
            #[cfg(kcpio_vaes)]
            Kernel::Gfni512 if Kernel::gfni512_supported() => {
                // SAFETY: GFNI and AVX-512 are present (checked just above);
                // the same bounds as for AVX2 below were checked at entry.
                unsafe { x86::rows_gfni512::<1>(tables, src, offsets, out, n, n) };
                return true;
            }
            #[cfg(kcpio_vaes)]
            Kernel::Gfni if Kernel::gfni_supported() => {
                // SAFETY: GFNI and AVX2 are present (checked just above); the
                // same bounds as for AVX2 below were checked at entry.
                unsafe { x86::rows_gfni::<1>(tables, src, offsets, out, n, n) };
                return true;
            }
            Kernel::Avx2 if std::is_x86_feature_detected!("avx2") => {
                // SAFETY: AVX2 is present (checked just above); one row of
                // `tables.len() == offsets.len()` tables, every
                // `offsets[j] + n <= src.len()` was checked at entry, and the single
                // output row is `out[..n]` (stride `n`).
                unsafe { x86::rows_avx2::<1>(tables, src, offsets, out, n, n) };
                return true;
            }
            Kernel::Ssse3 if std::is_x86_feature_detected!("ssse3") => {
                // SAFETY: SSSE3 is present, and the same bounds as above were checked.
                unsafe { x86::rows_ssse3::<1>(tables, src, offsets, out, n, n) };
                return true;
            }
            _ => {}
        }
    }
    let _ = kernel;
    dot_portable(tables, src, offsets, out, 0);
    true
}

/// [`dot_rows_with`] on the CPU's best kernel.
#[cfg(test)]
pub(crate) fn dot_rows(
    tables: &[NibbleTable],
    src: &[u8],
    offsets: &[usize],
    out: &mut [u8],
    out_stride: usize,
    len: usize,
) -> bool {
    dot_rows_with(Kernel::detect(), tables, src, offsets, out, out_stride, len)
}

/// Several dot products over the same inputs in one pass:
/// `out[r * out_stride + i] = XOR over j of tables[r * k + j] * src[offsets[j] + i]`
/// for every row `r < tables.len() / k` and `i < len`, where `k = offsets.len()`.
/// This is a matrix-times-shards product (parity rows, or decode rows).
///
/// The SIMD kernels split each input chunk (32 or 16 bytes) into nibbles
/// once and feed up to four rows from it; the portable one runs row by row.
/// The kernel is explicit (one the CPU lacks runs portably). Returns `false`
/// (and writes nothing) when the arguments do not fit.
pub(crate) fn dot_rows_with(
    kernel: Kernel,
    tables: &[NibbleTable],
    src: &[u8],
    offsets: &[usize],
    out: &mut [u8],
    out_stride: usize,
    len: usize,
) -> bool {
    let k = offsets.len();
    if k == 0 || !tables.len().is_multiple_of(k) || out_stride < len {
        return false;
    }
    let rows = tables.len() / k;
    if rows == 0 {
        return true;
    }
    match (rows - 1)
        .checked_mul(out_stride)
        .and_then(|x| x.checked_add(len))
    {
        Some(end) if end <= out.len() => {}
        _ => return false,
    }
    for &off in offsets {
        match off.checked_add(len) {
            Some(end) if end <= src.len() => {}
            _ => return false,
        }
    }
    #[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
    {
        #[derive(Clone, Copy, PartialEq)]
        enum Simd {
            #[cfg(kcpio_vaes)]
            Gfni512,
            #[cfg(kcpio_vaes)]
            Gfni,
            Avx2,
            Ssse3,
        }
        let simd = match kernel {
            #[cfg(kcpio_vaes)]
            Kernel::Gfni512 if Kernel::gfni512_supported() => Some(Simd::Gfni512),
            #[cfg(kcpio_vaes)]
            Kernel::Gfni if Kernel::gfni_supported() => Some(Simd::Gfni),
            Kernel::Avx2 if std::is_x86_feature_detected!("avx2") => Some(Simd::Avx2),
            Kernel::Ssse3 if std::is_x86_feature_detected!("ssse3") => Some(Simd::Ssse3),
            _ => None,
        };
        if let Some(simd) = simd {
            let mut r = 0;
            while r < rows {
                let block = (rows - r).min(4);
                let t = &tables[r * k..(r + block) * k];
                let o = &mut out[r * out_stride..];
                // SAFETY: the chosen instruction set is present (checked above);
                // every input satisfies `offsets[j] + len <= src.len()` and every
                // output row `q < block` satisfies `q * out_stride + len <= o.len()`
                // (checked at entry for all rows), with `t.len() == block * k`.
                unsafe {
                    match (simd, block) {
                        #[cfg(kcpio_vaes)]
                        (Simd::Gfni512, 4) => {
                            x86::rows_gfni512::<4>(t, src, offsets, o, out_stride, len)
                        }
                        #[cfg(kcpio_vaes)]
                        (Simd::Gfni512, 3) => {
                            x86::rows_gfni512::<3>(t, src, offsets, o, out_stride, len)
                        }
                        #[cfg(kcpio_vaes)]
                        (Simd::Gfni512, 2) => {
                            x86::rows_gfni512::<2>(t, src, offsets, o, out_stride, len)
                        }
                        #[cfg(kcpio_vaes)]
                        (Simd::Gfni512, _) => {
                            x86::rows_gfni512::<1>(t, src, offsets, o, out_stride, len)
                        }
                        #[cfg(kcpio_vaes)]
                        (Simd::Gfni, 4) => x86::rows_gfni::<4>(t, src, offsets, o, out_stride, len),
                        #[cfg(kcpio_vaes)]
                        (Simd::Gfni, 3) => x86::rows_gfni::<3>(t, src, offsets, o, out_stride, len),
                        #[cfg(kcpio_vaes)]
                        (Simd::Gfni, 2) => x86::rows_gfni::<2>(t, src, offsets, o, out_stride, len),
                        #[cfg(kcpio_vaes)]
                        (Simd::Gfni, _) => x86::rows_gfni::<1>(t, src, offsets, o, out_stride, len),
                        (Simd::Avx2, 4) => x86::rows_avx2::<4>(t, src, offsets, o, out_stride, len),
                        (Simd::Avx2, 3) => x86::rows_avx2::<3>(t, src, offsets, o, out_stride, len),
                        (Simd::Avx2, 2) => x86::rows_avx2::<2>(t, src, offsets, o, out_stride, len),
                        (Simd::Avx2, _) => x86::rows_avx2::<1>(t, src, offsets, o, out_stride, len),
                        (Simd::Ssse3, 4) => {
                            x86::rows_ssse3::<4>(t, src, offsets, o, out_stride, len)
                        }
                        (Simd::Ssse3, 3) => {
                            x86::rows_ssse3::<3>(t, src, offsets, o, out_stride, len)
                        }
                        (Simd::Ssse3, 2) => {
                            x86::rows_ssse3::<2>(t, src, offsets, o, out_stride, len)
                        }
                        (Simd::Ssse3, _) => {
                            x86::rows_ssse3::<1>(t, src, offsets, o, out_stride, len)
                        }
                    }
                }
                r += block;
            }
            return true;
        }
    }
    for (r, row) in tables.chunks_exact(k).enumerate() {
        let dst = &mut out[r * out_stride..r * out_stride + len];
        if !dot_with(kernel, row, src, offsets, dst) {
            return false;
        }
    }
    true
}

/// The portable kernel row by row, for inputs shorter than one SIMD chunk:
/// `tables.len() / offsets.len()` rows, `out_stride` apart, `len` bytes each.
/// Bounds were checked by the caller; slicing keeps it safe.
#[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
#[cold]
#[inline(never)]
fn rows_portable(
    tables: &[NibbleTable],
    src: &[u8],
    offsets: &[usize],
    out: &mut [u8],
    out_stride: usize,
    len: usize,
) {
    let k = offsets.len();
    if k == 0 {
        return;
    }
    for (r, row) in tables.chunks_exact(k).enumerate() {
        dot_portable(
            row,
            src,
            offsets,
            &mut out[r * out_stride..r * out_stride + len],
            0,
        );
    }
}

/// The portable kernel over `out[start..]`; the SIMD kernels finish their
/// tails with it. Bounds were checked by the caller; slicing keeps it safe.
fn dot_portable(
    tables: &[NibbleTable],
    src: &[u8],
    offsets: &[usize],
    out: &mut [u8],
    start: usize,
) {
    let n = out.len();
    let Some(out) = out.get_mut(start..) else {
        return;
    };
    let mut first = true;
    for (t, &off) in tables.iter().zip(offsets) {
        let Some(input) = src.get(off + start..off + n) else {
            return;
        };
        // The table's constant is `lo[1]` (= c * 1); its full product row
        // answers each byte with one lookup. Four bytes per step.
        let row = &MUL[usize::from(t.lo[1])];
        let mut o4 = out.chunks_exact_mut(4);
        let mut x4 = input.chunks_exact(4);
        if first {
            for (o, x) in (&mut o4).zip(&mut x4) {
                o[0] = row[usize::from(x[0])];
                o[1] = row[usize::from(x[1])];
                o[2] = row[usize::from(x[2])];
                o[3] = row[usize::from(x[3])];
            }
            for (o, &x) in o4.into_remainder().iter_mut().zip(x4.remainder()) {
                *o = row[usize::from(x)];
            }
            first = false;
        } else {
            for (o, x) in (&mut o4).zip(&mut x4) {
                o[0] ^= row[usize::from(x[0])];
                o[1] ^= row[usize::from(x[1])];
                o[2] ^= row[usize::from(x[2])];
                o[3] ^= row[usize::from(x[3])];
            }
            for (o, &x) in o4.into_remainder().iter_mut().zip(x4.remainder()) {
                *o ^= row[usize::from(x)];
            }
        }
    }
}

#[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
mod x86 {
    // Since Rust 1.87 the register-only intrinsics are safe inside a
    // `#[target_feature]` function; an MSRV of 1.85 needed them in `unsafe`
    // blocks, which newer compilers call unused. The MSRV is 1.89 now, so the
    // blocks (and this allow) could go.
    #![allow(unused_unsafe, reason = "MSRV 1.85: intrinsics are unsafe fns there")]

    #[cfg(target_arch = "x86")]
    use core::arch::x86::*;
    #[cfg(target_arch = "x86_64")]
    use core::arch::x86_64::*;

    use super::{NibbleTable, rows_portable};

    /// One row kernel, `$w` bytes per step: the body of [`rows_avx2`] and
    /// [`rows_ssse3`], with the instruction set's intrinsics as arguments and
    /// `table: |p| ...` loading a 16-byte nibble table at `p` into a vector.
    macro_rules! row_kernel {
        (
            $(#[$doc:meta])*
            fn $name:ident, feature $feature:literal, width $w:literal,
            loadu $loadu:ident, storeu $storeu:ident, set1 $set1:ident, zero $zero:ident,
            and $and:ident, srli $srli:ident, xor $xor:ident, shuffle $shuffle:ident,
            table |$p:ident| $table:expr
        ) => {
            $(#[$doc])*
            #[target_feature(enable = $feature)]
            pub(super) unsafe fn $name<const R: usize>(
                tables: &[NibbleTable],
                src: &[u8],
                offsets: &[usize],
                out: &mut [u8],
                out_stride: usize,
                len: usize,
            ) {
                if len < $w {
                    rows_portable(tables, src, offsets, out, out_stride, len);
                    return;
                }
                let k = offsets.len();
                let base = src.as_ptr();
                let dst = out.as_mut_ptr();
                // SAFETY: register-only intrinsic; the instruction set is
                // enabled on this function.
                let mask = unsafe { $set1(0x0f) };
                let mut i = 0;
                loop {
                    if i + $w > len {
                        i = len - $w;
                    }
                    // SAFETY: register-only intrinsic.
                    let mut acc = [unsafe { $zero() }; R];
                    for (j, &off) in offsets.iter().enumerate() {
                        // SAFETY: `off + i + $w <= off + len <= src.len()`, so the
                        // `$w`-byte unaligned load is inside `src`; the rest are
                        // register operations.
                        let (lo, hi) = unsafe {
                            let x = $loadu(base.add(off + i).cast());
                            ($and(x, mask), $and($srli(x, 4), mask))
                        };
                        for (r, a) in acc.iter_mut().enumerate() {
                            let t = &tables[r * k + j];
                            // SAFETY: each table half is a 16-byte array read with
                            // an unaligned 16-byte load; the rest are register
                            // operations.
                            *a = unsafe {
                                let tlo = {
                                    let $p = t.lo.as_ptr();
                                    $table
                                };
                                let thi = {
                                    let $p = t.hi.as_ptr();
                                    $table
                                };
                                $xor(*a, $xor($shuffle(tlo, lo), $shuffle(thi, hi)))
                            };
                        }
                    }
                    for (r, a) in acc.iter().enumerate() {
                        // SAFETY: `r * out_stride + i + $w <= (R - 1) * out_stride + len
                        // <= out.len()`.
                        unsafe { $storeu(dst.add(r * out_stride + i).cast(), *a) };
                    }
                    if i + $w == len {
                        break;
                    }
                    i += $w;
                }
            }
        };
    }

    row_kernel! {
        /// AVX2 body of [`super::dot_rows_with`] for `R` rows at once: each 32-byte
        /// input chunk is loaded and split into nibbles once for all rows. A ragged
        /// end is one more chunk ending at `len`, overlapping bytes already written
        /// (outputs are recomputed, not accumulated); `len < 32` runs portably.
        ///
        /// # Safety
        /// The CPU supports AVX2, `tables.len() == R * offsets.len()`,
        /// `offsets[j] + len <= src.len()` for every `j`, `out_stride >= len`, and
        /// `(R - 1) * out_stride + len <= out.len()`.
        fn rows_avx2, feature "avx2", width 32,
        loadu _mm256_loadu_si256, storeu _mm256_storeu_si256,
        set1 _mm256_set1_epi8, zero _mm256_setzero_si256,
        and _mm256_and_si256, srli _mm256_srli_epi64,
        xor _mm256_xor_si256, shuffle _mm256_shuffle_epi8,
        table |p| _mm256_broadcastsi128_si256(_mm_loadu_si128(p.cast()))
    }

    /// GFNI body of [`super::dot_rows_with`] for `R` rows at once: each
    /// 32-byte input chunk is loaded once and multiplied into every row's
    /// accumulator with one `vgf2p8affineqb` per row (the constant's bit
    /// matrix, broadcast). A ragged end is one more chunk ending at `len`, as
    /// in [`rows_avx2`]; `len < 32` runs portably.
    ///
    /// # Safety
    /// The CPU supports GFNI and AVX2, `tables.len() == R * offsets.len()`,
    /// `offsets[j] + len <= src.len()` for every `j`, `out_stride >= len`, and
    /// `(R - 1) * out_stride + len <= out.len()`.
    #[cfg(kcpio_vaes)]
    #[clippy::msrv = "1.89"]
    #[target_feature(enable = "gfni,avx2")]
    pub(super) unsafe fn rows_gfni<const R: usize>(
        tables: &[NibbleTable],
        src: &[u8],
        offsets: &[usize],
        out: &mut [u8],
        out_stride: usize,
        len: usize,
    ) {
        const W: usize = 32;
        if len < W {
            rows_portable(tables, src, offsets, out, out_stride, len);
            return;
        }
        let k = offsets.len();
        if tables.len() != R * k {
            return; // excluded by the contract; lets the compiler drop index checks
        }
        let base = src.as_ptr();
        let dst = out.as_mut_ptr();
        let mut i = 0;
        loop {
            if i + W > len {
                i = len - W;
            }
            let mut acc = [_mm256_setzero_si256(); R];
            for (j, &off) in offsets.iter().enumerate() {
                // SAFETY: `off + i + W <= off + len <= src.len()`, so the
                // 32-byte unaligned load is inside `src`.
                let x = unsafe { _mm256_loadu_si256(base.add(off + i).cast()) };
                for (r, a) in acc.iter_mut().enumerate() {
                    let m = _mm256_set1_epi64x(tables[r * k + j].affine as i64);
                    *a = _mm256_xor_si256(*a, _mm256_gf2p8affine_epi64_epi8::<0>(x, m));
                }
            }
            for (r, a) in acc.iter().enumerate() {
                // SAFETY: `r * out_stride + i + W <= (R - 1) * out_stride + len
                // <= out.len()`.
                unsafe { _mm256_storeu_si256(dst.add(r * out_stride + i).cast(), *a) };
            }
            if i + W == len {
                break;
            }
            i += W;
        }
    }

    /// [`rows_gfni`] 64 bytes at a time with AVX-512: each constant's matrix
    /// is broadcast by the multiply itself (an EVEX memory operand), so a
    /// row costs one multiply and one XOR per 64 input bytes. `len < 64`
    /// goes to [`rows_gfni`].
    ///
    /// # Safety
    /// The CPU supports GFNI, AVX2, AVX-512F and AVX-512BW; otherwise as
    /// [`rows_gfni`].
    #[cfg(kcpio_vaes)]
    #[clippy::msrv = "1.89"]
    #[target_feature(enable = "gfni,avx2,avx512f,avx512bw")]
    pub(super) unsafe fn rows_gfni512<const R: usize>(
        tables: &[NibbleTable],
        src: &[u8],
        offsets: &[usize],
        out: &mut [u8],
        out_stride: usize,
        len: usize,
    ) {
        const W: usize = 64;
        if len < W {
            // SAFETY: the caller's contract is `rows_gfni`'s, and its
            // features are a subset of this function's.
            unsafe { rows_gfni::<R>(tables, src, offsets, out, out_stride, len) };
            return;
        }
        let k = offsets.len();
        if tables.len() != R * k {
            return; // excluded by the contract; lets the compiler drop index checks
        }
        let base = src.as_ptr();
        let dst = out.as_mut_ptr();
        let mut i = 0;
        loop {
            if i + W > len {
                i = len - W;
            }
            let mut acc = [_mm512_setzero_si512(); R];
            for (j, &off) in offsets.iter().enumerate() {
                // SAFETY: `off + i + W <= off + len <= src.len()`, so the
                // 64-byte unaligned load is inside `src`.
                let x = unsafe { _mm512_loadu_si512(base.add(off + i).cast()) };
                for (r, a) in acc.iter_mut().enumerate() {
                    let m = _mm512_set1_epi64(tables[r * k + j].affine as i64);
                    *a = _mm512_xor_si512(*a, _mm512_gf2p8affine_epi64_epi8::<0>(x, m));
                }
            }
            for (r, a) in acc.iter().enumerate() {
                // SAFETY: `r * out_stride + i + W <= (R - 1) * out_stride + len
                // <= out.len()`.
                unsafe { _mm512_storeu_si512(dst.add(r * out_stride + i).cast(), *a) };
            }
            if i + W == len {
                break;
            }
            i += W;
        }
    }

    row_kernel! {
        /// SSSE3 body of [`super::dot_rows_with`] for `R` rows at once, 16 bytes per
        /// step; same scheme and contract as [`rows_avx2`], `len < 16` portable.
        ///
        /// # Safety
        /// The CPU supports SSSE3, `tables.len() == R * offsets.len()`,
        /// `offsets[j] + len <= src.len()` for every `j`, `out_stride >= len`, and
        /// `(R - 1) * out_stride + len <= out.len()`.
        fn rows_ssse3, feature "ssse3", width 16,
        loadu _mm_loadu_si128, storeu _mm_storeu_si128,
        set1 _mm_set1_epi8, zero _mm_setzero_si128,
        and _mm_and_si128, srli _mm_srli_epi64,
        xor _mm_xor_si128, shuffle _mm_shuffle_epi8,
        table |p| _mm_loadu_si128(p.cast())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Bit-by-bit multiplication, independent of the tables.
    fn slow_mul(mut a: u8, mut b: u8) -> u8 {
        let mut p = 0u8;
        while b != 0 {
            if b & 1 != 0 {
                p ^= a;
            }
            let carry = a & 0x80 != 0;
            a <<= 1;
            if carry {
                a ^= (POLY & 0xFF) as u8;
            }
            b >>= 1;
        }
        p
    }

    #[test]
    fn tables_agree_with_carryless_multiplication() {
        for a in 0..=255u8 {
            for b in 0..=255u8 {
                assert_eq!(mul(a, b), slow_mul(a, b), "{a} * {b}");
                let t = NibbleTable::new(a);
                assert_eq!(t.apply(b), slow_mul(a, b));
                assert_eq!(MUL[a as usize][b as usize], slow_mul(a, b));
                assert_eq!(t.lo[1], a);
            }
            if a != 0 {
                assert_eq!(mul(a, inv(a).unwrap()), 1);
            }
        }
        assert_eq!(inv(0), None);
        assert_eq!(pow(0, 0), 1);
        assert_eq!(pow(0, 3), 0);
        assert_eq!(pow(2, 8), 0x1D);
        assert_eq!(pow(3, 2), mul(3, 3));
    }

    fn reference_dot(coefs: &[u8], src: &[u8], offsets: &[usize], n: usize) -> Vec<u8> {
        (0..n)
            .map(|i| {
                coefs
                    .iter()
                    .zip(offsets)
                    .fold(0u8, |acc, (&c, &o)| acc ^ slow_mul(c, src[o + i]))
            })
            .collect()
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(200))]
        #[test]
        fn every_kernel_matches_the_bitwise_reference(
            coefs in proptest::collection::vec(any::<u8>(), 0..12),
            n in 0usize..300,
            seed in any::<u64>(),
            slack in 0usize..40,
        ) {
            let mut rng = seed;
            let mut next = || { rng = rng.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407); (rng >> 33) as u8 };
            let len = coefs.len() * (n + slack) + slack;
            let src: Vec<u8> = (0..len).map(|_| next()).collect();
            // Unaligned, overlapping-free offsets.
            let offsets: Vec<usize> = (0..coefs.len()).map(|j| j * (n + slack) + (slack / 2)).collect();
            let tables: Vec<NibbleTable> = coefs.iter().map(|&c| NibbleTable::new(c)).collect();
            let want = reference_dot(&coefs, &src, &offsets, n);
            for k in Kernel::available() {
                let mut out = vec![0xAAu8; n];
                prop_assert!(dot_with(k, &tables, &src, &offsets, &mut out));
                prop_assert_eq!(&out, &want, "kernel {:?}", k);
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(200))]
        #[test]
        fn row_kernels_match_row_by_row_portable(
            rows in 1usize..7,
            k in 1usize..12,
            len in 0usize..200,
            gap in 0usize..40,
            seed in any::<u64>(),
        ) {
            let mut x = seed | 1;
            let mut next = || { x ^= x << 13; x ^= x >> 7; x ^= x << 17; x as u8 };
            let stride = len + gap;
            let src: Vec<u8> = (0..k * stride + 3).map(|_| next()).collect();
            let offsets: Vec<usize> = (0..k).map(|j| j * stride + 3).collect();
            let tables: Vec<NibbleTable> = (0..rows * k).map(|_| NibbleTable::new(next())).collect();
            let mut want = vec![0u8; rows * stride];
            for r in 0..rows {
                let dst = &mut want[r * stride..r * stride + len];
                prop_assert!(dot_with(Kernel::Portable, &tables[r * k..(r + 1) * k], &src, &offsets, dst));
            }
            for kernel in Kernel::available() {
                let mut out = vec![0u8; rows * stride];
                prop_assert!(dot_rows_with(kernel, &tables, &src, &offsets, &mut out, stride, len));
                for r in 0..rows {
                    prop_assert_eq!(&out[r * stride..r * stride + len], &want[r * stride..r * stride + len], "{:?} row {}", kernel, r);
                }
            }
        }
    }

    #[test]
    fn row_kernel_refuses_misfit_arguments() {
        let t = [NibbleTable::new(3); 4];
        let src = [1u8; 64];
        let mut out = [0u8; 64];
        assert!(!dot_rows(&t, &src, &[], &mut out, 16, 16));
        assert!(
            !dot_rows(&t, &src, &[0, 1, 2], &mut out, 16, 16),
            "4 tables for 3 inputs"
        );
        assert!(
            !dot_rows(&t, &src, &[0, 50], &mut out, 16, 16),
            "input past the end"
        );
        assert!(
            !dot_rows(&t, &src, &[0, 1], &mut out, 8, 16),
            "rows would overlap"
        );
        assert!(
            !dot_rows(&t, &src, &[0, 1], &mut out, 60, 16),
            "second row past the end"
        );
        assert!(dot_rows(&t, &src, &[0, 1], &mut out, 32, 16));
        assert_eq!(out[..16], [0u8; 16], "3*1 ^ 3*1 = 0");
    }

    #[test]
    fn out_of_bounds_arguments_are_refused() {
        let t = [NibbleTable::new(7)];
        let src = [1u8; 10];
        let mut out = [9u8; 8];
        assert!(!dot(&t, &src, &[3], &mut out));
        assert_eq!(out, [9u8; 8]);
        assert!(!dot(&t, &src, &[usize::MAX], &mut out));
        assert!(!dot(&t, &src, &[0, 1], &mut out));
        assert!(dot(&t, &src, &[2], &mut out));
        assert_eq!(out, [mul(7, 1); 8]);
    }
}
