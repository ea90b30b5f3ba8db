//! `kcpio-tunnel`: kcptun's client and server over kcpio (see the crate docs).

use std::process::ExitCode;

#[tokio::main]
async fn main() -> ExitCode {
    kcpio_tunnel::run(std::env::args()).await
}
