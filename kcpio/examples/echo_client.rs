//! The smallest kcpio client: sends a few lines to the echo server and prints
//! what comes back with the round-trip time.
//!
//! ```text
//! cargo run --example echo_server            # listens on 127.0.0.1:29900
//! cargo run --example echo_client            # in another terminal
//! cargo run --example echo_client -- 127.0.0.1:29900 "some text" "more text"
//! ```

use std::time::Instant;

use kcpio::{Config, KcpStream, Key, Method};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let addr = args.next().unwrap_or_else(|| "127.0.0.1:29900".to_owned());
    let mut lines: Vec<String> = args.collect();
    if lines.is_empty() {
        lines = vec!["hello over KCP".into(), "and once more".into()];
    }
    // Both ends must agree on the cipher and key; the rest is local.
    let config = Config::builder()
        .crypto(Method::Aes128, Key::passphrase("it's a secret"))
        .build()?;

    let mut stream = KcpStream::connect(&addr, &config).await?;
    for line in &lines {
        let start = Instant::now();
        stream.write_all(line.as_bytes()).await?;
        let mut echo = vec![0; line.len()];
        stream.read_exact(&mut echo).await?;
        println!(
            "{} ({:.1} ms)",
            String::from_utf8_lossy(&echo),
            start.elapsed().as_secs_f64() * 1e3
        );
    }
    let stats = stream.stats();
    println!("srtt {:?}, rto {:?}", stats.srtt, stats.rto);
    // Waits until everything written is acknowledged.
    stream.shutdown().await?;
    Ok(())
}
