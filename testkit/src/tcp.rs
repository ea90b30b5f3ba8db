//! A TCP echo server for tunnel tests.

use std::net::SocketAddr;

use tokio::io::AsyncWriteExt;
use tokio::net::TcpListener;

/// A TCP echo server on loopback: echoes as it reads, and closes its side
/// after the client's EOF. Runs until the runtime ends.
///
/// # Panics
///
/// Binding or reading the loopback address failed.
pub async fn echo_server() -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((conn, _)) = l.accept().await {
            tokio::spawn(async move {
                let (mut r, mut w) = conn.into_split();
                let _ = tokio::io::copy(&mut r, &mut w).await;
                let _ = w.shutdown().await;
            });
        }
    });
    addr
}
