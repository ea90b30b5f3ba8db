//! The smallest kcpio server: echoes every byte back on each session.
//!
//! ```text
//! cargo run --example echo_server            # listens on 127.0.0.1:29900
//! cargo run --example echo_client            # in another terminal
//! ```
//!
//! An optional first argument sets the listen address.

use std::time::Duration;

use kcpio::{Config, KcpListener, Key, Method, Preset};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let addr = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:29900".to_owned());
    let config = Config::builder()
        .preset(Preset::Fast3)
        .crypto(Method::Aes128, Key::passphrase("it's a secret"))
        // KCP has no FIN: a session ends when its peer stays silent this long.
        .idle_timeout(Duration::from_secs(30))
        .build()?;

    let listener = KcpListener::bind(&addr, &config).await?;
    println!("echo server on {}", listener.local_addr()?);
    loop {
        let (stream, peer) = listener.accept().await?;
        println!("{peer}: new session, conv {:08x}", stream.conv());
        tokio::spawn(async move {
            let (mut rd, mut wr) = stream.into_split();
            // Runs until the session fails (idle timeout or dead link).
            let res = tokio::io::copy(&mut rd, &mut wr).await;
            println!("{peer}: session over ({res:?})");
        });
    }
}
