//! Crypto open (and seal) for the methods of one family; see
//! [`kcpio_fuzz::check_crypto`] for the invariants.
#![no_main]

use std::sync::LazyLock;

use kcpio::crypto::{Method, PacketCrypto};
use kcpio_fuzz::{check_crypto, crypto};
use libfuzzer_sys::fuzz_target;

static METHODS: LazyLock<Vec<Method>> = LazyLock::new(|| kcpio_fuzz::CFB.to_vec());
static CRYPTOS: LazyLock<Vec<PacketCrypto>> =
    LazyLock::new(|| METHODS.iter().map(|&m| crypto(m)).collect());

fuzz_target!(|data: &[u8]| {
    check_crypto(&METHODS, &CRYPTOS, data);
});
