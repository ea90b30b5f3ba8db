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
        let whole = n - n % 32;
        let (d, s) = (dst.as_mut_ptr(), src.as_ptr());
        let mut i = 0;
        while i < whole {
            // SAFETY: i + 32 <= whole <= n <= both lengths; unaligned access is allowed.
            unsafe {
                let x = _mm256_loadu_si256(d.add(i).cast());
                let y = _mm256_loadu_si256(s.add(i).cast());
                _mm256_storeu_si256(d.add(i).cast(), _mm256_xor_si256(x, y));
            }
            i += 32;
        }
        if let (Some(dt), Some(st)) = (dst.get_mut(whole..n), src.get(whole..n)) {
            super::portable(dt, st);
        }
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
            let mut port = dst;
            portable(&mut port, &src);
            prop_assert_eq!(&port, &want);
        }
    }
}
