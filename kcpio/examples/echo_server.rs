//! The smallest kcpio server: echoes every byte back on each session.
//!
//! ```text
//! cargo run --example echo_server            # listens on 127.0.0.1:29900
//! cargo run --example echo_client            # in another terminal
//! ```
//!
//! An optional first argument sets the listen address.

use kcpio::{Config, KcpListener, Key, Method};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let addr = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:29900".to_owned());
    // The defaults: kcptun's `fast` timing, windows for a long fat path, a
    // 10 s keepalive and a 30 s idle timeout (KCP has no FIN: a session
    // ends when its peer is gone that long).
    let config = Config::builder()
        .crypto(Method::Aes128, Key::passphrase("it's a secret"))
        .build()?;

    let listener = KcpListener::bind(&addr, &config).await?;
    println!("echo server on {}", listener.local_addr()?);
    loop {
        let (stream, peer) = listener.accept().await?;
        println!("{peer}: new session, conv {:08x}", stream.conv());
        tokio::spawn(async move {
            let (mut rd, mut wr) = stream.into_split();
            // Runs until the session fails (the peer went away: idle timeout).
            let res = tokio::io::copy(&mut rd, &mut wr).await;
            println!("{peer}: session over ({res:?})");
        });
    }
}
