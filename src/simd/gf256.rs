//! GF(2^8) multiply-accumulate kernels with runtime CPU dispatch.
