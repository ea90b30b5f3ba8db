//! `kcpio-tunnel`: kcptun's client and server over kcpio (see the crate docs).

use std::process::ExitCode;

#[tokio::main]
async fn main() -> ExitCode {
    tokio::select! {
        code = kcpio_tunnel::run(std::env::args()) => code,
        // SIGTERM or SIGINT: return, so the runtime drops every task and
        // socket; a fake-TCP socket removes its firewall rules on drop.
        () = terminated() => ExitCode::SUCCESS,
    }
}

/// Resolves at the first SIGTERM or SIGINT (never if neither can be watched).
#[cfg(unix)]
async fn terminated() {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        return std::future::pending().await;
    };
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
}

/// Resolves at the first Ctrl-C (never if it cannot be watched).
#[cfg(not(unix))]
async fn terminated() {
    if tokio::signal::ctrl_c().await.is_err() {
        std::future::pending::<()>().await;
    }
}
