//! Debian's kcptun (`kcptun-client`/`kcptun-server` 20210922), for the
//! tunnel's interop tests.

use std::process::{Command, Stdio};

/// Whether `kcptun-client` is on PATH; prints `SKIPPED <test>` when it is
/// not, and panics instead when `KCPIO_REQUIRE_KCPTUN=1` (CI).
pub fn available(test: &str) -> bool {
    let found = Command::new("kcptun-client")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok();
    if !found {
        assert!(
            std::env::var("KCPIO_REQUIRE_KCPTUN").as_deref() != Ok("1"),
            "KCPIO_REQUIRE_KCPTUN=1 but kcptun-client is not on PATH (scripts/install-kcptun.sh)"
        );
        println!("SKIPPED {test}: kcptun-client not installed (scripts/install-kcptun.sh)");
    }
    found
}
