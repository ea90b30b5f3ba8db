//! `kcpio-tunnel`: kcptun's client and server over kcpio (see the crate docs).

use std::process::ExitCode;

fn main() -> ExitCode {
    let prepared = match kcpio_tunnel::prepare(std::env::args()) {
        Ok(p) => p,
        Err(code) => return code,
    };
    // One thread for the UDP mode, the cores for TCP (see `single_threaded`).
    let runtime = match prepared.runtime() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("kcpio-tunnel: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    runtime.block_on(async {
        tokio::select! {
            code = prepared.run() => code,
            // SIGTERM or SIGINT: return, so the runtime drops every task and
            // socket; a fake-TCP socket removes its firewall rules on drop.
            () = terminated() => ExitCode::SUCCESS,
        }
    })
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
