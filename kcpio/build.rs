//! Build script: tells the code which optional compiler features it may use.
//!
//! `kcpio_vaes`: the VAES/VPCLMULQDQ intrinsics (stable since Rust 1.89) for
//! the 256-bit AES-GCM kernel; older compilers build the 128-bit kernel only.
//!
//! The crate's `rust-version` is 1.89 too (its `aes` dependency needs it), so
//! every compiler cargo accepts sets `kcpio_vaes`. The check stays because it
//! still decides what an older compiler builds under `--ignore-rust-version`;
//! dropping it would change that, nothing else.

use std::process::Command;

fn main() {
    println!("cargo:rustc-check-cfg=cfg(kcpio_vaes)");
    println!("cargo:rerun-if-env-changed=RUSTC");
    let rustc = std::env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
    let minor = Command::new(rustc)
        .arg("--version")
        .output()
        .ok()
        .and_then(|out| String::from_utf8(out.stdout).ok())
        .and_then(|v| {
            // "rustc 1.95.0 (...)"
            let version = v.split_whitespace().nth(1)?;
            let mut parts = version.split('.');
            let major: u32 = parts.next()?.parse().ok()?;
            let minor: u32 = parts.next()?.parse().ok()?;
            (major == 1).then_some(minor)
        });
    if minor.is_some_and(|m| m >= 89) {
        println!("cargo:rustc-cfg=kcpio_vaes");
    }
}
