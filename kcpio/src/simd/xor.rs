//! XOR of a byte string into another (the `xor` packet cipher's pad), 32
//! bytes per instruction with AVX2 when the CPU has it.

/// `dst[i] ^= src[i]` for `i < min(dst.len(), src.len())`.
pub(crate) fn xor_into(dst: &mut [u8], src: &[u8]) {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx2") {
            // SAFETY: the CPU supports AVX2 (checked just above).
            unsafe { x86::xor_into_avx2(dst, src) };
            return;
        }
    }
    portable(dst, src);
}

/// The fallback and the kernel's reference: 16-byte chunks on local copies
/// (which LLVM turns into SSE2 XORs), then bytes.
pub(crate) fn portable(dst: &mut [u8], src: &[u8]) {
    let n = dst.len().min(src.len());
    let (dst, src) = (&mut dst[..n], &src[..n]);
    let mut d = dst.chunks_exact_mut(16);
    let mut s = src.chunks_exact(16);
    for (dc, sc) in (&mut d).zip(&mut s) {
        let mut a = [0u8; 16];
        let mut b = [0u8; 16];
        a.copy_from_slice(dc);
        b.copy_from_slice(sc);
        for (x, y) in a.iter_mut().zip(b) {
            *x ^= y;
        }
        dc.copy_from_slice(&a);
    }
    for (x, y) in d.into_remainder().iter_mut().zip(s.remainder()) {
        *x ^= *y;
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use core::arch::x86_64::*;

    /// # Safety
    /// The CPU must support AVX2.
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn xor_into_avx2(dst: &mut [u8], src: &[u8]) {
        let n = dst.len().min(src.len());
        let (d, s) = (dst.as_mut_ptr(), src.as_ptr());
        let mut i = 0;
        // Four vectors per step: the loads of one do not wait on the
        // loop's branch, and a 1500-byte pad is 11 steps and a remainder.
        while i + 128 <= n {
            // SAFETY: i + 128 <= n <= both lengths; unaligned access is allowed.
            unsafe {
                let x0 = _mm256_loadu_si256(d.add(i).cast());
                let x1 = _mm256_loadu_si256(d.add(i + 32).cast());
                let x2 = _mm256_loadu_si256(d.add(i + 64).cast());
                let x3 = _mm256_loadu_si256(d.add(i + 96).cast());
                let y0 = _mm256_loadu_si256(s.add(i).cast());
                let y1 = _mm256_loadu_si256(s.add(i + 32).cast());
                let y2 = _mm256_loadu_si256(s.add(i + 64).cast());
                let y3 = _mm256_loadu_si256(s.add(i + 96).cast());
                _mm256_storeu_si256(d.add(i).cast(), _mm256_xor_si256(x0, y0));
                _mm256_storeu_si256(d.add(i + 32).cast(), _mm256_xor_si256(x1, y1));
                _mm256_storeu_si256(d.add(i + 64).cast(), _mm256_xor_si256(x2, y2));
                _mm256_storeu_si256(d.add(i + 96).cast(), _mm256_xor_si256(x3, y3));
            }
            i += 128;
        }
        while i + 32 <= n {
            // SAFETY: i + 32 <= n <= both lengths; unaligned access is allowed.
            unsafe {
                let x = _mm256_loadu_si256(d.add(i).cast());
                let y = _mm256_loadu_si256(s.add(i).cast());
                _mm256_storeu_si256(d.add(i).cast(), _mm256_xor_si256(x, y));
            }
            i += 32;
        }
        if i + 16 <= n {
            // SAFETY: i + 16 <= n <= both lengths; unaligned access is allowed.
            unsafe {
                let x = _mm_loadu_si128(d.add(i).cast());
                let y = _mm_loadu_si128(s.add(i).cast());
                _mm_storeu_si128(d.add(i).cast(), _mm_xor_si128(x, y));
            }
            i += 16;
        }
        if let (Some(dt), Some(st)) = (dst.get_mut(i..n), src.get(i..n)) {
            super::tail(dt, st);
        }
    }
}

/// `dst[i] ^= src[i]` 8, then 4, 2 and 1 bytes at a time, in registers:
/// the last bytes (fewer than 16) after the vector loop.
fn tail(dst: &mut [u8], src: &[u8]) {
    let n = dst.len().min(src.len());
    let mut i = 0;
    macro_rules! word {
        ($t:ty) => {{
            const W: usize = size_of::<$t>();
            if let (Some(dw), Some(sw)) = (dst.get_mut(i..i + W), src.get(i..i + W)) {
                if let (Ok(a), Ok(b)) = (<[u8; W]>::try_from(&*dw), <[u8; W]>::try_from(sw)) {
                    let x = <$t>::from_ne_bytes(a) ^ <$t>::from_ne_bytes(b);
                    dw.copy_from_slice(&x.to_ne_bytes());
                    i += W;
                }
            }
        }};
    }
    while i + 8 <= n {
        word!(u64);
    }
    word!(u32);
    word!(u16);
    if let (Some(x), Some(y)) = (dst.get_mut(i), src.get(i)) {
        *x ^= *y;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn dispatched_matches_bytewise(
            dst in proptest::collection::vec(any::<u8>(), 0..1600),
            src in proptest::collection::vec(any::<u8>(), 0..1600),
        ) {
            let mut want = dst.clone();
            for (x, y) in want.iter_mut().zip(&src) {
                *x ^= *y;
            }
            let mut got = dst.clone();
            xor_into(&mut got, &src);
            prop_assert_eq!(&got, &want);
            let mut port = dst.clone();
            portable(&mut port, &src);
            prop_assert_eq!(&port, &want);
            let mut words = dst;
            tail(&mut words, &src);
            prop_assert_eq!(&words, &want);
        }
    }
}
